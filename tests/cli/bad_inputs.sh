#!/bin/bash
# Bad inputs on 2 ranks: each must exit non-zero, within seconds, with a
# message naming the cause; nothing may hang and no --save file may appear.
set -u
BIN="$1"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
MPI="mpirun --oversubscribe --bind-to none -x OMP_NUM_THREADS=1"
BASE="train --input-size 32 --batch-size 2 --train-samples 4 --val-samples 0 --steps 2 --quiet"
pass=0 fail=0

expect_error() {  # name, expected text, command...
  local name="$1" text="$2"
  shift 2
  local out rc
  out=$(timeout 120 "$@" 2>&1)
  rc=$?
  if [ $rc -eq 124 ]; then
    echo "FAIL $name: timed out (hang)"; fail=$((fail + 1))
  elif [ $rc -eq 0 ]; then
    echo "FAIL $name: exit 0"; fail=$((fail + 1))
  elif ! grep -q -- "$text" <<<"$out"; then
    echo "FAIL $name: message lacks '$text':"; echo "$out" | head -5; fail=$((fail + 1))
  elif [ "$(grep -c 'hybrid3d: error' <<<"$out")" -lt 1 ]; then
    echo "FAIL $name: no 'hybrid3d: error' line"; fail=$((fail + 1))
  else
    echo "ok   $name (exit $rc): $(grep -m1 'hybrid3d: error' <<<"$out" | cut -c1-150)"; pass=$((pass + 1))
  fi
}

echo "not hdf5" > "$WORK/broken.h5"
mkdir -p "$WORK/empty"
$MPI -np 2 "$BIN" generate --out "$WORK/univ" --count 1 --size 16 --quiet
printf '\x10\x00\x00\x00\x00\x00\x00\x00{"a":1}' > "$WORK/bad.safetensors"

expect_error "unknown flag" "--bogus" $MPI -np 2 "$BIN" $BASE --bogus
expect_error "flag out of range" "--batch-size" $MPI -np 2 "$BIN" $BASE --batch-size 0
expect_error "bad --spatial syntax" "DxHxW" $MPI -np 2 "$BIN" $BASE --spatial 2x2
expect_error "ranks vs layout" "multiple of 3" $MPI -np 2 "$BIN" $BASE --spatial 3x1x1
expect_error "layout cannot split a layer" "cannot be split" $MPI -np 4 "$BIN" train --model cosmoflow-lbann --input-size 128 --spatial 4x1x1 --batch-size 1 --steps 1 --quiet
expect_error "batch smaller than data groups" "data-parallel groups" $MPI -np 2 "$BIN" $BASE --batch-size 1
expect_error "unknown model" "cosmoflow-lbann" $MPI -np 2 "$BIN" $BASE --model resnet
expect_error "bad input size" "power of two" $MPI -np 2 "$BIN" $BASE --input-size 48
expect_error "missing data" "no HDF5 files" $MPI -np 2 "$BIN" $BASE --data "$WORK/empty"
expect_error "malformed data file" "broken.h5" $MPI -np 2 "$BIN" $BASE --data "$WORK/broken.h5"
expect_error "malformed --init" "not a valid safetensors" $MPI -np 2 "$BIN" $BASE --init "$WORK/bad.safetensors"
expect_error "missing --init" "cannot open safetensors" $MPI -np 2 "$BIN" $BASE --init "$WORK/nope.safetensors"
expect_error "unwritable --save" "--save" $MPI -np 2 "$BIN" $BASE --save /nonexistent/dir/w.safetensors
expect_error "unknown read mode" "independent, collective or naive" $MPI -np 2 "$BIN" $BASE --read-mode fast
expect_error "unknown --last-batch" "drop or pad" $MPI -np 2 "$BIN" $BASE --last-batch keep
expect_error "bad --val-fraction" "--val-fraction" $MPI -np 2 "$BIN" $BASE --val-fraction 1.5
expect_error "split leaves no training data" "leave no training" $MPI -np 2 "$BIN" $BASE --val-fraction 0.5 --test-fraction 0.5
expect_error "--val-data and --val-fraction" "not both" $MPI -np 2 "$BIN" $BASE --val-fraction 0.25 --val-data synthetic
expect_error "unwritable --stage-dir" "staging" $MPI -np 2 "$BIN" $BASE --data "$WORK/broken.h5" --stage-dir /proc/nope
expect_error "generate: unwritable --out" "cannot create" $MPI -np 2 "$BIN" generate --out /proc/nope/x --size 16
expect_error "preprocess: missing input" "no HDF5 files" $MPI -np 2 "$BIN" preprocess --in "$WORK/empty" --out "$WORK/pp"
expect_error "preprocess: size does not divide" "does not divide" $MPI -np 2 "$BIN" preprocess --in "$WORK/univ" --out "$WORK/pp" --sample-size 12
expect_error "preprocess: unknown layout" "lbann" $MPI -np 2 "$BIN" preprocess --in "$WORK/univ" --out "$WORK/pp" --layout nchw
expect_error "preprocess: gzip without chunks" "--chunk" $MPI -np 2 "$BIN" preprocess --in "$WORK/univ" --out "$WORK/pp" --gzip 3
expect_error "non-finite loss" "the loss is .*the first non-finite values are in the output of layer '" \
  $MPI -np 2 "$BIN" $BASE --steps 20 --lr 1e12 --save "$WORK/never.safetensors"
# A NaN in one sample's input (LBANN layout, float32): found in the data, not blamed on a layer.
/usr/bin/python3 - "$WORK/nan" <<'PYEOF'
import os, sys
import h5py, numpy as np
os.makedirs(sys.argv[1])
for i in range(2):
    x = np.ones((4, 32, 32, 32), np.float32)
    if i == 1:
        x[2, 20, 5, 7] = np.nan
    with h5py.File(f"{sys.argv[1]}/s{i}.h5", "w") as f:
        f["full"] = x
        f["unitPar"] = np.zeros(4, np.float32)
PYEOF
expect_error "NaN in the input data" "the input data of this step is not finite" \
  $MPI -np 2 "$BIN" $BASE --data "$WORK/nan" --spatial 2x1x1 --save "$WORK/never.safetensors"
# --config files (apps/hybrid3d/config_file.hpp): each fault named with its line.
printf 'lr = 0.1\nbogus = 3\n' > "$WORK/unknown.toml"
printf '[train]\nlr 0.1\n' > "$WORK/noeq.toml"
printf 'quiet = maybe\n' > "$WORK/switch.toml"
head -c 2000000 /dev/zero | tr '\0' 'a' > "$WORK/huge.toml"
expect_error "--config: unknown flag" "unknown.toml' line 2: 'bogus' is not a flag of hybrid3d train" \
  $MPI -np 2 "$BIN" $BASE --config "$WORK/unknown.toml"
expect_error "--config: not name = value" "noeq.toml' line 2: expected 'name = value'" \
  $MPI -np 2 "$BIN" $BASE --config "$WORK/noeq.toml"
expect_error "--config: a switch given a value" "'quiet' is a switch: true or false" \
  $MPI -np 2 "$BIN" $BASE --config "$WORK/switch.toml"
expect_error "--config: missing file" "cannot be read" $MPI -np 2 "$BIN" $BASE --config "$WORK/none.toml"
expect_error "--config: 2 MB file" "larger than 1 MiB" $MPI -np 2 "$BIN" $BASE --config "$WORK/huge.toml"
if ls "$WORK"/never.safetensors* >/dev/null 2>&1; then echo "FAIL a --save file was left behind"; fail=$((fail + 1)); fi

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
