#!/bin/bash
# test_mobilenet_cli.sh — `tower train/eval/export --model mobilenet_v2` end to end on a small image folder
# (resized to --image_size 32), and the refusals of its flags.
#   - --width_multiplier outside (0, 16], --head other than keras|seed, --batch_norm other than
#     tower|sync, an unknown --model (the message lists the table's networks): exit 2, one line naming the flag;
#   - 28x28 TFRecords for mobilenet_v2 (it needs 32x32): exit 1, one line pointing at an image folder + --image_size;
#     with --image_size 96 on them (which TFRecords do not take: it was ignored), one line naming the stored size;
#   - 2 replicated towers train 6 Adam steps at width 0.35; eval runs in evaluation mode (moving statistics):
#     its result does not depend on the batch size (1 and 16 give the same line; in training mode, batch
#     statistics, they differ); export writes the moving statistics and records the network options;
#   - --batch_norm sync: 2 parameter-server towers train 2 steps (the towers' collective per batch norm);
#   - --fc_width for the VGGs: vgg11 with --fc_width 64 trains 2 steps, the checkpoint records it (a
#     --resume with --fc_width 128 is refused naming both), eval rebuilds it and export's metadata has it;
#     --fc_width 0 is refused.
# Usage: test_mobilenet_cli.sh TOWER TEST_IMAGEFOLDER
set -euo pipefail
tower=$1 images=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$images" make "$work/imgs" 20
refuse() { # refuse CODE PATTERN args...: exit CODE, one line on stderr matching PATTERN
  local code=$1 pattern=$2
  shift 2
  set +e
  "$tower" "$@" >"$work/out" 2>"$work/err"
  local rc=$?
  set -e
  [ "$rc" -eq "$code" ] || fail "$* : exit $rc, expected $code ($(cat "$work/err"))"
  [ "$(wc -l <"$work/err")" -eq 1 ] || fail "$* : expected one line: $(cat "$work/err")"
  grep -q -- "$pattern" "$work/err" || fail "$* : '$(cat "$work/err")' does not match '$pattern'"
  echo "ok: refused: $(cat "$work/err")"
}
base=(train --model mobilenet_v2 --data "$work/imgs" --image_size 32 --num_classes 3 --train_dir "$work/r")
refuse 2 'width_multiplier 0' "${base[@]}" --width_multiplier 0
refuse 2 'width_multiplier 17' "${base[@]}" --width_multiplier 17
refuse 2 'width_multiplier -1' "${base[@]}" --width_multiplier -1
refuse 2 "head 'big'" "${base[@]}" --head big
refuse 2 "batch_norm 'towers': expected tower or sync" "${base[@]}" --batch_norm towers
refuse 2 "model 'mobilenet'.*mobilenet_v2" "${base[@]}" --model mobilenet
refuse 2 'width_multiplier 0' bench --models mobilenet_v2 --width_multiplier 0
refuse 2 'fc_width 0' "${base[@]}" --model vgg11 --fc_width 0

"$tower" convert --from imagefolder "$work/imgs" --out "$work/tfr/train" --image_size 28 --channels 1 >/dev/null 2>&1
refuse 1 'at least 32x32.*image folder as --data with --image_size' train --model mobilenet_v2 \
  --data "$work/tfr/train-*.tfrecord" --num_classes 3 --train_dir "$work/tfr_run"
refuse 1 '^tower train: --image_size 96: --model mobilenet_v2 uses TFRecord images at their stored size, 28x28 in .*train-00000-of-00001.tfrecord (--image_size crops' \
  train --model mobilenet_v2 --data "$work/tfr/train-*.tfrecord" --image_size 96 --num_classes 3 --train_dir "$work/tfr_run"
# --image_size 0 ("no crop") is what such a model does with TFRecords: taken (it was refused as another size).
"$tower" convert --from imagefolder "$work/imgs" --out "$work/tfr32/train" --image_size 32 --channels 1 >/dev/null 2>&1
"$tower" train --model vgg11 --fc_width 16 --data "$work/tfr32/train-*.tfrecord" --image_size 0 --num_classes 3 \
  --train_dir "$work/tfr0_run" --max_steps 1 --batch_size 2 --min_after_dequeue 4 --summary_every 0 >/dev/null \
  2>"$work/tfr0.err" || fail "vgg11 --image_size 0 on 32x32 TFRecords: $(cat "$work/tfr0.err")"
