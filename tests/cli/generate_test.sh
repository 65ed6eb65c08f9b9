#!/bin/bash
# `hybrid3d generate`: the same bytes of `full` on 1, 2 and 4 ranks (one
# universe per 2 ranks there), the CosmoFlow layout, a rerun that skips
# complete files, and training from the files giving the same losses as
# training on the same universes in memory.
source "$(dirname "$0")/setup.sh"
GEN="generate --count 3 --size 32 --seed 11 --quiet"

"$BIN" $GEN --out "$WORK/r1"
$MPI -np 2 "$BIN" $GEN --out "$WORK/r2"
$MPI -np 4 "$BIN" $GEN --out "$WORK/r4" --ranks-per-universe 2

"$PY" - "$WORK" <<'PYEOF'
import sys, os, h5py, numpy as np
work = sys.argv[1]
names = sorted(os.listdir(os.path.join(work, "r1")))
assert names == ["univ_000000.h5", "univ_000001.h5", "univ_000002.h5"], names
for n in names:
    a = h5py.File(os.path.join(work, "r1", n))
    assert a["full"].shape == (32, 32, 32, 4) and a["full"].dtype == np.int16, (a["full"].shape, a["full"].dtype)
    assert a["unitPar"].shape == (4,) and a["physPar"].shape == (4,)
    full = a["full"][:].tobytes()
    for r in ("r2", "r4"):
        b = h5py.File(os.path.join(work, r, n))
        assert b["full"][:].tobytes() == full, f"{r}/{n}: full differs from the 1-rank file"
        assert np.array_equal(b["unitPar"][:], a["unitPar"][:]), f"{r}/{n}: unitPar differs"
print("ok   identical full, unitPar on 1, 2, 4 ranks; CosmoFlow layout")
PYEOF

before=$(stat -c %Y "$WORK/r1/univ_000000.h5")
out=$("$BIN" generate --count 4 --size 32 --seed 11 --out "$WORK/r1")
grep -q "1 written, 3 already complete" <<<"$out" || { echo "FAIL rerun: $out"; exit 1; }
[ "$(stat -c %Y "$WORK/r1/univ_000000.h5")" = "$before" ] || { echo "FAIL rerun rewrote a complete file"; exit 1; }
pass "rerun skips complete files"

TRAIN="train --model cosmoflow --input-size 32 --batch-size 2 --steps 2 --val-samples 0 --seed 11 --threads 1 --log-every 1"
from_files=$($MPI -np 2 "$BIN" $TRAIN --spatial 2x1x1 --data "$WORK/r2" | grep '^step' | awk '{print $3, $4}')
in_memory=$($MPI -np 2 "$BIN" $TRAIN --spatial 2x1x1 --train-samples 3 | grep '^step' | awk '{print $3, $4}')
[ -n "$from_files" ] && [ "$from_files" = "$in_memory" ] || { echo "FAIL losses: files '$from_files' vs memory '$in_memory'"; exit 1; }
pass "training from the files: the same losses as in memory ($from_files)"

# The data store: epochs after the first read from memory, with the same losses as without it.
STORE="train --model cosmoflow --input-size 32 --batch-size 2 --epochs 3 --val-samples 0 --seed 11 --threads 1 --log-every 1 --spatial 2x1x1 --data $WORK/r2"
with_store=$($MPI -np 2 "$BIN" $STORE)
without=$($MPI -np 2 "$BIN" $STORE --data-store-mib 0)
a=$(grep '^step' <<<"$with_store" | awk '{print $4}' | tr '\n' ' '); b=$(grep '^step' <<<"$without" | awk '{print $4}' | tr '\n' ' ')
[ -n "$a" ] && [ "$a" = "$b" ] || { echo "FAIL data store: losses '$a' with, '$b' without"; exit 1; }
# 3 files, batch 2: 1 step per epoch, so at most 3 of rank 0's 6 loads read a file.
hits=$(sed -n 's/^data store (rank 0): \([0-9]*\) blocks from memory, \([0-9]*\) loaded.*/\1 \2/p' <<<"$with_store")
read -r h m <<<"$hits"
[ -n "$hits" ] && [ "$h" -ge 3 ] && [ "$m" -le 3 ] && [ $((h + m)) -eq 6 ] ||
  { echo "FAIL data store: '$(grep 'data store (rank' <<<"$with_store")'"; exit 1; }
! grep -q "data store (rank 0)" <<<"$without" || { echo "FAIL data store: on with --data-store-mib 0"; exit 1; }
# It keeps the files' int16 counts as stored: rank 0's 3 blocks of 16x32x32 x 4 take 0.375 MiB (floats: 0.75).
kept=$(sed -n 's/^data store (rank 0): .* loaded, \([0-9.]*\) MiB kept.*/\1/p' <<<"$with_store")
[ "$kept" = "0.4" ] || { echo "FAIL data store: $kept MiB kept, expected 0.4 (int16 counts)"; exit 1; }
pass "data store: 3 epochs, later ones from memory, the same losses as without ($a), int16 counts kept"

# The prefetcher: the same losses with the next batch loaded in the background; per-step data wait in the metrics.
pre=$($MPI -np 2 "$BIN" $STORE --data-store-mib 0 --metrics "$WORK/m.jsonl" | grep '^step' | awk '{print $4}' | tr '\n' ' ')
nopre=$($MPI -np 2 "$BIN" $STORE --data-store-mib 0 --no-prefetch | grep '^step' | awk '{print $4}' | tr '\n' ' ')
[ -n "$pre" ] && [ "$pre" = "$nopre" ] || { echo "FAIL prefetch: losses '$pre' with, '$nopre' without"; exit 1; }
[ "$(grep -c '"data_wait_s"' "$WORK/m.jsonl")" -eq 3 ] || { echo "FAIL prefetch: no data_wait_s per step"; exit 1; }
pass "prefetch: the same losses as loading in the step; data_wait_s per step"
finish 4
