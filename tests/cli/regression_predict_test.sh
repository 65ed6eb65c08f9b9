#!/bin/bash
# hybrid3d predict for regression (cosmoflow): every sample of a dataset as
# CSV. The predictions agree on 1 rank, 2x1x1, 2 groups x 1x2x1 and 2x2x1
# (a batch that leaves a padded last mini-batch); the per-sample MSE equals
# the trainer's own test evaluation of the same weights; the per-universe
# table is the mean of each universe's pieces found through preprocess's
# manifest (recomputed here from the manifest); no table without a
# manifest; bad inputs refused with one message, exit 2 and no output.
source "$(dirname "$0")/setup.sh"
cd "$WORK"
"$BIN" generate --out u --count 4 --size 64 --seed 3 --quiet
"$BIN" preprocess --in u --out s --sample-size 32 --samples-per-file 8 --quiet
M="--model cosmoflow --input-size 32 --threads 1"
out=$("$BIN" train $M --data s --test-data s --batch-size 4 --steps 12 --optimizer adam --lr 1e-3 --save w.safetensors)
test_mse=$(grep -o "^test at step 12: mse [0-9.]*" <<<"$out" | awk '{print $NF}')
[ -n "$test_mse" ] || { echo "FAIL no test line: $out"; exit 1; }
out=$("$BIN" predict $M --init w.safetensors --data s --batch-size 3 --out p1.csv)
grep -q "predict: 32 samples of 32^3 in 11 mini-batches of 3" <<<"$out" || { echo "FAIL header: $out"; exit 1; }
pred_mse=$(grep -o "per sample: MSE [0-9.]*" <<<"$out" | awk '{print $NF}')
# The trainer prints 4 decimals, predict 5.
"$PY" -c "import sys; assert abs(float(sys.argv[1]) - float(sys.argv[2])) <= 6e-5, sys.argv[1:]" "$test_mse" "$pred_mse" &&
  pass "per-sample MSE $pred_mse = the trainer's test MSE $test_mse"
grep -q "per universe (4, the mean of their sub-volumes)" <<<"$out" || { echo "FAIL no universe line: $out"; exit 1; }
$MPI -np 2 "$BIN" predict $M --init w.safetensors --data s --batch-size 3 --out p2.csv --spatial 2x1x1 --quiet
$MPI -np 4 "$BIN" predict $M --init w.safetensors --data s --batch-size 4 --out p4.csv --spatial 1x2x1 --quiet
$MPI -np 4 "$BIN" predict $M --init w.safetensors --data s --batch-size 3 --out p22.csv --spatial 2x2x1 --quiet
"$PY" - <<'PYEOF'
import csv, json, os
import numpy as np
P = ["Omega_m", "sigma_8", "n_s", "H_0"]
def rows(path):
    r = list(csv.DictReader(open(path)))
    assert r and list(r[0].keys())[:4] == ["file", "sample", "true_Omega_m", "pred_Omega_m"], list(r[0].keys())
    return r
one = rows("p1.csv")
assert len(one) == 32, len(one)
for other in ("p2.csv", "p4.csv", "p22.csv"):
    o = rows(other)
    assert [(r["file"], r["sample"]) for r in o] == [(r["file"], r["sample"]) for r in one], other
    for a, b in zip(one, o):
        for p in P:
            assert a["true_" + p] == b["true_" + p], (other, p)
            d = abs(float(a["pred_" + p]) - float(b["pred_" + p]))
            assert d <= 1e-5, f"{other}: pred_{p} differs by {d}"
# The per-universe table from the manifest, recomputed.
man = json.load(open("s/manifest.json"))
origin = {(f["file"], i): (os.path.basename(s["source"]), s["source_sample"])
          for f in man["files"] for i, s in enumerate(f["samples"])}
groups = {}
for r in one:
    groups.setdefault(origin[(os.path.basename(r["file"]), int(r["sample"]))], []).append(r)
uni = list(csv.DictReader(open("p1.universes.csv")))
assert len(uni) == 4 == len(groups), (len(uni), len(groups))
for u in uni:
    g = groups[(os.path.basename(u["source"]), int(u["source_sample"]))]
    assert int(u["pieces"]) == len(g) == 8, u["pieces"]
    for p in P:
        assert abs(float(u["pred_" + p]) - np.mean([float(r["pred_" + p]) for r in g])) <= 1e-6, p
        assert len({r["true_" + p] for r in g}) == 1 and u["true_" + p] == g[0]["true_" + p], p
assert sorted(os.path.basename(u["source"]) for u in uni) == sorted(os.listdir("u")), "sources are not the universes"
PYEOF
pass "the predictions agree on 1 rank, 2x1x1, 2 groups x 1x2x1 and 2x2x1"
pass "each universe's prediction is the mean of its 8 pieces (by the manifest)"
mkdir bare && cp s/*.h5 bare/
"$BIN" predict $M --init w.safetensors --data bare --out bare.csv --quiet
[ -f bare.csv ] && [ ! -e bare.universes.csv ] && pass "no manifest: per-sample table only"

# refused NAME EXPECTED CMD...: exit 2, the message, no output file, no .tmp left.
refused() {
  local name=$1 want=$2
  shift 2
  rm -f bad.csv bad.csv.tmp
  set +e
  err=$(timeout 60 "$@" 2>&1)
  rc=$?
  set -e
  [ $rc -eq 2 ] || { echo "FAIL $name: exit $rc: $err"; exit 1; }
  grep -q -- "$want" <<<"$err" || { echo "FAIL $name: no '$want' in: $err"; exit 1; }
  [ ! -e bad.csv ] && [ ! -e bad.csv.tmp ] || { echo "FAIL $name: an output was written"; exit 1; }
  pass "refused: $name"
}
refused "--input for a regression model" "give a regression dataset as --data" \
  "$BIN" predict $M --init w.safetensors --input s/batch_000000.h5 --out bad.csv
refused "no --data" "needs --init, --data" "$BIN" predict $M --init w.safetensors --out bad.csv
refused "wrong --input-size" "use --input-size 32" \
  "$BIN" predict --model cosmoflow --input-size 64 --threads 1 --init w.safetensors --data s --out bad.csv
refused "batch below the groups" "use at least 2" \
  $MPI -np 2 "$BIN" predict $M --init w.safetensors --data s --batch-size 1 --out bad.csv
mkdir other && cp s/*.h5 other/ && sed 's/batch_000003.h5/batch_000099.h5/' s/manifest.json >other/manifest.json
refused "a manifest of other data" "does not list sample 0 of 'batch_000003.h5'" \
  $MPI -np 2 "$BIN" predict $M --init w.safetensors --data other --out bad.csv
echo '{"files": 3' >other/manifest.json
refused "a malformed manifest" "is not a valid preprocess manifest" \
  "$BIN" predict $M --init w.safetensors --data other --out bad.csv
refused "--data for a segmentation model" "give the case to segment as --input" \
  "$BIN" predict --model unet3d --input-size 16 --init w.safetensors --data s --out bad.h5
finish 11
