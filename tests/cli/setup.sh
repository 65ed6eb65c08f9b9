# Shared start of the CLI tests: the binary ($1), Python ($2), a scratch
# directory removed on exit, and the mpirun prefix.
set -euo pipefail
BIN=$(readlink -f "$1")  # absolute: a test may cd into its scratch directory
PY="${2:-/usr/bin/python3}"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
MPI="mpirun --oversubscribe --bind-to none -x OMP_NUM_THREADS=1"
