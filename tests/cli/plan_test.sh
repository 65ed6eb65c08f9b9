#!/bin/bash
# hybrid3d plan and the memory check of train (docs/scaling.md): the plan's
# JSON has a layout per accepted split with the fields the docs name; a run
# predicted not to fit is refused within seconds with the estimate, the
# layouts that fit and --force; --force runs it anyway; --spatial auto picks
# the layout plan marks; a memory size without a unit is refused.
source "$(dirname "$0")/setup.sh"
BASE="train --model cosmoflow --input-size 32 --batch-size 2 --train-samples 4 --val-samples 0 --steps 1 --quiet"

# 1. The JSON: one object per layout, the fields documented, one chosen.
"$BIN" plan --model cosmoflow --input-size 32 --batch-size 2 --ranks 2 --data synthetic --json > "$WORK/plan.json"
"$PY" - "$WORK/plan.json" <<'PYEOF'
import json, sys
a = json.load(open(sys.argv[1]))
names = sorted(p["spatial"] for p in a)
assert names == ["1x1x1", "1x1x2", "1x2x1", "2x1x1"], names
for p in a:
    for k in ("spatial", "data_groups", "peak_rss_bytes", "step_seconds", "fits", "memory_bytes", "seconds"):
        assert k in p, (k, p)
    assert p["peak_rss_bytes"] > 0 and p["step_seconds"] > 0, p
assert [p["step_seconds"] for p in a] == sorted(p["step_seconds"] for p in a), "not fastest first"
assert sum(p["chosen"] for p in a) == 1, a
assert next(p for p in a if p["spatial"] == "1x1x1")["data_groups"] == 2
PYEOF
pass "plan --json lists the 4 layouts of 2 ranks, fastest first, one chosen"

# 2. Too little memory: refused in seconds with the estimate and the way out.
start=$(date +%s)
set +e
out=$(timeout 120 $MPI -np 2 "$BIN" $BASE --spatial 2x1x1 --memory-per-rank 20MiB 2>&1)
rc=$?
set -e
took=$(( $(date +%s) - start ))
[ $rc -eq 2 ] || { echo "FAIL: exit $rc, wanted 2"; echo "$out"; exit 1; }
grep -q "predicted peak memory per rank" <<<"$out" || { echo "FAIL: no estimate: $out"; exit 1; }
grep -q -- "--force" <<<"$out" || { echo "FAIL: no --force hint: $out"; exit 1; }
[ "$(grep -c 'hybrid3d: error' <<<"$out")" -eq 1 ] || { echo "FAIL: not one error line: $out"; exit 1; }
[ $took -le 30 ] || { echo "FAIL: took $took s"; exit 1; }
pass "20MiB per rank refused in $took s: $(grep -m1 'hybrid3d: error' <<<"$out" | cut -c1-120)"

# 3. --force runs it anyway, with a warning.
out=$($MPI -np 2 "$BIN" $BASE --spatial 2x1x1 --memory-per-rank 20MiB --force 2>&1)
grep -q "running anyway (--force)" <<<"$out" || { echo "FAIL: no warning: $out"; exit 1; }
pass "--force trains with a warning"

# 4. --spatial auto takes the layout plan marks.
chosen=$("$PY" -c "import json,sys; print(next(p['spatial'] for p in json.load(open(sys.argv[1])) if p['chosen']))" "$WORK/plan.json")
out=$($MPI -np 2 "$BIN" train --model cosmoflow --input-size 32 --batch-size 2 --train-samples 4 --val-samples 0 \
  --steps 1 --spatial auto --data-store-mib 0 2>&1)
grep -q -- "--spatial auto: $chosen" <<<"$out" || { echo "FAIL: auto did not take $chosen: $out"; exit 1; }
pass "--spatial auto took $chosen"

# 5. A size without a unit.
set +e
out=$("$BIN" plan --model cosmoflow --input-size 32 --memory-per-rank 1500 2>&1)
rc=$?
set -e
[ $rc -eq 2 ] && grep -q "not a memory size" <<<"$out" || { echo "FAIL: unitless size: rc $rc $out"; exit 1; }
pass "a size without a unit is refused"

# 6. --calibrate on 2 ranks at once: a machine file with this job's measured
# communication terms (not the built-in guesses) that plan then takes.
$MPI -np 2 "$BIN" plan --model cosmoflow --input-size 32 --optimizer adam --calibrate "$WORK/machine.json" > "$WORK/cal.txt"
"$PY" - "$WORK/machine.json" <<'PYEOF'
import json, sys
m = json.load(open(sys.argv[1]))
assert m["calibrated_ranks_per_node"] == 2, m
assert m["conv"] and all(all(g > 0 for g in c["gflops"]) for c in m["conv"]), m["conv"]
# The built-in communication terms are 3e-6 s / 4 GB/s and 5e-6 s / 3 GB/s:
# a measured file has its own.
assert (m["p2p_latency_s"], m["p2p_gbps"]) != (3e-6, 4) and (m["allreduce_latency_s"], m["allreduce_gbps"]) != (5e-6, 3), m
assert m["step_factor"] >= 1, m
PYEOF
"$BIN" plan --model cosmoflow --input-size 32 --batch-size 2 --ranks 2 --machine "$WORK/machine.json" | grep -q "2 ranks measuring at once" ||
  { echo "FAIL: plan did not take the calibrated file"; exit 1; }
pass "plan --calibrate on 2 ranks: $(cut -c1-150 "$WORK/cal.txt")"
finish 6
