#!/bin/bash
# unet3d from HDF5 files in the LiTS layout ('volume' float32, 'segmentation'
# uint8, one case per file): the same losses on 1 rank, 2x2x2 and 2 groups x
# 1x2x1, with an intensity window (bitwise with --deterministic); and every bad-file case named before the
# first step on 2 ranks.
source "$(dirname "$0")/setup.sh"
"$PY" - "$WORK" <<'PYEOF'
import os, sys
import h5py
import numpy as np
work = sys.argv[1]
os.makedirs(f"{work}/cases")
os.makedirs(f"{work}/bad")
rng = np.random.default_rng(3)
z, y, x = np.meshgrid(*[np.arange(32) + 0.5] * 3, indexing="ij")
def case(i):
    c = 16 + rng.uniform(-3, 3, 3)
    organ = ((z - c[0]) / 9) ** 2 + ((y - c[1]) / 8) ** 2 + ((x - c[2]) / 10) ** 2 < 1
    tumour = (z - c[0] - 2) ** 2 + (y - c[1]) ** 2 + (x - c[2] + 1) ** 2 < 6
    seg = np.where(organ & tumour, 2, np.where(organ, 1, 0)).astype(np.uint8)
    vol = (60.0 * organ - 30.0 * (organ & tumour) + rng.normal(0, 20, seg.shape) - 50).astype(np.float32)
    return vol, seg
for i in range(6):
    vol, seg = case(i)
    with h5py.File(f"{work}/cases/case_{i:03d}.h5", "w") as f:
        f["volume"] = vol
        f["segmentation"] = seg
vol, seg = case(9)
with h5py.File(f"{work}/bad/good.h5", "w") as f:
    f["volume"] = vol; f["segmentation"] = seg
with h5py.File(f"{work}/bad/nolabels.h5", "w") as f:
    f["volume"] = vol
with h5py.File(f"{work}/bad/mismatch.h5", "w") as f:
    f["volume"] = vol; f["segmentation"] = seg[:, :, :31]
with h5py.File(f"{work}/bad/floatlabels.h5", "w") as f:
    f["volume"] = vol; f["segmentation"] = seg.astype(np.float32)
with h5py.File(f"{work}/bad/small.h5", "w") as f:
    f["volume"] = vol[:16]; f["segmentation"] = seg[:16]
