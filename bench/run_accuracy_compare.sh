#!/usr/bin/env bash
# run_accuracy_compare.sh [SEEDS...] — Tower against PyTorch on one epoch of
# Fashion-MNIST with the same hyperparameters (mnist model, TensorFlow's
# initializers, Nesterov momentum 0.9, learning rate 0.01, global batch 128 =
# 2 CPU towers x 64 for Tower), over several seeds, in one run; prints each
# run's test precision @ 1 and images/sec, and the means.  Not a test.
# Needs a build in build/ (bash scripts/build.sh) and /usr/bin/python3 with torch.
set -euo pipefail
cd "$(dirname "$0")/.."
seeds=("$@")
[ ${#seeds[@]} -gt 0 ] || seeds=(1 2 3)
tower=${TOWER:-build/cmd/tower}
src=/usr/share/datasets/fashion-mnist
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
$tower convert --from idx --images $src/train-images-idx3-ubyte.gz --labels $src/train-labels-idx1-ubyte.gz \
  --out "$work/train" --num_shards 4 >/dev/null
$tower convert --from idx --images $src/t10k-images-idx3-ubyte.gz --labels $src/t10k-labels-idx1-ubyte.gz \
  --out "$work/test" --num_shards 1 >/dev/null
echo "machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'); $(date -u +%Y-%m-%d)"
for s in "${seeds[@]}"; do
  t0=$(date +%s.%N)
  $tower train --model mnist --data "$work/train-*.tfrecord" --train_dir "$work/run$s" --num_towers 2 \
    --batch_size 64 --learning_rate 0.01 --optimizer momentum --nesterov --num_epochs 1 --seed "$s" \
    --log_every 100 --min_after_dequeue 20000 >"$work/train$s.log"
  t1=$(date +%s.%N)
  steps=$(sed -n 's/.*done at step \([0-9]*\).*/\1/p' "$work/train$s.log")
  rate=$(grep "examples/sec" "$work/train$s.log" | tail -n +2 | sed 's/.*(\([0-9.]*\) examples.*/\1/' |
         sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }')
  raw=$($tower eval --checkpoint_dir "$work/run$s" --data "$work/test-*.tfrecord" --no_moving_average | sed -n 's/.*precision @ 1 = //p')
  ema=$($tower eval --checkpoint_dir "$work/run$s" --data "$work/test-*.tfrecord" | sed -n 's/.*precision @ 1 = //p')
  printf "tower   seed %s: precision @ 1 = %s (moving averages: %s); %s steps in %.1f s (median %s examples/sec)\n" \
    "$s" "$raw" "$ema" "$steps" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" "$rate" | tee -a "$work/summary"
  /usr/bin/python3 bench/pytorch_fashion_mnist.py --seed "$s" --threads "$(nproc)" | tee -a "$work/summary"
done
awk '{ for (i = 1; i < NF; i++) if ($i == "=") { v = $(i + 1) + 0; break } }
     /^tower/ { t += v; nt++ } /^pytorch/ { p += v; np++ }
     END { printf "mean precision @ 1 over %d seeds: tower %.4f, pytorch %.4f, difference %+.4f\n", nt, t / nt, p / np, t / nt - p / np }' \
  "$work/summary"
