#!/bin/bash
# Threads per rank as mpirun launches them (parallel/threads.hpp): under
# mpirun's default binding (one core per rank) a lone rank runs 1 thread and
# says once how to get its share; asked for more threads than its core it
# warns naming --bind-to none and --map-by slot:PE=N; unbound, or with PE=2,
# it runs its share in silence. Needs 2 cores (mpirun binds only where the
# ranks fit the cores): a machine with 1 is a reported skip.
source "$(dirname "$0")/setup.sh"
N=$(nproc)
if [ "$N" -lt 2 ]; then echo "skip: $N core(s); binding needs 2"; exit 77; fi
RUN="$BIN train --model cosmoflow --input-size 32 --batch-size 2 --train-samples 2 --val-samples 0 --steps 1 --data-store-mib 0"
threads() { grep -o '[0-9]* thread(s) per rank' <<<"$1" | cut -d' ' -f1; }
warnings() { grep -c 'hybrid3d: warning' <<<"$1" || true; }
# Nothing of the test harness's own settings reaches these runs.
unset OMP_NUM_THREADS

# 1. mpirun's default binding: one thread on the rank's core, one warning saying how to get N.
out=$(mpirun -np 1 $RUN 2>&1)
[ "$(threads "$out")" = 1 ] && [ "$(warnings "$out")" = 1 ] && grep -q -- "--bind-to none" <<<"$out" \
  && grep -q "PE=$N" <<<"$out" || { echo "FAIL default binding: $out"; exit 1; }
pass "mpirun -np 1: 1 thread on its bound core, one warning: $(grep -m1 warning <<<"$out" | cut -c1-100)..."

# 2. --threads 2 on that one core: runs 2, warns once with the fix.
out=$(mpirun -np 1 $RUN --threads 2 2>&1)
[ "$(threads "$out")" = 2 ] && [ "$(warnings "$out")" = 1 ] && grep -q "2 threads run on the 1 CPU" <<<"$out" \
  && grep -q -- "--bind-to none" <<<"$out" || { echo "FAIL --threads 2 on one core: $out"; exit 1; }
pass "--threads 2 bound to one core: warned once"

# 3. Two ranks each asked for 2 threads on one core each: one warning for the job, not one per rank.
out=$(mpirun -np 2 $RUN --spatial 2x1x1 --threads 2 2>&1)
[ "$(warnings "$out")" = 1 ] || { echo "FAIL two ranks, one warning: $out"; exit 1; }
pass "2 ranks x 2 threads on a core each: one warning for the job"

# 4. Unbound or given the node's N CPUs: N threads, no warning.
for opts in "--bind-to none" "--map-by slot:PE=$N"; do
  out=$(mpirun -np 1 $opts $RUN 2>&1)
  [ "$(threads "$out")" = "$N" ] && [ "$(warnings "$out")" = 0 ] || { echo "FAIL $opts: $out"; exit 1; }
  pass "mpirun -np 1 $opts: $N threads, no warning"
done

# 5. Two ranks, default binding: a core each; that is their share on 2 cores
# (no warning), and less than it on more (one warning).
out=$(mpirun -np 2 $RUN --spatial 2x1x1 2>&1)
want=$([ "$N" -ge 4 ] && echo 1 || echo 0)
[ "$(threads "$out")" = 1 ] && [ "$(warnings "$out")" = "$want" ] || { echo "FAIL np 2: $out"; exit 1; }
pass "mpirun -np 2 on $N cores: 1 thread each, $want warning(s)"

# 6. --bind-to core asked for on purpose: the user's choice, 1 thread, no warning.
out=$(mpirun -np 1 --bind-to core $RUN 2>&1)
[ "$(threads "$out")" = 1 ] && [ "$(warnings "$out")" = 0 ] || { echo "FAIL --bind-to core: $out"; exit 1; }
pass "mpirun -np 1 --bind-to core: 1 thread, no warning"
finish 7