echo "ok: --image_size 0 with TFRecords of a model that takes them as stored"
# A network too large for the machine is a memory refusal naming the flag that shrinks it (vgg11 --fc_width 65536,
# available memory forced): at 8 GB its towers' buffers, which a batch of 1 does not shrink ("lower --batch_size"
# said of a batch of 1 before); at 30 GB its parameter server, before it is asked for (it was "cannot create the
# parameter server ... (out of memory?)").
big=(train --model vgg11 --fc_width 65536 --data "$work/tfr32/train-*.tfrecord" --num_classes 3
     --train_dir "$work/big_run" --max_steps 1 --batch_size 1)
TOWER_TEST_MEM_AVAILABLE_BYTES=8000000000 refuse 1 \
  '^tower train: not enough memory: this run needs up to [0-9.]* GiB of host memory (the memory bound: input [0-9.]* GiB, towers [0-9.]* GiB, the server.s not yet counted; global batch 1), and 7.45 GiB is available (TOWER_TEST_MEM_AVAILABLE_BYTES): lower --fc_width$' \
  "${big[@]}"
TOWER_TEST_MEM_AVAILABLE_BYTES=30000000000 refuse 1 \
  '^tower train: not enough memory: the parameter server of 4338068739 variables needs 80.80 GiB of host memory (.*), and 27.94 GiB is available (TOWER_TEST_MEM_AVAILABLE_BYTES): lower --fc_width$' \
  "${big[@]}"
[ ! -e "$work/big_run" ] || fail "the refused run left its train_dir"
# The flag named is the one that shrinks the largest part: the shuffle buffer of 1024 x 1024 decoded images
# outweighs one thread's decode buffers (it named --max_image_pixels or --input_threads); a network without a
# size flag whose activations a batch of 1 keeps is lowered through --image_size (it said "lower a smaller --model").
TOWER_TEST_MEM_AVAILABLE_BYTES=1000000000 refuse 1 ': lower --min_after_dequeue or --image_size$' \
  train --model mobilenet_v2 --data "$work/imgs" --num_classes 3 --image_size 1024 --batch_size 1 --input_threads 1 \
  --max_image_pixels 2100000 --train_dir "$work/big_run"
TOWER_TEST_MEM_AVAILABLE_BYTES=1000000000 refuse 1 ': lower --image_size, or train a smaller --model$' \
  train --model resnet50 --data "$work/imgs" --num_classes 3 --image_size 2048 --max_image_pixels 8388608 \
  --batch_size 1 --min_after_dequeue 0 --train_dir "$work/big_run"
[ ! -e "$work/big_run" ] || fail "the refused run left its train_dir"

"$tower" "${base[@]}" --width_multiplier 0.35 --num_towers 2 --batch_size 8 --max_steps 6 --optimizer adam \
  --variable_update replicated --all_reduce host --skip_corrupt --max_corrupt_fraction 1 --min_after_dequeue 20 \
  --log_every 2 --summary_every 0 >"$work/train.out" 2>"$work/train.err" || fail "train: $(cat "$work/train.err")"
grep -q 'done at step 6' "$work/train.out" || fail "train did not reach step 6: $(tail -3 "$work/train.out")"
echo "ok: mobilenet_v2 at width 0.35, 2 replicated towers, 6 steps"

ev=(eval --checkpoint_dir "$work/r" --data "$work/imgs" --num_classes 3 --eval_dir none --skip_corrupt
    --max_corrupt_fraction 1 --no_moving_average)
"$tower" "${ev[@]}" --batch_size 1 2>/dev/null | grep -o '[0-9]* of [0-9]* examples correct; cross-entropy [0-9.]*' >"$work/e1"
"$tower" "${ev[@]}" --batch_size 16 2>/dev/null | grep -o '[0-9]* of [0-9]* examples correct; cross-entropy [0-9.]*' >"$work/e16"
[ -s "$work/e1" ] && cmp -s "$work/e1" "$work/e16" ||
  fail "eval depends on the batch size (batch statistics?): $(cat "$work/e1") vs $(cat "$work/e16")"
