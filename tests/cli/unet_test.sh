#!/bin/bash
# unet3d through the command line: the same losses and validation Dice on
# 1 rank, 2x2x2 (8 ranks) and 2 data groups x 1x2x1, with the data store and
# prefetcher of the synthetic segmentation source; a checkpoint whose names
# loads into the equivalent PyTorch module; and bad unet3d flags refused with a clear message.
source "$(dirname "$0")/setup.sh"
T="train --model unet3d --input-size 32 --base-channels 4 --levels 3 --batch-size 2 --train-samples 6 --val-samples 3
   --steps 3 --log-every 1 --optimizer adam --lr 1e-3 --loss ce+dice --class-weights 0.5,1,2 --threads 1"
# Each step's loss and the validation's Dice per class, as printed.
numbers() { awk '$1 == "step" {print $4} $1 == "validation" {print $8, $9, $10}' | tr -d ',' | tr '\n' ' '; }
ref=$("$BIN" $T --save "$WORK/unet.safetensors" | numbers)
[ "$(wc -w <<<"$ref")" -eq 6 ] || { echo "FAIL expected 3 losses and 3 Dice values: '$ref'"; exit 1; }
for cfg in "8 2x2x2" "4 1x2x1"; do
  set -- $cfg
  got=$($MPI -np "$1" "$BIN" $T --spatial "$2" | numbers)
  agree "$ref" "$got" ||
    { echo "FAIL $2 on $1 ranks: '$got' vs 1 rank '$ref'"; exit 1; }
done
pass "unet3d: 1 rank, 2x2x2, 2 groups x 1x2x1 print the same losses and Dice ($ref)"

"$PY" - "$WORK/unet.safetensors" "$(dirname "$0")/../reference" <<'PYEOF'
# The checkpoint loads into the equivalent PyTorch module (the reference test's) with strict=True.
import sys
sys.path.insert(0, sys.argv[2])
from test_against_pytorch import UNet3D, load_safetensors
state = load_safetensors(sys.argv[1])
model = UNet3D(cin=1, classes=3, b=4, levels=3)
model.load_state_dict(state, strict=True)
assert int(model.dec2.bn1.num_batches_tracked) == 3, model.dec2.bn1.num_batches_tracked
print(f"ok   checkpoint: {len(state)} tensors load into the PyTorch UNet3D with strict=True")
PYEOF

fails=0
refuse() {  # name, expected text, flags...
  local name="$1" text="$2" out
  shift 2
  out=$(timeout 60 $MPI -np 2 "$BIN" $T "$@" 2>&1) && { echo "FAIL $name: exit 0"; fails=1; return; }
  grep -q -- "$text" <<<"$out" || { echo "FAIL $name: '$(head -3 <<<"$out")'"; fails=1; return; }
  pass "$name: $(grep -m1 'hybrid3d: error' <<<"$out" | cut -c1-140)"
}
refuse "input size not a multiple of 2^levels" "multiple of 8" --input-size 36
refuse "unknown loss" "ce, dice or ce+dice" --loss focal
refuse "class weights count" "--class-weights has 2 values" --class-weights 1,2
refuse "too few classes for the data" "more than --classes 2" --classes 2
[ $fails -eq 0 ]

# generate --kind segmentation writes the synthetic cases as LiTS files: the
# same bytes on 1 and 2 ranks, and training on them gives the in-memory losses.
"$BIN" generate --kind segmentation --out "$WORK/s1" --count 6 --size 32 --quiet
$MPI -np 2 "$BIN" generate --kind segmentation --out "$WORK/s2" --count 6 --size 32 --quiet
"$PY" - "$WORK" <<'PYEOF' || { echo "FAIL generate --kind segmentation: 1 and 2 ranks differ"; exit 1; }
import os, sys
import h5py
import numpy as np
w = sys.argv[1]
names = sorted(os.listdir(f"{w}/s1"))
assert names == sorted(os.listdir(f"{w}/s2")) and len(names) == 6, names
for n in names:
    a, b = h5py.File(f"{w}/s1/{n}"), h5py.File(f"{w}/s2/{n}")
    assert a["volume"].dtype == np.float32 and a["segmentation"].dtype == np.uint8
    for k in ("volume", "segmentation"):
        assert np.array_equal(a[k][:], b[k][:]), (n, k)
PYEOF
S="train --model unet3d --input-size 32 --base-channels 4 --levels 3 --batch-size 2 --steps 2 --log-every 1
   --optimizer adam --lr 1e-3 --val-samples 0 --threads 1"
mem=$("$BIN" $S --train-samples 6 | awk '$1 == "step" {print $4}' | tr '\n' ' ')
files=$("$BIN" $S --data "$WORK/s1" | awk '$1 == "step" {print $4}' | tr '\n' ' ')
[ -n "$mem" ] && [ "$mem" = "$files" ] || { echo "FAIL segmentation files '$files' vs in memory '$mem'"; exit 1; }
pass "generate --kind segmentation: same cases on 1 and 2 ranks; training on them = in memory ($mem)"
finish 6
