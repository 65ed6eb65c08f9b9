#!/bin/bash
# NIfTI input and output: Decathlon-layout (imagesTr/labelsTr, .nii.gz) and
# LiTS-layout (volume-N/segmentation-N, .nii with a scaling slope) pairs of
# different sizes, cut or padded to 16^3, train to the same losses on 1 rank
# and 2x2x2; predict reads a NIfTI image and writes NIfTI labels with its
# geometry, equal to the prediction from the same volume in HDF5; bad pairs
# are named before the first step.
source "$(dirname "$0")/setup.sh"
cd "$WORK"
cat >nifti.py <<'PYEOF'
import gzip, struct
import numpy as np
CODES = {np.uint8: (2, 8), np.int16: (4, 16), np.float32: (16, 32)}

def write(path, data, slope=0.0, inter=0.0, spacing=(0.8, 0.7, 2.5), origin=(-10.0, 5.0, 30.0)):
    """A NIfTI-1 file of `data` (D, H, W) = (z, y, x); the file stores x fastest."""
    code, bits = CODES[data.dtype.type]
    h = bytearray(352)
    struct.pack_into("<i", h, 0, 348)
    dims = [3, data.shape[2], data.shape[1], data.shape[0], 1, 1, 1, 1]
    struct.pack_into("<8h", h, 40, *dims)
    struct.pack_into("<hh", h, 70, code, bits)
    struct.pack_into("<8f", h, 76, 1.0, *spacing, 1, 1, 1, 1)
    struct.pack_into("<fff", h, 108, 352.0, slope, inter)
    struct.pack_into("<hh", h, 252, 0, 1)  # sform only
    struct.pack_into("<4f", h, 280, spacing[0], 0, 0, origin[0])
    struct.pack_into("<4f", h, 296, 0, spacing[1], 0, origin[1])
    struct.pack_into("<4f", h, 312, 0, 0, spacing[2], origin[2])
    h[344:348] = b"n+1\0"
    raw = bytes(h) + np.ascontiguousarray(data).tobytes()
    (gzip.open if path.endswith(".gz") else open)(path, "wb").write(raw)

def read(path):
    raw = (gzip.open if path.endswith(".gz") else open)(path, "rb").read()
    dims = struct.unpack_from("<8h", raw, 40)
    code = struct.unpack_from("<h", raw, 70)[0]
    off = int(struct.unpack_from("<f", raw, 108)[0])
    srow = struct.unpack_from("<12f", raw, 280)
    dt = {v[0]: k for k, v in CODES.items()}[code]
    shape = (dims[3], dims[2], dims[1])
    return np.frombuffer(raw[off:off + int(np.prod(shape)) * np.dtype(dt).itemsize], dtype=dt).reshape(shape), srow, code
PYEOF
"$PY" - <<'PYEOF'
import os
import h5py
import numpy as np
from nifti import write
rng = np.random.default_rng(7)
def case(shape):
    z, y, x = np.meshgrid(*[np.arange(n) + 0.5 for n in shape], indexing="ij")
    c = np.array(shape) / 2 + rng.uniform(-1.5, 1.5, 3)
    organ = ((z - c[0]) / 6) ** 2 + ((y - c[1]) / 5) ** 2 + ((x - c[2]) / 7) ** 2 < 1
    tumour = (z - c[0]) ** 2 + (y - c[1] - 1) ** 2 + (x - c[2]) ** 2 < 4
    seg = np.where(organ & tumour, 2, np.where(organ, 1, 0)).astype(np.uint8)
    hu = 60.0 * organ - 30.0 * (organ & tumour) + rng.normal(0, 15, shape) - 50
    return np.round(2 * hu) / 2, seg  # half-HU steps: exact in float32 and as int16 * 0.5
os.makedirs("msd/imagesTr"); os.makedirs("msd/labelsTr"); os.makedirs("lits"); os.makedirs("bad/imagesTr"); os.makedirs("bad/labelsTr")
for i, shape in enumerate([(20, 18, 22), (16, 16, 16), (14, 20, 18), (18, 16, 20)]):
    hu, seg = case(shape)
    write(f"msd/imagesTr/c{i}.nii.gz", hu.astype(np.float32))
    write(f"msd/labelsTr/c{i}.nii.gz", seg)
    # LiTS style: int16 counts with a scaling slope of 0.5 (values 2x the HU).
    write(f"lits/volume-{i}.nii", np.round(2 * hu).astype(np.int16), slope=0.5)
    write(f"lits/segmentation-{i}.nii", seg)
hu, seg = case((40, 36, 44))
write("big.nii.gz", hu.astype(np.float32))
with h5py.File("big.h5", "w") as f:
    f["volume"] = hu.astype(np.float32)
