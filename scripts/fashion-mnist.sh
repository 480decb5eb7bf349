#!/usr/bin/env bash
# fashion-mnist.sh — the README's first command: the main job on the default
# data.  Installs what is missing, builds, converts Debian's Fashion-MNIST
# (package dataset-fashion-mnist) to sharded TFRecords, trains the mnist model
# with the tower pattern on 2 towers (GPU towers when a GPU is usable, CPU
# towers otherwise), evaluates the moving averages on the 10,000 test images
# and says whether the precision reached the 0.88 mark.
# 1876 steps = 4 epochs of 60,000 at a global batch of 128; the learning rate
# 0.05 drops tenfold after 3 epochs.  Extra arguments are passed to
# `tower train` (e.g. --max_steps 100).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
tower=build/cmd/tower
src=/usr/share/datasets/fashion-mnist
out=data/fashion-mnist
if [ ! -f "$out/train-00003-of-00004.tfrecord" ] || [ ! -f "$out/test-00000-of-00001.tfrecord" ]; then
  mkdir -p "$out"
  $tower convert --from idx --images "$src/train-images-idx3-ubyte.gz" --labels "$src/train-labels-idx1-ubyte.gz" \
    --out "$out/train" --num_classes 10 --num_shards 4
  $tower convert --from idx --images "$src/t10k-images-idx3-ubyte.gz" --labels "$src/t10k-labels-idx1-ubyte.gz" \
    --out "$out/test" --num_classes 10 --num_shards 1
fi
train_dir=train/fashion-mnist
rm -rf "$train_dir"
start=$(date +%s)
$tower train --model mnist --data "$out/train-*.tfrecord" --train_dir "$train_dir" \
  --device auto --num_towers 2 --batch_size 64 --optimizer momentum --nesterov \
  --learning_rate 0.05 --lr_decay_factor 0.1 --num_epochs_per_decay 3 \
  --max_steps 1876 --log_every 100 --save_every 500 --log_device_placement "$@"
trained=$(( $(date +%s) - start ))
result=$($tower eval --checkpoint_dir "$train_dir" --data "$out/test-*.tfrecord" --no_progress)
echo "$result"
p=$(echo "$result" | sed -n 's/.*precision @ 1 = //p')
if awk -v p="$p" 'BEGIN { exit !(p >= 0.88) }'; then
  echo "Fashion-MNIST: test precision @ 1 = $p after ${trained} s of training: reached the 0.88 mark."
else
  echo "Fashion-MNIST: test precision @ 1 = $p after ${trained} s of training: below the 0.88 mark."
  exit 1
fi
