#!/bin/sh
# run_eco_interop.sh TOWER TEST_IMAGEFOLDER — the `interop` ctest of the
# ecosystem features: finds a Python with TensorBoard and safetensors
# (TOWER_PYTHON, else python3), makes a small image-folder dataset, converts
# it, trains, evaluates and exports with TOWER, then runs eco_interop.py,
# which reads the event files with TensorBoard's own EventAccumulator and the
# .safetensors files with the safetensors package (and, where TensorFlow is
# importable, recomputes the histograms and the evaluation with TensorFlow).
# Exits 77 (skipped) when `import tensorboard` or `import safetensors` fails.
set -e
here=$(cd "$(dirname "$0")" && pwd)
tower=$1
images=$2
py=${TOWER_PYTHON:-python3}
for mod in tensorboard safetensors numpy; do
  if ! "$py" -c "import $mod" >/dev/null 2>&1; then
    echo "skipped: '$py' cannot import $mod (pip install tensorboard safetensors numpy, or set TOWER_PYTHON)"
    exit 77
  fi
done
work=$(mktemp -d "${TMPDIR:-/tmp}/tower_eco_interop_XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
"$images" make "$work/imgs" 40
# --keep_order: the listing's order, in which 30 steps learn (precision 0.633): the TensorFlow comparison needs a model
# that learned, and a permutation of 120 images left it at 0.383.
"$tower" convert --from imagefolder "$work/imgs" --out "$work/data/train" --image_size 28 --channels 1 --keep_order \
  --num_shards 2 --no_progress >/dev/null 2>&1
"$tower" train --model mnist --num_classes 3 --data "$work/data/train-*.tfrecord" --num_towers 2 --batch_size 8 \
  --min_after_dequeue 50 --learning_rate 0.05 --train_dir "$work/run" --max_steps 30 --summary_every 10 \
  --histogram_every 20 --no_progress >/dev/null
"$tower" eval --checkpoint_dir "$work/run" --data "$work/data/train-*.tfrecord" --num_classes 3 --batch_size 50 \
  --no_progress >"$work/eval.out"
"$tower" eval --checkpoint_dir "$work/run" --data "$work/data/train-*.tfrecord" --num_classes 3 --batch_size 50 \
  --top_k 2 --eval_dir none --no_progress >"$work/eval_top2.out"
"$tower" export --checkpoint_dir "$work/run" --out "$work/ema.safetensors" >/dev/null
"$tower" export --checkpoint_dir "$work/run" --out "$work/raw.safetensors" --no_moving_average >/dev/null
# A run that ended past its last checkpoint (model.ckpt-20 and its index entry gone, as after a crash at step 20
# with the checkpoint of step 10 the last), then resumed from step 10: its events of steps 12 to 20 are in the
# first file and again in the second.
"$tower" train --model mnist --num_classes 3 --data "$work/data/train-*.tfrecord" --batch_size 8 \
  --min_after_dequeue 50 --train_dir "$work/crashed" --max_steps 20 --save_every 10 --summary_every 2 \
  --histogram_every 0 --no_progress >/dev/null
rm "$work/crashed/model.ckpt-20"
printf 'model_checkpoint_path: "model.ckpt-10"\nall_model_checkpoint_paths: "model.ckpt-10"\n' >"$work/crashed/checkpoint"
sleep 1 # the second events file's name: another second
"$tower" train --model mnist --num_classes 3 --data "$work/data/train-*.tfrecord" --batch_size 8 \
  --min_after_dequeue 50 --train_dir "$work/crashed" --max_steps 24 --save_every 10 --summary_every 2 \
  --histogram_every 0 --no_progress --resume >/dev/null
"$py" "$here/eco_interop.py" "$work"
