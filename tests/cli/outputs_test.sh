#!/bin/bash
# What the program leaves on disk and asks of the system: every output
# (weights, metrics, profile, checkpoints, generated and preprocessed data,
# predictions) is created with the user's umask, and the program itself
# never runs a shell or opens a network port (MPI's launcher owns the
# connections between ranks).
source "$(dirname "$0")/setup.sh"
cd "$WORK"
umask 077
"$BIN" generate --out gen --count 2 --size 32 --quiet
"$BIN" preprocess --in gen --out pre --sample-size 16 --quiet
"$BIN" generate --kind segmentation --out cases --count 2 --size 16 --quiet
"$BIN" train --input-size 32 --batch-size 2 --train-samples 4 --val-samples 0 --steps 2 --threads 1 --quiet \
  --data gen --stage-dir stage --save w.safetensors --metrics m.jsonl --profile p.json --checkpoint-dir ck >/dev/null
"$BIN" train --model unet3d --input-size 16 --base-channels 4 --levels 2 --batch-size 2 --steps 1 --threads 1 \
  --val-samples 0 --quiet --save u.safetensors
"$BIN" predict --init u.safetensors --input cases/case_000000.h5 --out pred.h5 --input-size 16 --base-channels 4 \
  --levels 2 --quiet
loose=$(find . -mindepth 1 -perm /077 -printf '%m %p\n')
[ -z "$loose" ] || { echo "FAIL created past umask 077:"; echo "$loose"; exit 1; }
pass "umask 077: all $(find . -mindepth 1 | wc -l) outputs (files and directories) are private"

# The program's own imports (not MPI's): no shell, no process spawning, no listening socket.
imports=$(nm -D --undefined-only "$BIN" | awk '{print $NF}' | sed 's/@.*//')
bad=$(grep -xE 'system|popen|execl|execlp|execle|execv|execvp|execve|posix_spawn|posix_spawnp|fork|socket|bind|listen|accept|accept4' <<<"$imports" || true)
[ -z "$bad" ] || { echo "FAIL the program imports: $bad"; exit 1; }
pass "the program imports no shell, exec, fork or socket call ($(wc -l <<<"$imports") imports checked)"
finish 2
