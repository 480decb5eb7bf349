#!/usr/bin/env bash
# test_accum_cli.sh TOWER — --accum_steps and --loss_scaling from the
# command line, on Fashion-MNIST's test set: 2 towers with shards 3,1, 2
# micro-batches each, global_batch weighting; the placement log names the
# micro-batches and the weighting, the global batch is (3 + 1) x 2 = 8, the
# run logs a sane loss at its last step and writes its checkpoint.
# The arithmetic itself is tests/test_accum_steps.c's.  Skipped (77)
# without the data set (Debian package dataset-fashion-mnist).
set -euo pipefail
tower=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
src=/usr/share/datasets/fashion-mnist
[ -f "$src/t10k-images-idx3-ubyte.gz" ] || { echo "skipped: $src is missing"; exit 77; }
"$tower" convert --from idx --images "$src/t10k-images-idx3-ubyte.gz" --labels "$src/t10k-labels-idx1-ubyte.gz" \
  --out "$work/fm" --num_shards 1 >/dev/null
"$tower" train --model mnist --data "$work/fm-*.tfrecord" --train_dir "$work/train" --num_towers 2 --shard_sizes 3,1 \
  --accum_steps 2 --loss_scaling global_batch --max_steps 6 --log_every 3 --min_after_dequeue 100 \
  --log_device_placement --no_progress >"$work/train.log" 2>&1 || { cat "$work/train.log"; fail "tower train failed"; }
grep -q "tower_0: .*batch 3 x 2 micro-batches (--accum_steps)" "$work/train.log" || fail "tower_0's micro-batches not logged"
grep -q "tower_1: .*batch 1 x 2 micro-batches (--accum_steps)" "$work/train.log" || fail "tower_1's micro-batches not logged"
grep -q "global batch 8 = 2 tower(s)" "$work/train.log" || fail "the global batch is not (3 + 1) x 2"
grep -q "weighted by their shard sizes over the global batch (--loss_scaling global_batch)" "$work/train.log" ||
  fail "the weighting is not logged"
grep -q "step 6, loss = 2\.[0-9]" "$work/train.log" || { cat "$work/train.log"; fail "no sane loss at step 6"; }
[ -f "$work/train/model.ckpt-6" ] || fail "no checkpoint at step 6"
echo "tower train --accum_steps 2 --loss_scaling global_batch --shard_sizes 3,1: ok"
