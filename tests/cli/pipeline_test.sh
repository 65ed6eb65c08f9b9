#!/bin/bash
# The data pipeline end to end, as a new user runs it: generate universes,
# preprocess them into sub-volume samples (in two file layouts), train with
# a staged copy under several layouts and read modes, stop, train again
# from the staged copy; and a bad file is named before the first step.
source "$(dirname "$0")/setup.sh"

$MPI -np 2 "$BIN" generate --out "$WORK/univ" --count 2 --size 64 --seed 5 --quiet

# Preprocess: 2 universes of 64^3 into 16 samples of 32^3.
out=$($MPI -np 2 "$BIN" preprocess --in "$WORK/univ" --out "$WORK/orig" --sample-size 32)
grep -q "16/16 files (16 written, 0 already complete)" <<<"$out" || { echo "FAIL preprocess: $out"; exit 1; }
$MPI -np 2 "$BIN" preprocess --in "$WORK/univ" --out "$WORK/lbann" --sample-size 32 --layout lbann \
  --samples-per-file 5 --chunk 16 --gzip 1 --quiet
"$PY" - "$WORK" <<'PYEOF'
import sys, os, json, h5py, numpy as np
work = sys.argv[1]
for variant, layout in (("orig", "original"), ("lbann", "lbann")):
    m = json.load(open(os.path.join(work, variant, "manifest.json")))
    assert m["samples"] == 16 and m["layout"] == layout, m
    seen = 0
    for f in m["files"]:
        h = h5py.File(os.path.join(work, variant, f["file"]))
        full, par = h["full"][:], h["unitPar"][:]
        if full.ndim == 4:
            full, par = full[None], par[None]
        assert len(f["samples"]) == full.shape[0]
        for i, s in enumerate(f["samples"]):
            src = h5py.File(s["source"])
            d, y, x = s["offset"]
            want = src["full"][d:d + 32, y:y + 32, x:x + 32, :]
            got = full[i] if layout == "original" else np.moveaxis(full[i], 0, -1)
            assert np.array_equal(got.astype(np.float64), want.astype(np.float64)), (variant, f["file"], i)
            assert np.array_equal(par[i], src["unitPar"][:])
            seen += 1
    assert seen == 16
print("ok   preprocess: 16 sub-volumes equal their box of the universes, original and LBANN layouts; manifest")
PYEOF

# Resume: complete files are skipped, a damaged one is rewritten.
before=$(stat -c %Y "$WORK/orig/sample_000001.h5")
truncate -s 1000 "$WORK/orig/sample_000003.h5"
out=$("$BIN" preprocess --in "$WORK/univ" --out "$WORK/orig" --sample-size 32)
grep -q "16/16 files (1 written, 15 already complete)" <<<"$out" || { echo "FAIL preprocess resume: $out"; exit 1; }
[ "$(stat -c %Y "$WORK/orig/sample_000001.h5")" = "$before" ] || { echo "FAIL preprocess rewrote a complete file"; exit 1; }
pass "preprocess rerun: 15 complete files kept, the damaged one rewritten"

# Train: 16 samples, a quarter held out for validation, batch 5 over 12 (the last one padded).
TRAIN="train --model cosmoflow --input-size 32 --batch-size 5 --epochs 2 --val-fraction 0.25 --last-batch pad --seed 5 --threads 1 --log-every 1"
# Each step's loss and each validation's mse, as printed (5 decimals).
losses() { awk '$1 == "step" {print $4} $1 == "validation" {print $6}' | tr '\n' ' '; }
ref=$("$BIN" $TRAIN --data "$WORK/orig" | losses)
[ "$(wc -w <<<"$ref")" -eq 8 ] || { echo "FAIL expected 6 steps and 2 validations: '$ref'"; exit 1; }
first=$($MPI -np 4 "$BIN" $TRAIN --data "$WORK/orig" --spatial 2x2x1 --read-mode collective --stage-dir "$WORK/stage")
grep -q "staging train to .* 16/16 files (16 copied, 0 already there)" <<<"$first" ||
  { echo "FAIL staging: $(grep staging <<<"$first")"; exit 1; }
grep -q "validation at step 6: .*, 4 samples" <<<"$first" || { echo "FAIL validation count: $first"; exit 1; }
# A second job from the staged copy: nothing copied again, the same numbers.
again=$($MPI -np 4 "$BIN" $TRAIN --data "$WORK/orig" --spatial 1x1x2 --read-mode naive --stage-dir "$WORK/stage")
grep -q "16/16 files (0 copied, 16 already there)" <<<"$again" || { echo "FAIL restaging: $(grep staging <<<"$again")"; exit 1; }
lbann=$($MPI -np 4 "$BIN" $TRAIN --data "$WORK/lbann" --spatial 1x2x1 | losses)
for run in "$(losses <<<"$first")" "$(losses <<<"$again")" "$lbann"; do
  agree "$ref" "$run" ||
    { echo "FAIL losses differ from the 1-rank run: '$run' vs '$ref'"; exit 1; }
done
pass "1 rank, 2x2x1 collective + staging, 2 groups x 1x1x2 naive from the staged copy, LBANN files 1x2x1: same losses ($ref)"

# A bad file is named before the first step, staged or not.
cp -r "$WORK/orig" "$WORK/bad" && rm "$WORK/bad/manifest.json"
head -c 3000 "$WORK/orig/sample_000002.h5" >"$WORK/bad/sample_000002.h5"
set +e
msg=$($MPI -np 2 "$BIN" $TRAIN --data "$WORK/bad" --stage-dir "$WORK/stage2" 2>&1)
code=$?
set -e
[ "$code" -ne 0 ] && grep -q "sample_000002.h5" <<<"$msg" && ! grep -q "^step" <<<"$msg" ||
  { echo "FAIL bad file: exit $code, '$msg'"; exit 1; }
pass "a truncated file is named before the first step (exit $code)"

# A file claiming a 2^60-voxel universe (chunked, nothing stored): refused with a clear message, no allocation.
"$PY" - "$WORK" <<'PYEOF'
import os, sys
import h5py
import numpy as np
os.makedirs(f"{sys.argv[1]}/huge")
with h5py.File(f"{sys.argv[1]}/huge/h.h5", "w") as f:
    f.create_dataset("full", shape=(1 << 20, 1 << 20, 1 << 20, 4), dtype=np.int16, chunks=(1, 16, 16, 4))
    f["unitPar"] = np.zeros(4, np.float32)
PYEOF
for cmd in "preprocess --in $WORK/huge --out $WORK/hugeout" "train --data $WORK/huge --input-size 32 --steps 1"; do
  set +e
  msg=$(timeout 60 "$BIN" $cmd 2>&1)
  code=$?
  set -e
  [ "$code" -eq 2 ] && grep -qE "too large to preprocess|does not match --input-size" <<<"$msg" ||
    { echo "FAIL huge dataset ($cmd): exit $code, $msg"; exit 1; }
done
pass "a file claiming 2^60 voxels is refused by preprocess and train (exit 2), nothing allocated"
finish 4
