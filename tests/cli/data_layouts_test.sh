#!/bin/bash
# The reader's layouts: the same universes as original CosmoFlow files
# (channels last, int16, one per file), as LBANN files (channels first,
# float32) and as one file with a leading sample dimension; training on 2
# ranks (2x1x1) prints the same losses from all three. Then bad files are
# refused before the first step, each named with what is wrong.
source "$(dirname "$0")/setup.sh"
"$BIN" generate --count 4 --size 32 --seed 3 --quiet --out "$WORK/orig"
"$PY" - "$WORK" <<'PYEOF'
import sys, os, glob, h5py, numpy as np
w = sys.argv[1]
os.makedirs(f"{w}/lbann"); os.makedirs(f"{w}/batched"); os.makedirs(f"{w}/bad")
files = sorted(glob.glob(f"{w}/orig/*.h5"))
full, par = [], []
for i, f in enumerate(files):
    with h5py.File(f) as a:
        full.append(a["full"][:]); par.append(a["unitPar"][:])
    with h5py.File(f"{w}/lbann/u{i}.h5", "w") as b:
        b["full"] = full[-1].transpose(3, 0, 1, 2).astype(np.float32)
        b["unitPar"] = par[-1]
with h5py.File(f"{w}/batched/all.h5", "w") as b:
    b.create_dataset("full", data=np.stack(full), chunks=(1, 8, 32, 32, 4))
    b["unitPar"] = np.stack(par)
# bad files: a missing dataset, a wrong shape, a truncated copy, not HDF5
with h5py.File(f"{w}/bad/nopar.h5", "w") as b:
    b["full"] = full[0]
with h5py.File(f"{w}/bad/shape.h5", "w") as b:
    b["full"] = full[0][:, :, :16]
    b["unitPar"] = par[0]
data = open(files[1], "rb").read()
open(f"{w}/bad/cut.h5", "wb").write(data[: len(data) // 2])
open(f"{w}/bad/text.h5", "w").write("not hdf5\n")
PYEOF

TRAIN="train --model cosmoflow --input-size 32 --batch-size 2 --steps 2 --val-samples 0 --seed 3 --threads 1 --log-every 1 --spatial 2x1x1"
losses() { $MPI -np 2 "$BIN" $TRAIN --data "$1" | grep '^step' | awk '{print $4}' | tr '\n' ' '; }
orig=$(losses "$WORK/orig"); lbann=$(losses "$WORK/lbann"); batched=$(losses "$WORK/batched")
[ -n "$orig" ] && [ "$orig" = "$lbann" ] && [ "$orig" = "$batched" ] ||
  { echo "FAIL losses: original '$orig', LBANN '$lbann', batched '$batched'"; exit 1; }
pass "original, LBANN and batched layouts: the same losses ($orig)"

cp "$WORK/orig/univ_000000.h5" "$WORK/bad/good.h5"
set +e
out=$(timeout 120 $MPI -np 2 "$BIN" $TRAIN --data "$WORK/bad" 2>&1)
rc=$?
set -e
[ $rc -ne 0 ] && [ $rc -ne 124 ] || { echo "FAIL bad files: exit $rc"; exit 1; }
for want in "4 of 5 files are unusable" "nopar.h5' has no dataset 'unitPar'" "shape.h5' holds samples of 32x32x16" \
            "cut.h5' is not a readable HDF5 file" "text.h5' is not a readable HDF5 file"; do
  grep -qF -- "$want" <<<"$out" || { echo "FAIL bad files: no '$want' in:"; echo "$out" | head -8; exit 1; }
done
! grep -q '^step' <<<"$out" || { echo "FAIL bad files: training started"; exit 1; }
pass "bad files named before the first step (exit $rc)"
finish 2
