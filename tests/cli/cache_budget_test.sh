#!/bin/bash
# One memory budget for every sample cache (--data-store-mib): synthetic
# universes are kept in the data store inside it, with the validation set,
# and what does not fit is generated again. The losses are the same with a
# budget that keeps everything, one that keeps two blocks, and none; the
# store never keeps more than the budget; and a group of 2 ranks, which
# generates each universe together, keeps the same blocks on both ranks (a
# disagreement would hang the FFT: the timeout catches that).
source "$(dirname "$0")/setup.sh"
T="train --model cosmoflow --input-size 32 --batch-size 4 --train-samples 8 --val-samples 4 --steps 6 --log-every 1
   --val-every 3 --optimizer sgd --lr 0.01 --threads 1"
losses() { awk '$1 == "step" {print $4} $1 == "validation" {print $4}' | tr -d ',' | tr '\n' ' '; }
# store_line OUT: "hits loaded kept used limit" from the closing data-store line.
store_line() { sed -n 's/^data store (rank 0): \([0-9]*\) blocks from memory, \([0-9]*\) loaded, \([0-9.]*\) MiB kept (all sets: \([0-9.]*\) of \([0-9.]*\) MiB)$/\1 \2 \3 \4 \5/p'; }

big=$("$BIN" $T --data-store-mib 64)
ref=$(losses <<<"$big")
[ "$(wc -w <<<"$ref")" -ge 8 ] || { echo "FAIL expected 6 losses and 2 validations: '$ref' in $big"; exit 1; }
read -r hits loaded kept used limit <<<"$(store_line <<<"$big")"
# 8 training blocks of 4 x 32^3 int16 counts (0.25 MiB each) are kept, and
# the 4 validation blocks; the later epochs read them from memory.
[ "$loaded" = 8 ] && [ "$hits" = 16 ] && [ "$kept" = "2.0" ] && [ "$used" = "3.0" ] && [ "$limit" = "64.0" ] ||
  { echo "FAIL 64 MiB store: hits $hits loaded $loaded kept $kept used $used limit $limit"; exit 1; }

small=$("$BIN" $T --data-store-mib 0.7)
agree "$ref" "$(losses <<<"$small")" || { echo "FAIL 0.7 MiB store changes the losses"; exit 1; }
read -r hits loaded kept used limit <<<"$(store_line <<<"$small")"
# Two blocks fit (0.25 MiB and 16 bytes each; the third does not, nor any
# validation block): the other six training samples are generated again in
# each of the 3 epochs.
[ "$kept" = "0.5" ] && [ "$used" = "0.5" ] && [ "$limit" = "0.7" ] && [ "$hits" = 4 ] && [ "$loaded" = 20 ] ||
  { echo "FAIL 0.7 MiB store: hits $hits loaded $loaded kept $kept used $used limit $limit"; exit 1; }

none=$("$BIN" $T --data-store-mib 0)
agree "$ref" "$(losses <<<"$none")" || { echo "FAIL no store changes the losses"; exit 1; }
grep -q "^data store" <<<"$none" && { echo "FAIL --data-store-mib 0 still reports a store"; exit 1; }

# 2 ranks, one universe split in two: each rank keeps half a block (0.125 MiB) per sample.
two=$(timeout 120 $MPI -np 2 "$BIN" $T --spatial 2x1x1 --data-store-mib 0.7) || { echo "FAIL 2 ranks (exit $?)"; exit 1; }
agree "$ref" "$(losses <<<"$two")" || { echo "FAIL 2 ranks with a 0.7 MiB store: other losses"; exit 1; }
read -r hits loaded kept used limit <<<"$(store_line <<<"$two")"
"$PY" -c "import sys; assert 0 < float(sys.argv[1]) <= float(sys.argv[2]) == 0.7" "$used" "$limit" && [ "$hits" -gt 0 ] ||
  { echo "FAIL 2-rank store: hits $hits used $used of $limit"; exit 1; }
pass "one budget: the same losses with 64 MiB, 0.7 MiB and no store, on 1 and 2 ranks; the store stays in it"
finish 1
