#!/bin/bash
# experiments/science/run.py end to end on experiments/science/smoke.toml
# (5 universes, every arm, 2 learning rates, an 8-step parity): the splits
# are disjoint ranges of universes and every arm is scored on the same test
# universes; the report names every arm, the baseline at every size and the
# parity; the figures are written; a rerun skips the finished steps and
# gives the same results. Its numbers mean nothing; docs/science.md has the
# real run (make science).
source "$(dirname "$0")/setup.sh"
"$PY" -c "import torch, h5py, numpy, matplotlib, tomllib" 2>/dev/null || {
  echo "SKIP: $PY lacks torch, h5py, numpy, matplotlib or tomllib"; exit 77; }
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT:-1} OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}
"$PY" "$ROOT/experiments/science/run.py" --config "$ROOT/experiments/science/smoke.toml" --work "$WORK/sci" \
  --binary "$BIN" >"$WORK/run1.log" 2>&1 || { cat "$WORK/run1.log"; exit 1; }
pass "the experiment ran"
cd "$WORK/sci"
"$PY" - <<'PYEOF'
import json, os
r = json.load(open("report/results.json"))
assert [a["name"] for a in r["arms"]] == ["A", "B", "C"], [a["name"] for a in r["arms"]]
assert sorted(r["baseline"]) == ["128", "32", "64"], sorted(r["baseline"])
assert r["test_universes"] == 2, r["test_universes"]
splits = {s: set(os.listdir(f"universes/{s}")) for s in ("train", "val", "test")}
assert all(len(v) == n for v, n in zip(splits.values(), (2, 1, 2))), splits
assert not (splits["train"] & splits["test"]) and not (splits["val"] & splits["test"]) and not (splits["train"] & splits["val"])
for side in (64, 32):
    m = json.load(open(f"sub{side}/test/manifest.json"))
    src = {os.path.basename(s["source"]) for f in m["files"] for s in f["samples"]}
    assert src == splits["test"], (side, src)
for a in r["arms"]:
    assert a["steps"] == 2 and len(a["true"]) == 2 and a["lr"] in (1e-3, 3e-3), a["name"]
p = r["parity"]
assert p and all(len(c) == 8 for fw in ("hybrid3d", "pytorch") for c in p["curves"][fw]), "parity curves"
for f in ("mse_vs_size.png", "pred_vs_true.png", "curves.png", "parity.png", "table.md"):
    assert os.path.getsize("report/" + f) > 1000, f
t = open("report/table.md").read()
for s in ("| A | 128^3 (2x1x1)", "| B | 64^3", "| C | 32^3", "A baseline", "PyTorch parity"):
    assert s in t, s
PYEOF
pass "splits by universe, every arm and size scored on the same test universes, report and figures"
cp report/results.json first.json
"$PY" "$ROOT/experiments/science/run.py" --config "$ROOT/experiments/science/smoke.toml" --work "$WORK/sci" \
  --binary "$BIN" >"$WORK/run2.log" 2>&1 || { cat "$WORK/run2.log"; exit 1; }
! grep -q "^[0-9:]* train arm\|^[0-9:]* generate" "$WORK/run2.log" || { echo "FAIL the rerun trained again"; exit 1; }
"$PY" -c "
import json
a, b = (json.load(open(f)) for f in ('first.json', 'report/results.json'))
assert [x['test_mse'] for x in a['arms']] == [x['test_mse'] for x in b['arms']]"
pass "a rerun skips the finished steps and reports the same"
finish 3
