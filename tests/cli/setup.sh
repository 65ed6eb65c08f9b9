# Shared start of the CLI tests: the binary ($1), Python ($2), a scratch
# directory removed on exit, and the mpirun prefix.
set -euo pipefail
BIN=$(readlink -f "$1")  # absolute: a test may cd into its scratch directory
PY="${2:-/usr/bin/python3}"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
MPI="mpirun --oversubscribe --bind-to none -x OMP_NUM_THREADS=1"
# agree A B [N]: the numbers in the two lists (tokens that are not numbers,
# like "4/6" or "3:", are left out) agree within 2e-5, as 5-decimal prints
# of the same fp32 run on two layouts do; and there are N of them if given.
agree() {
  "$PY" -c "
import sys
def nums(s):
    out = []
    for t in s.split():
        try:
            out.append(float(t))
        except ValueError:
            pass
    return out
a, b = nums(sys.argv[1]), nums(sys.argv[2])
n = int(sys.argv[3]) if len(sys.argv) > 3 else len(a)
assert len(a) == len(b) == n > 0 and all(abs(x - y) <= 2e-5 for x, y in zip(a, b)), (a, b)" "$@"
}
# pass MESSAGE: one check passed. finish N: the closing line, once the N
# checks the script means to run have passed (a check skipped by mistake
# fails the test instead of shrinking the count).
PASSED=0
pass() { echo "ok   $*"; PASSED=$((PASSED + 1)); }
finish() {
  [ "$PASSED" -eq "$1" ] || { echo "FAIL $PASSED checks passed, but $1 were meant to run"; exit 1; }
  echo "$PASSED passed, 0 failed"
}
