#!/usr/bin/env bash
# test_gpu_train.sh TOWER — a short real run on the GPU: 300 steps of the
# mnist model on Fashion-MNIST with GPU towers (--device gpu, 2 towers x 32,
# as test_train_fashion_mnist.sh does on the CPU) bring the loss below 0.9.
# Skips (77) without nvidia-smi, a visible GPU or the dataset
# (TOWER_FASHION_MNIST_DIR or /usr/share/datasets/fashion-mnist); fails
# instead under TOWER_TEST_REQUIRE_GPU=1 (tests/gpu_skip.sh).
source "$(dirname "$0")/gpu_skip.sh"
require_gpu
source "$(dirname "$0")/train_common.sh"
convert_fashion_mnist
"$tower" train --device gpu --model mnist --data "$work/train-*.tfrecord" --train_dir "$work/run" --num_towers 2 \
  --batch_size 32 --max_steps 300 --log_every 10 --learning_rate 0.01 --min_after_dequeue 5000 \
  --log_device_placement | tee "$work/log"
grep -q "/gpu:" "$work/log" || fail "--log_device_placement shows no GPU tower"
first=$(grep -m1 "step 1, loss" "$work/log" | sed 's/.*loss = \([0-9.]*\).*/\1/')
last=$(grep -E "step (260|270|280|290|300), loss" "$work/log" | sed 's/.*loss = \([0-9.]*\).*/\1/' |
       awk '{ s += $1; n++ } END { if (n) printf "%.3f", s / n }')
echo "loss at step 1: $first; mean over steps 260-300: $last"
[ -n "$first" ] && [ -n "$last" ] || fail "log lines missing"
awk -v a="$first" -v b="$last" 'BEGIN { exit !(a > 2.0 && b < 0.9) }' ||
  fail "the loss did not come down from about 2.3 to below 0.9 in 300 steps on the GPU"
