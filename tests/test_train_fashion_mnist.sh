#!/usr/bin/env bash
# test_train_fashion_mnist.sh TOWER — a short real run: 300 steps of the mnist
# model on Fashion-MNIST (2 CPU towers x 32) bring the loss clearly down.
source "$(dirname "$0")/train_common.sh"
convert_fashion_mnist
"$tower" train --model mnist --data "$work/train-*.tfrecord" --train_dir "$work/run" --num_towers 2 \
  --batch_size 32 --max_steps 300 --log_every 10 --learning_rate 0.01 --min_after_dequeue 5000 | tee "$work/log"
first=$(grep -m1 "step 1, loss" "$work/log" | sed 's/.*loss = \([0-9.]*\).*/\1/')
last=$(grep -E "step (260|270|280|290|300), loss" "$work/log" | sed 's/.*loss = \([0-9.]*\).*/\1/' |
       awk '{ s += $1; n++ } END { if (n) printf "%.3f", s / n }')
echo "loss at step 1: $first; mean over steps 260-300: $last"
[ -n "$first" ] && [ -n "$last" ] || fail "log lines missing"
awk -v a="$first" -v b="$last" 'BEGIN { exit !(a > 2.0 && b < 0.9) }' ||
  fail "the loss did not come down from about 2.3 to below 0.9 in 300 steps"
"$tower" eval --checkpoint_dir "$work/run" --data "$work/test-*.tfrecord" --no_moving_average | tee "$work/eval.log"
p=$(sed -n 's/.*precision @ 1 = //p' "$work/eval.log")
awk -v p="$p" 'BEGIN { exit !(p > 0.6) }' || fail "test precision $p after 300 steps (expected above 0.6)"
