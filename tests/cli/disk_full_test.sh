#!/bin/bash
# A checkpoint directory on a disk that is too small, on a real filesystem
# that runs out (a tmpfs of a chosen size, mounted for the test):
#  - read-only, or smaller than one checkpoint: refused before the first
#    step (exit 2);
#  - room for one checkpoint but not two: the first is written, the second
#    runs out of space mid-run; every rank stops cleanly (exit 5, one
#    message naming the intact checkpoint, no MPI_Abort), nothing partial
#    is left, and --resume auto from the intact one continues bitwise like
#    the run that never stopped.
# Mounting needs root (CI runs as root); elsewhere the test is skipped (77).
source "$(dirname "$0")/setup.sh"
cd "$WORK"
mkdir small
trap 'umount "$WORK/small" 2>/dev/null; rm -rf "$WORK"' EXIT
mount -t tmpfs -o size=1m tmpfs small 2>/dev/null || { echo "skip: cannot mount a tmpfs here (needs root)"; exit 77; }
umount small

C="train --model cosmoflow --input-size 32 --batch-size 2 --train-samples 8 --val-samples 0 --steps 6
   --optimizer adam --lr 1e-3 --log-every 1 --checkpoint-every 2 --threads 1"
losses() { awk '$1 == "step" {print $2, $4}' | tr '\n' ' '; }
# The run that never stops, on the layout of the one that will (2 ranks, 2x1x1).
full=$($MPI -np 2 "$BIN" $C --spatial 2x1x1 --checkpoint-dir normal | losses)
bytes=$(du -sb normal/ckpt-000006 | cut -f1)

# A read-only filesystem (root may write anywhere else): known before the first step.
mount -t tmpfs -o size=1m,ro tmpfs small
set +e
msg=$($MPI -np 2 "$BIN" $C --spatial 2x1x1 --checkpoint-dir small 2>&1)
code=$?
set -e
[ "$code" -eq 2 ] && grep -q "checkpoint-dir: 'small' is not writable" <<<"$msg" ||
  { echo "FAIL read-only checkpoint directory: exit $code, $msg"; exit 1; }
pass "a read-only checkpoint directory is refused before the first step (exit 2)"
umount small

# Half a checkpoint: known before the first step.
mount -t tmpfs -o size=$((bytes / 2)) tmpfs small
set +e
msg=$($MPI -np 2 "$BIN" $C --spatial 2x1x1 --checkpoint-dir small 2>&1)
code=$?
set -e
[ "$code" -eq 2 ] && grep -q "MiB free, but one checkpoint of this model takes about" <<<"$msg" &&
  ! grep -q "^step" <<<"$msg" || { echo "FAIL too small a disk: exit $code, $msg"; exit 1; }
pass "a checkpoint directory smaller than one checkpoint is refused before the first step (exit 2)"
umount small

# One and a half checkpoints: the second runs out of space.
mount -t tmpfs -o size=$((bytes * 3 / 2)) tmpfs small
set +e
msg=$(timeout 120 $MPI -np 2 "$BIN" $C --spatial 2x1x1 --checkpoint-dir small 2>&1)
code=$?
set -e
[ "$code" -eq 5 ] || { echo "FAIL disk full mid-run: exit $code (expected 5): $msg"; exit 1; }
grep -q "hybrid3d: warning: --checkpoint-dir 'small' has .* MiB free; --keep 2 needs about" <<<"$msg" ||
  { echo "FAIL no warning before the first step: $msg"; exit 1; }
grep -q "the checkpoint at step 4 could not be written (.*No space left on device.*); training stopped. The checkpoint of step 2 in 'small' is intact" <<<"$msg" ||
  { echo "FAIL message: $msg"; exit 1; }
[ "$(grep -c "hybrid3d: error" <<<"$msg")" -eq 1 ] || { echo "FAIL one message expected: $msg"; exit 1; }
! grep -qi "MPI_ABORT" <<<"$msg" || { echo "FAIL the job was aborted, not stopped: $msg"; exit 1; }
[ "$(ls small)" = "$(printf 'ckpt-000002\nlatest')" ] || { echo "FAIL left behind: $(ls small)"; exit 1; }
pass "disk full at the second checkpoint (2 ranks): exit 5, one message naming the intact checkpoint, nothing partial left"

# The intact checkpoint continues the run (the disk freed: copied elsewhere).
cp -r small freed
resumed=$($MPI -np 2 "$BIN" $C --spatial 2x1x1 --checkpoint-dir freed --resume auto | losses)
[ "$resumed" = "$(cut -d' ' -f5- <<<"$full")" ] || { echo "FAIL resume after disk full: '$resumed' vs '$full'"; exit 1; }
pass "--resume auto from the intact checkpoint continues bitwise like the uninterrupted run"
finish 4
