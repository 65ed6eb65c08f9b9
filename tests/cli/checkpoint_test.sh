#!/bin/bash
# Checkpoint and resume: 6 steps against 3 steps + resume + 3 steps give
# bitwise the same losses and final weights on the same layout (cosmoflow
# with dropout and Adam; unet3d with random crops and flips); a run resumed
# on another layout (2 ranks -> 4, 4 -> 1) agrees within tolerance; a
# damaged newest checkpoint (a flipped bit, a malformed meta.json) is
# reported and the one before used; a checkpoint of another model is refused.
source "$(dirname "$0")/setup.sh"
cd "$WORK"
# Each step's loss and each validation's first number, as printed.
numbers() { awk '$1 == "step" {print $2, $4} $1 == "validation" {print $4, $6}' | tr '\n' ' '; }

C="train --model cosmoflow --input-size 32 --batch-size 2 --train-samples 8 --val-samples 4 --steps 6 --dropout 0.3
   --optimizer adam --lr 1e-3 --log-every 1 --threads 1"
full=$("$BIN" $C --save full.safetensors | numbers)
"$BIN" $C --checkpoint-dir ck --stop-after 3 --quiet
resumed=$("$BIN" $C --checkpoint-dir ck --resume auto --save resumed.safetensors | numbers)
[ "$resumed" = "$(cut -d' ' -f7- <<<"$full")" ] || { echo "FAIL cosmoflow resume: '$resumed' vs '$full'"; exit 1; }
cmp -s full.safetensors resumed.safetensors || { echo "FAIL cosmoflow resume: final weights differ"; exit 1; }
pass "cosmoflow (dropout, Adam): 3 steps + resume + 3 steps = 6 steps, bitwise (losses, validation, weights)"

"$BIN" generate --kind segmentation --out cases --count 6 --size 32 --quiet
U="train --model unet3d --input-size 16 --base-channels 4 --levels 2 --batch-size 2 --steps 6 --random-crop --flip
   --optimizer adam --lr 1e-3 --log-every 1 --val-samples 0 --threads 1 --data cases"
full=$("$BIN" $U --save ufull.safetensors | numbers)
"$BIN" $U --checkpoint-dir uck --stop-after 3 --quiet
resumed=$("$BIN" $U --checkpoint-dir uck --resume auto --save uresumed.safetensors | numbers)
[ "$resumed" = "$(cut -d' ' -f7- <<<"$full")" ] || { echo "FAIL unet3d resume: '$resumed' vs '$full'"; exit 1; }
cmp -s ufull.safetensors uresumed.safetensors || { echo "FAIL unet3d resume: final weights differ"; exit 1; }
pass "unet3d (random crops, flips, batch norm, Adam): 3 + resume + 3 = 6 steps, bitwise"

# Across layouts: written on 2 ranks (2x1x1), resumed on 4 (2x2x1); written on 4, resumed on 1.
ref=$("$BIN" $C | numbers)
$MPI -np 2 "$BIN" $C --spatial 2x1x1 --checkpoint-dir x1 --stop-after 3 --quiet
a=$($MPI -np 4 "$BIN" $C --spatial 2x2x1 --checkpoint-dir x1 --resume auto | numbers)
agree "$a" "$(cut -d' ' -f7- <<<"$ref")" || { echo "FAIL resume 2 -> 4 ranks: '$a' vs '$ref'"; exit 1; }
$MPI -np 4 "$BIN" $C --spatial 1x2x1 --checkpoint-dir x2 --stop-after 3 --quiet
b=$("$BIN" $C --checkpoint-dir x2 --resume auto | numbers)
agree "$b" "$(cut -d' ' -f7- <<<"$ref")" || { echo "FAIL resume 4 -> 1 rank: '$b' vs '$ref'"; exit 1; }
pass "resume across layouts: 2x1x1 -> 2x2x1 and 4 ranks -> 1 agree with the uninterrupted run"