echo "ok: eval in evaluation mode: batch 1 = batch 16: $(cat "$work/e1")"

"$tower" export --checkpoint_dir "$work/r" --out "$work/m.safetensors" >/dev/null || fail "export"
for name in '"bn_Conv1/moving_mean"' '"bn_Conv1/moving_variance"' '"Conv_1_bn/moving_variance"' \
  '"width_multiplier":"0.35"' '"head":"keras"'; do
  LC_ALL=C grep -aqF -- "$name" "$work/m.safetensors" || fail "the export lacks $name"
done
echo "ok: export holds the moving statistics and the network options"
# The width as digits that read back as the same float: "%g" wrote 0.1375 for 0.1374999, another network in Keras.
"$tower" "${base[@]}" --train_dir "$work/odd" --width_multiplier 0.1374999 --max_steps 0 --skip_corrupt \
  --max_corrupt_fraction 1 --summary_every 0 >/dev/null 2>"$work/odd.err" || fail "train 0.1374999: $(cat "$work/odd.err")"
"$tower" export --checkpoint_dir "$work/odd" --out "$work/odd.safetensors" >/dev/null || fail "export 0.1374999"
LC_ALL=C grep -aqF '"width_multiplier":"0.1374999"' "$work/odd.safetensors" ||
  fail "the export's width is not 0.1374999: $(LC_ALL=C grep -ao '"width_multiplier":"[^"]*"' "$work/odd.safetensors")"
echo "ok: export's width_multiplier reads back as the trained float (0.1374999)"

"$tower" "${base[@]}" --train_dir "$work/sync" --width_multiplier 0.35 --num_towers 2 --batch_size 8 --max_steps 2 \
  --batch_norm sync --skip_corrupt --max_corrupt_fraction 1 --min_after_dequeue 20 --log_every 1 --summary_every 0 \
  >"$work/sync.out" 2>"$work/sync.err" || fail "train --batch_norm sync: $(cat "$work/sync.err")"
grep -q 'done at step 2' "$work/sync.out" || fail "--batch_norm sync did not reach step 2: $(tail -3 "$work/sync.out")"
echo "ok: --batch_norm sync, 2 towers, 2 steps"

vgg=(train --model vgg11 --fc_width 64 --data "$work/imgs" --image_size 32 --num_classes 3 --train_dir "$work/vgg"
     --batch_size 4 --skip_corrupt --max_corrupt_fraction 1 --min_after_dequeue 20 --summary_every 0)
"$tower" "${vgg[@]}" --max_steps 2 >"$work/vgg.out" 2>"$work/vgg.err" || fail "vgg11 --fc_width 64: $(cat "$work/vgg.err")"
grep -q 'done at step 2' "$work/vgg.out" || fail "vgg11 did not reach step 2: $(tail -3 "$work/vgg.out")"
rc=0
"$tower" "${vgg[@]}" --max_steps 3 --resume --fc_width 128 >/dev/null 2>"$work/vgg_resume.err" || rc=$?
[ "$rc" != 0 ] && grep -q 'fc_width 64.*expected.*fc_width 128' "$work/vgg_resume.err" ||
  fail "a --resume with --fc_width 128 over a --fc_width 64 checkpoint: exit $rc, $(cat "$work/vgg_resume.err")"
"$tower" eval --checkpoint_dir "$work/vgg" --data "$work/imgs" --num_classes 3 --eval_dir none --skip_corrupt \
  --max_corrupt_fraction 1 >"$work/vgg_eval.out" 2>&1 || fail "eval of vgg11 --fc_width 64: $(tail -3 "$work/vgg_eval.out")"
"$tower" export --checkpoint_dir "$work/vgg" --out "$work/vgg.safetensors" >/dev/null || fail "export of vgg11"
LC_ALL=C grep -aqF '"fc_width":"64"' "$work/vgg.safetensors" || fail "the export does not record fc_width 64"
echo "ok: vgg11 --fc_width 64: trained, recorded (resume with 128 refused), evaluated, exported"
