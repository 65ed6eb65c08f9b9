#!/bin/bash
# --deterministic: the same weights, buffers (batch-norm statistics) and
# losses, bit for bit, under every layout: data groups, spatial splits along
# each dimension, 2x2x1, 1x4x1, 2x2x2, uneven blocks (3x1x1), on 1 to 8 ranks,
# for cosmoflow with and without batch norm, unet3d and cosmoflow-lbann 128.
# Every run uses one thread per rank (oneDNN's weight gradient sums depend
# on the thread count). A layout whose blocks are not whole tiles is refused.
source "$(dirname "$0")/setup.sh"
cd "$WORK"
COMMON="--steps 2 --val-samples 0 --threads 1 --quiet --deterministic"
losses() { grep -o '"loss":[^,]*' "$1" | tr '\n' ' '; }

# same NAME ARGS -- LAYOUTS...: every "ranks spatial" layout gives the 1-rank
# run's saved file and losses exactly.
same() {
  local name=$1 args=$2
  shift 2
  "$BIN" train $args $COMMON --save ref.st --metrics ref.jsonl > ref.log 2>&1 ||
    { echo "FAIL $name on 1 rank: $(tail -3 ref.log)"; exit 1; }
  [ "$(losses ref.jsonl | wc -w)" = 2 ] || { echo "FAIL $name: no losses in ref.jsonl"; exit 1; }
  for layout in "$@"; do
    set -- $layout
    rm -f run.st run.jsonl
    timeout 300 $MPI -np "$1" "$BIN" train $args $COMMON --spatial "$2" --save run.st --metrics run.jsonl > run.log 2>&1 ||
      { echo "FAIL $name on $1 ranks, --spatial $2: $(grep -i error run.log | head -2)"; exit 1; }
    cmp -s ref.st run.st || { echo "FAIL $name on $1 ranks, --spatial $2: other weights or buffers"; exit 1; }
    [ "$(losses ref.jsonl)" = "$(losses run.jsonl)" ] ||
      { echo "FAIL $name on $1 ranks, --spatial $2: losses $(losses run.jsonl) against $(losses ref.jsonl)"; exit 1; }
    pass "$name: $1 ranks --spatial $2 bitwise"
  done
}

ALL=("2 1x1x1" "2 2x1x1" "2 1x2x1" "2 1x1x2" "3 1x1x1" "4 2x2x1" "4 1x4x1" "4 2x1x1" "8 2x2x2")
same "cosmoflow" "--model cosmoflow --input-size 32 --batch-size 4 --train-samples 8" "${ALL[@]}"
same "cosmoflow bn k3 dropout" \
  "--model cosmoflow --input-size 32 --batch-size 4 --train-samples 8 --batchnorm --kernel-size 3 --dropout 0.2" \
  "${ALL[@]}"
# unet3d with 3 levels cannot split 16^3 in four (its bottom is 2^3), in any mode.
same "unet3d ce+dice" "--model unet3d --input-size 16 --base-channels 8 --batch-size 4 --train-samples 8 --loss ce+dice" \
  "2 1x1x1" "2 2x1x1" "2 1x2x1" "2 1x1x2" "3 1x1x1" "4 2x2x1" "4 2x1x1" "8 2x2x2"
same "unet3d 2 levels" "--model unet3d --input-size 16 --levels 2 --base-channels 4 --batch-size 2 --train-samples 4" \
  "4 1x4x1" "3 3x1x1" "8 2x2x2"
same "cosmoflow-lbann 128" "--model cosmoflow-lbann --input-size 128 --batch-size 2 --train-samples 2" \
  "2 1x1x1" "4 1x2x2" "8 2x2x2"

# cosmoflow-lbann 128 has 2 tiles per dimension: 4 blocks along H are refused, naming the mode.
if out=$(timeout 120 $MPI -np 4 "$BIN" train --model cosmoflow-lbann --input-size 128 --batch-size 1 --train-samples 1 \
    $COMMON --spatial 1x4x1 2>&1); then
  echo "FAIL 1x4x1 on cosmoflow-lbann 128 was accepted"; exit 1
fi
grep -q -- "--deterministic: at layer conv1 dimension H is split into blocks of 32, 32, 32, 32 voxels" <<<"$out" ||
  { echo "FAIL the refusal does not say why: $out"; exit 1; }
pass "a layout of partial tiles is refused with the reason"
finish 33