# A checkpoint directory that only rank 0 sees (a node-local disk): each rank
# starts in its own working directory, so the relative --checkpoint-dir
# exists for rank 0 alone. Rank 0 writes, reads and broadcasts; the resumed
# run prints the uninterrupted run's losses, bitwise.
mkdir -p r0 r1
N="$C --spatial 2x1x1 --checkpoint-dir ck --log-every 1"
full2=$($MPI -np 2 "$BIN" $N | numbers)
mpmd() { $MPI -np 1 --wdir r0 "$BIN" $N "$@" : -np 1 --wdir r1 "$BIN" $N "$@"; }
mpmd --stop-after 3 --quiet
out=$(mpmd --resume auto)
[ -z "$(ls r1)" ] && grep -q "resume: ck/ckpt-000003 at step 3" <<<"$out" &&
  [ "$(numbers <<<"$out")" = "$(cut -d' ' -f7- <<<"$full2")" ] ||
  { echo "FAIL rank-0-only checkpoint directory: r1 holds '$(ls r1)'; $out"; exit 1; }
pass "a checkpoint directory on rank 0's node only: written, found and broadcast by rank 0; resume bitwise"

# A bit flipped in the newest checkpoint's weights: reported, the previous one used.
"$BIN" $C --checkpoint-dir bad --checkpoint-every 2 --stop-after 4 --quiet
"$PY" - <<'PYEOF'
p = "bad/ckpt-000004/model.safetensors"
raw = bytearray(open(p, "rb").read())
raw[-100] ^= 0x10
open(p, "wb").write(bytes(raw))
PYEOF
out=$("$BIN" $C --checkpoint-dir bad --resume auto 2>&1)
grep -q "checkpoint 'bad/ckpt-000004' .*fails its checksum; trying the one before" <<<"$out" ||
  { echo "FAIL corrupt checkpoint not reported: $out"; exit 1; }
grep -q "resume: bad/ckpt-000002 at step 2" <<<"$out" || { echo "FAIL previous checkpoint not used: $out"; exit 1; }
truncate -s 100 bad/ckpt-000006/optimizer.safetensors  # written by the resumed run
set +e
msg=$("$BIN" $C --resume bad/ckpt-000006 2>&1)
code=$?
set -e
[ "$code" -eq 2 ] && grep -q "damaged optimizer.safetensors" <<<"$msg" || { echo "FAIL truncated: exit $code, $msg"; exit 1; }
pass "a bit-flipped newest checkpoint is reported and the previous one used; a truncated one is refused"

# A meta.json with fields of the wrong type (hand-edited, damaged): reported, the previous one used.
"$BIN" $C --checkpoint-dir meta --checkpoint-every 2 --stop-after 4 --quiet
"$PY" - <<'PYEOF'
import json
p = "meta/ckpt-000004/meta.json"
m = json.load(open(p))
m["step"] = "six"
m["checksums"]["model.safetensors"] = [1, 2]
json.dump(m, open(p, "w"))
PYEOF
out=$("$BIN" $C --checkpoint-dir meta --resume auto 2>&1)
grep -q "checkpoint 'meta/ckpt-000004' has a meta.json without a valid step" <<<"$out" &&
  grep -q "resume: meta/ckpt-000002 at step 2" <<<"$out" || { echo "FAIL malformed meta.json: $out"; exit 1; }
pass "a meta.json with malformed fields is reported and the previous checkpoint used"

set +e
msg=$("$BIN" $C --checkpoint-dir ck --resume auto --dropout 0.1 2>&1)
code=$?
set -e
[ "$code" -eq 2 ] && grep -q "was written with model" <<<"$msg" || { echo "FAIL other model: exit $code, $msg"; exit 1; }
pass "a checkpoint of another model is refused (exit 2)"

# Signals and kills on a real 2-rank job (one rank's process, not mpirun).
L="train --model cosmoflow --input-size 32 --batch-size 2 --train-samples 8 --val-samples 0 --steps 100000
   --log-every 1000 --threads 1 --checkpoint-every 20"
