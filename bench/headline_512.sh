#!/bin/bash
# The headline: cosmoflow-lbann at 512^3 x 4, batch 1, two training steps on
# 8 ranks (2x2x2) of this 2-core, 24 GiB machine. Synthetic data generated
# block by block (distributed FFT): no rank ever holds the whole sample.
# Writes bench/out/headline_512.{log,json}: the log (steps, finite loss,
# profile) and the job's peak memory summed over ranks, and
# bench/out/headline_512.rev: the code it measured (performance.py says when
# that is not the code it runs with).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-build/bin/hybrid3d}
mkdir -p bench/out
rm -f bench/out/headline_512.rev  # written again only when the run succeeds
rev=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD 2>/dev/null || rev="$rev+changes"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
/usr/bin/python3 bench/job_memory.py --json bench/out/headline_512.json -- \
  mpirun -np 8 --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 \
  "$BIN" train --model cosmoflow-lbann --input-size 512 --batch-size 1 --train-samples 1 --val-samples 0 \
  --steps 2 --spatial 2x2x2 --threads 1 --log-every 1 --profile bench/out/headline_512_profile.json \
  2>&1 | tee bench/out/headline_512.log
echo "$rev" > bench/out/headline_512.rev
