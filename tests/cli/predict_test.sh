#!/bin/bash
# hybrid3d predict: a 40x36x44 case (not a multiple of the 16^3 window)
# segmented with overlapping windows gives the same probabilities on 1 rank,
# 2x2x1 and 2 windows at a time (2 groups x 2x1x1); with no overlap, the
# corner window equals the prediction of that window alone (a direct
# prediction of the cropped volume); Dice against the case's labels; and
# bad inputs refused with one message and no hang.
source "$(dirname "$0")/setup.sh"
cd "$WORK"
"$PY" - <<'PYEOF'
import os
import h5py
import numpy as np
rng = np.random.default_rng(1)
def case(shape, c):
    z, y, x = np.meshgrid(*[np.arange(n) + 0.5 for n in shape], indexing="ij")
    organ = ((z - c[0]) / 6) ** 2 + ((y - c[1]) / 5) ** 2 + ((x - c[2]) / 7) ** 2 < 1
    tumour = (z - c[0]) ** 2 + (y - c[1] - 1) ** 2 + (x - c[2]) ** 2 < 4
    seg = np.where(organ & tumour, 2, np.where(organ, 1, 0)).astype(np.uint8)
    vol = (60.0 * organ - 30.0 * (organ & tumour) + rng.normal(0, 15, seg.shape) - 50).astype(np.float32)
    return vol, seg
os.makedirs("train")
for i in range(8):
    v, s = case((16, 16, 16), 8 + rng.uniform(-2, 2, 3))
    with h5py.File(f"train/c{i}.h5", "w") as f:
        f["volume"] = v
        f["segmentation"] = s
v, s = case((40, 36, 44), (20, 18, 22))
with h5py.File("big.h5", "w") as f:
    f["volume"] = v
    f["segmentation"] = s
with h5py.File("crop.h5", "w") as f:
    f["volume"] = v[:16, :16, :16]
with h5py.File("small.h5", "w") as f:
    f["volume"] = v[:12]
PYEOF
M="--model unet3d --input-size 16 --base-channels 4 --levels 2 --intensity-window -100,100 --threads 1"
"$BIN" train $M --data train --batch-size 2 --steps 30 --optimizer adam --lr 3e-3 --save w.safetensors --quiet
out=$("$BIN" predict $M --init w.safetensors --input big.h5 --out p1.h5 --probabilities)
grep -q "predict: 80 windows of 16^3 (overlap 0.50) over 40x36x44" <<<"$out" || { echo "FAIL windows: $out"; exit 1; }
grep -q "predict: dice per class against the input's labels" <<<"$out" || { echo "FAIL no Dice: $out"; exit 1; }
$MPI -np 4 "$BIN" predict $M --init w.safetensors --input big.h5 --out p4.h5 --probabilities --spatial 2x2x1 --quiet
$MPI -np 4 "$BIN" predict $M --init w.safetensors --input big.h5 --out p22.h5 --probabilities --spatial 2x1x1 --quiet
"$BIN" predict $M --init w.safetensors --input big.h5 --out p0.h5 --probabilities --window-overlap 0 --quiet
"$BIN" predict $M --init w.safetensors --input crop.h5 --out pc.h5 --probabilities --quiet
"$PY" - <<'PYEOF'
import h5py
import numpy as np
p1, p4, p22 = [h5py.File(f)["probabilities"][:] for f in ("p1.h5", "p4.h5", "p22.h5")]
assert p1.shape == (3, 40, 36, 44), p1.shape
assert np.allclose(p1.sum(0), 1, atol=1e-5), "probabilities do not sum to 1"
for name, p in (("2x2x1", p4), ("2 groups x 2x1x1", p22)):
    d = float(np.abs(p - p1).max())
    assert d <= 1e-5, f"{name}: probabilities differ from 1 rank by {d}"
seg = h5py.File("p1.h5")["segmentation"]
assert seg.dtype == np.uint8 and seg.shape == (40, 36, 44)
assert np.array_equal(seg[:], p1.argmax(0)), "segmentation is not the arg-max"
# With no overlap the windows along D start at 0, 16, 24: voxels [0, 16)^3
# lie in the first window only, whose blended value is its own prediction.
corner = h5py.File("p0.h5")["probabilities"][:, :16, :16, :16]
alone = h5py.File("pc.h5")["probabilities"][:]
d = float(np.abs(corner - alone).max())
assert d <= 1e-6, f"the corner window differs from its direct prediction by {d}"
print("ok   predict: 1 rank, 2x2x1 and 2 groups x 2x1x1 agree; no-overlap corner equals the window alone")
PYEOF

fails=0
refuse() {  # name, expected text, flags...
  local name="$1" text="$2" out
  shift 2
  out=$(timeout 60 $MPI -np 2 "$BIN" predict $M "$@" 2>&1) && { echo "FAIL $name: exit 0"; fails=1; return; }
  grep -q -- "$text" <<<"$out" || { echo "FAIL $name: '$(head -3 <<<"$out")'"; fails=1; return; }
  pass "$name: $(grep -m1 'hybrid3d: error' <<<"$out" | cut -c1-140)"
}
refuse "volume smaller than the window" "smaller than the 16^3 window" --init w.safetensors --input small.h5 --out x.h5
refuse "missing input" "no HDF5 files" --init w.safetensors --input nothere.h5 --out x.h5
refuse "weights of another model" "wrong shape" --init w.safetensors --input big.h5 --out x.h5 --base-channels 8
refuse "bad window overlap" "--window-overlap" --init w.safetensors --input big.h5 --out x.h5 --window-overlap 1.5
refuse "unwritable output" "--out" --init w.safetensors --input big.h5 --out /nonexistent/x.h5
[ ! -e x.h5 ] || { echo "FAIL an output was written by a refused run"; fails=1; }
[ $fails -eq 0 ] || exit 1
finish 5