hu, seg = case((16, 16, 16))
write("bad/imagesTr/good.nii.gz", hu.astype(np.float32)); write("bad/labelsTr/good.nii.gz", seg)
write("bad/imagesTr/nolabel.nii.gz", hu.astype(np.float32))
write("bad/imagesTr/floatlabel.nii.gz", hu.astype(np.float32)); write("bad/labelsTr/floatlabel.nii.gz", seg.astype(np.float32))
write("bad/imagesTr/mismatch.nii.gz", hu.astype(np.float32)); write("bad/labelsTr/mismatch.nii.gz", seg[:, :, :15])
open("bad/imagesTr/text.nii", "w").write("not a NIfTI file\n"); write("bad/labelsTr/text.nii", seg)
# A header whose second dimension is -5 (niftilib alone would make it 1).
import struct
write("bad/imagesTr/negative.nii", hu.astype(np.float32)); write("bad/labelsTr/negative.nii", seg)
raw = bytearray(open("bad/imagesTr/negative.nii", "rb").read())
struct.pack_into("<h", raw, 44, -5)
open("bad/imagesTr/negative.nii", "wb").write(bytes(raw))
raw = open("msd/imagesTr/c0.nii.gz", "rb").read()
open("bad/imagesTr/cut.nii.gz", "wb").write(raw[: len(raw) // 3]); write("bad/labelsTr/cut.nii.gz", seg)
PYEOF

M="--model unet3d --input-size 16 --base-channels 4 --levels 2 --intensity-window -100,100 --threads 1"
T="train $M --batch-size 2 --steps 4 --log-every 1 --optimizer adam --lr 3e-3 --val-samples 0"
losses() { awk '$1 == "step" {print $4}' | tr '\n' ' '; }
out=$("$BIN" $T --data msd --save w.safetensors)
grep -q "data: 4 NIfTI case(s) from 'msd', each cut or padded to 16^3 around its centre" <<<"$out" ||
  { echo "FAIL data line: $(grep '^data' <<<"$out")"; exit 1; }
ref=$(losses <<<"$out")
got=$($MPI -np 8 "$BIN" $T --data msd --spatial 2x2x2 | losses)
agree "$ref" "$got" 4 ||
  { echo "FAIL NIfTI 2x2x2: '$got' vs 1 rank '$ref'"; exit 1; }
lits=$("$BIN" $T --data lits | losses)
[ "$lits" = "$ref" ] || { echo "FAIL LiTS-layout .nii with slope 0.5: '$lits' vs the .nii.gz float files '$ref'"; exit 1; }
pass "NIfTI pairs (Decathlon .nii.gz, LiTS .nii with a slope), 4 sizes cut/padded to 16^3: same losses on 1 rank, 2x2x2 ($ref)"

"$BIN" predict $M --init w.safetensors --input big.nii.gz --out pred.nii.gz --quiet
$MPI -np 4 "$BIN" predict $M --init w.safetensors --input big.h5 --out pred.h5 --spatial 2x2x1 --quiet
"$PY" - <<'PYEOF'
import h5py
import numpy as np
from nifti import read
labels, srow, code = read("pred.nii.gz")
_, srow_in, _ = read("big.nii.gz")
assert code == 2 and labels.shape == (40, 36, 44), (code, labels.shape)
assert np.allclose(srow, srow_in), f"geometry not copied: {srow} vs {srow_in}"
ref = h5py.File("pred.h5")["segmentation"][:]
assert np.array_equal(labels, ref), f"{int((labels != ref).sum())} voxels differ from the HDF5 prediction"
print("ok   predict: NIfTI in, NIfTI labels out (uint8, the input's geometry), equal to the HDF5 prediction on 2x2x1")
PYEOF

set +e
msg=$(timeout 60 $MPI -np 2 "$BIN" $T --data bad 2>&1)
code=$?
set -e
[ "$code" -ne 0 ] && [ "$code" -ne 124 ] && ! grep -q "^step" <<<"$msg" || { echo "FAIL bad pairs: exit $code"; exit 1; }
for want in "6 of 7 files are unusable" "nolabel.nii.gz' has no label file" "floatlabel.nii.gz' has labels" \
  "negative.nii' has dimension 2 = -5 in its header" \
  "mismatch.nii.gz' is 16x16x16 but its labels" "text.nii' is shorter than a NIfTI header" "cut.nii.gz'"; do
  grep -qF -- "$want" <<<"$msg" || { echo "FAIL bad pairs: no '$want' in: $msg"; exit 1; }
done
pass "bad NIfTI pairs named before the first step (exit $code)"
finish 2