rank_pid() {  # a rank of the job whose metrics file is $1
  for p in $(pgrep -f "$1"); do [ "$(cat /proc/$p/comm 2>/dev/null)" = hybrid3d ] && echo "$p"; done | tail -1
}
wait_for() {  # until file $1 exists, at most 60 s
  for _ in $(seq 600); do [ -e "$1" ] && return 0; sleep 0.1; done
  return 1
}
start=$(date +%s)
$MPI -np 2 "$BIN" $L --checkpoint-dir term --metrics "$WORK/term.jsonl" >term.log 2>&1 &
job=$!
wait_for term/latest || { echo "FAIL SIGTERM: no first checkpoint"; exit 1; }
kill -TERM "$(rank_pid term.jsonl)"
set +e
wait $job
code=$?
set -e
grep -q "stopped by a signal after step" term.log && [ "$code" -eq 4 ] ||
  { echo "FAIL SIGTERM: exit $code, $(tail -3 term.log)"; exit 1; }
stopped=$(sed -n 's/.*stopped by a signal after step \([0-9]*\) .*/\1/p' term.log)
[ "$(cat term/latest)" = "$(printf 'ckpt-%06d' "$stopped")" ] || { echo "FAIL SIGTERM: latest is $(cat term/latest)"; exit 1; }
out=$("$BIN" ${L/--steps 100000/--steps $((stopped + 2))} --checkpoint-dir term --resume auto)
grep -q "resume: term/ckpt-$(printf '%06d' "$stopped") at step $stopped" <<<"$out" || { echo "FAIL resume after SIGTERM: $out"; exit 1; }
pass "SIGTERM on one rank: step $stopped finished, checkpoint written, exit 4, resumed ($(($(date +%s) - start)) s)"

start=$(date +%s)
$MPI -np 2 "$BIN" $L --checkpoint-dir killed --metrics "$WORK/kill.jsonl" >kill.log 2>&1 &
job=$!
wait_for killed/latest || { echo "FAIL SIGKILL: no first checkpoint"; exit 1; }
kill -KILL "$(rank_pid kill.jsonl)"
set +e
timeout 60 tail --pid=$job -f /dev/null
waited=$?
wait $job
code=$?
set -e
[ "$waited" -eq 0 ] && [ "$code" -ne 0 ] || { echo "FAIL SIGKILL: the job did not end (timeout $waited, exit $code)"; kill -KILL $job; exit 1; }
last=$(cat killed/latest)
out=$("$BIN" ${L/--steps 100000/--steps $((10#${last#ckpt-} + 1))} --checkpoint-dir killed --resume auto)
grep -q "resume: killed/$last" <<<"$out" || { echo "FAIL resume after SIGKILL: $out"; exit 1; }
pass "SIGKILL of one rank: the job ended in $(($(date +%s) - start)) s (exit $code); resumed from $last"

# --skip-nonfinite: steps whose loss is not finite are skipped and counted (default: stop, exit 3).
out=$("$BIN" train --input-size 32 --batch-size 2 --train-samples 4 --val-samples 0 --steps 6 --lr 1e12 --threads 1 \
  --skip-nonfinite --metrics nf.jsonl --save nf.safetensors)
n=$(grep -c '"skipped":true' nf.jsonl)
[ "$n" -ge 1 ] && grep -q "skipped $n step(s) whose loss or gradients were not finite" <<<"$out" ||
  { echo "FAIL --skip-nonfinite: $n skipped in the metrics, $(tail -2 <<<"$out")"; exit 1; }
"$PY" -c "
import json, struct, sys
import numpy as np
raw = open('nf.safetensors', 'rb').read()
n = struct.unpack('<Q', raw[:8])[0]
h = json.loads(raw[8:8 + n])
for k, v in h.items():
    if k != '__metadata__' and v['dtype'] == 'F32':
        a, b = v['data_offsets']
        assert np.isfinite(np.frombuffer(raw[8 + n + a:8 + n + b], np.float32)).all(), k
" || { echo "FAIL --skip-nonfinite: non-finite weights saved"; exit 1; }
pass "--skip-nonfinite: $n non-finite steps skipped and counted, the saved weights finite"
finish 10