raw = open(f"{work}/bad/good.h5", "rb").read()
open(f"{work}/bad/cut.h5", "wb").write(raw[: len(raw) // 2])
PYEOF

T="train --model unet3d --input-size 32 --base-channels 4 --levels 3 --batch-size 2 --steps 3 --log-every 1
   --optimizer adam --lr 1e-3 --loss ce+dice --val-fraction 0.34 --intensity-window -100,100 --threads 1
   --data $WORK/cases"
numbers() { awk '$1 == "step" {print $4} $1 == "validation" {print $8, $9, $10}' | tr -d ',' | tr '\n' ' '; }
out=$("$BIN" $T)
grep -q "data: 4 training samples of 6 cases of 32x32x32 x 1 in HDF5 files (LiTS layout).*intensity window -100..100" <<<"$out" ||
  { echo "FAIL data line: $(grep '^data' <<<"$out")"; exit 1; }
ref=$(numbers <<<"$out")
[ "$(wc -w <<<"$ref")" -eq 9 ] || { echo "FAIL expected 3 losses and two validations: '$ref'"; exit 1; }
for cfg in "8 2x2x2" "4 1x2x1"; do
  set -- $cfg
  got=$($MPI -np "$1" "$BIN" $T --spatial "$2" | numbers)
  agree "$ref" "$got" ||
    { echo "FAIL $2 on $1 ranks: '$got' vs 1 rank '$ref'"; exit 1; }
done
pass "LiTS-layout files: 1 rank, 2x2x2, 2 groups x 1x2x1 print the same losses and Dice ($ref)"

# --deterministic on the same files, validation included: bitwise the 1-rank weights and printed numbers.
det=$("$BIN" $T --deterministic --save "$WORK/det1.st")
for cfg in "8 2x2x2" "4 1x2x1"; do
  set -- $cfg
  got=$($MPI -np "$1" "$BIN" $T --deterministic --spatial "$2" --save "$WORK/det$1.st")
  cmp -s "$WORK/det1.st" "$WORK/det$1.st" || { echo "FAIL --deterministic $2 on $1 ranks: other weights"; exit 1; }
  [ "$(numbers <<<"$det")" = "$(numbers <<<"$got")" ] ||
    { echo "FAIL --deterministic $2 on $1 ranks: '$(numbers <<<"$got")' vs '$(numbers <<<"$det")'"; exit 1; }
done
pass "LiTS-layout files with --deterministic: 2x2x2 and 2 groups x 1x2x1 give the 1-rank weights and numbers bitwise"

set +e
msg=$(timeout 60 $MPI -np 2 "$BIN" ${T/$WORK\/cases/$WORK/bad} 2>&1)
code=$?
set -e
[ "$code" -ne 0 ] && [ "$code" -ne 124 ] && ! grep -q "^step" <<<"$msg" || { echo "FAIL bad files: exit $code"; exit 1; }
for want in "5 of 6 files are unusable" "nolabels.h5' has no dataset 'segmentation'" \
  "mismatch.h5' has 'volume' (32, 32, 32) but 'segmentation' (32, 32, 31)" "floatlabels.h5' dataset 'segmentation' is not integer" \
  "small.h5' holds a case of 16x32x32" "cut.h5' is not a readable HDF5 file"; do
  grep -qF -- "$want" <<<"$msg" || { echo "FAIL bad files: no '$want' in: $msg"; exit 1; }
done
pass "bad LiTS files named before the first step (exit $code)"

# Augmentation: cases of 24x20x28 (larger than the 16^3 input, not cubic),
# random crops and flips; the same losses on every layout, and not those of
# the centre crops.
"$PY" - "$WORK" <<'PYEOF'
import os, sys
import h5py
import numpy as np
w = sys.argv[1]
os.makedirs(f"{w}/big")
rng = np.random.default_rng(5)
z, y, x = np.meshgrid(np.arange(24) + 0.5, np.arange(20) + 0.5, np.arange(28) + 0.5, indexing="ij")
for i in range(4):
    c = (12 + rng.uniform(-2, 2), 10 + rng.uniform(-2, 2), 14 + rng.uniform(-2, 2))
    organ = ((z - c[0]) / 7) ** 2 + ((y - c[1]) / 6) ** 2 + ((x - c[2]) / 9) ** 2 < 1
    tumour = (z - c[0] - 2) ** 2 + (y - c[1]) ** 2 + (x - c[2] - 3) ** 2 < 5
    seg = np.where(organ & tumour, 2, np.where(organ, 1, 0)).astype(np.uint8)
    with h5py.File(f"{w}/big/case{i}.h5", "w") as f:
        f["volume"] = (60.0 * organ - 30.0 * (organ & tumour) + rng.normal(0, 20, seg.shape) - 50).astype(np.float32)
        f["segmentation"] = seg
PYEOF
A="train --model unet3d --input-size 16 --base-channels 4 --levels 2 --batch-size 2 --epochs 2 --log-every 1
   --optimizer adam --lr 1e-3 --intensity-window -100,100 --threads 1 --data $WORK/big"
losses() { awk '$1 == "step" {print $4}' | tr '\n' ' '; }
ref=$("$BIN" $A --random-crop --flip | losses)
centre=$("$BIN" $A | losses)
[ "$ref" != "$centre" ] || { echo "FAIL augmentation changes nothing: '$ref'"; exit 1; }
for cfg in "8 2x2x2" "4 1x2x1"; do
  set -- $cfg
  got=$($MPI -np "$1" "$BIN" $A --random-crop --flip --spatial "$2" | losses)
  agree "$ref" "$got" 4 ||
    { echo "FAIL augmented $2 on $1 ranks: '$got' vs 1 rank '$ref'"; exit 1; }
done
pass "random crops and flips of 24x20x28 cases: the same losses on 1 rank, 2x2x2, 2 groups x 1x2x1 ($ref)"
finish 4
