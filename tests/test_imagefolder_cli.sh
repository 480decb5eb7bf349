#!/usr/bin/env bash
# test_imagefolder_cli.sh TOWER TEST_IMAGEFOLDER — an image folder as --data of
# `tower train` and `tower eval` (decoded in the input pipeline), on a dataset
# made here (3 classes x 30 grey 28x28 PNG/JPEG, plus broken.png, notes.txt
# and a corrupt file whose name holds a control byte):
#   without --skip_corrupt the first bad image stops train with one line and exit 1;
#   with it, one escaped warning per bad file, and train_dir/labels.txt is the class list;
#   eval on the folder = eval on the same folder converted by `tower convert` (same
#     precision and cross-entropy: same images, labels and order);
#   a test split lacking a class maps its folders by the checkpoint's labels.txt
#     (= converting it with --labels), and --labels that differ are refused; a checkpoint's labels.txt
#     of another count than the model's outputs is refused;
#   resume: 8 + 8 steps with --resume = 16 steps straight, bitwise; another seed differs;
#   a JPEG with damaged scan data is kept: one warning over 3 epochs, counted in train's and eval's end lines;
#   a directory of .tfrecord files still gets the hint (exit 2); --labels with TFRecord data is refused;
#   a model that cannot take the folder's --image_size is refused with one line naming the flag (exit 1);
#   --resize_mode random_crop: the same run twice is bitwise the same, 8 + 8 steps with --resume = 16 straight,
#     and it differs from --resize_mode resize; eval and convert refuse it (exit 2), and any --resize_mode but
#     resize with TFRecord data is refused (exit 1);
#   --central_fraction 0.875 (center_crop from a shorter side of 32 at 28): eval on the folder = eval on the folder
#     converted with the same flags, unlike the whole shorter side; with another --resize_mode refused (exit 2);
#   TFRecords of the folder's files as encoded images (image/encoded): eval = eval on the folder, the bad files
#     warned about as records; train reads them with a random crop; the default keys and a missing --image_size
#     are named; tower convert --encoded writes them (eval on its records = eval on the folder; the shape
#     features' keys free for its image and label), and refuses the options of decoded images;
#   a FIFO, a device link and a subfolder in a class folder are warned about as what they are;
#   out of file descriptors under --skip_corrupt: one line, not good images skipped as corrupt;
#   --max_image_pixels: the refusal of a larger image names it, and raised, train and eval read the image.
#   a bad image under a 900-byte path: its message whole (the file and the reason), refused and warned;
#   elongated images: a side over 65535 pixels named (train and convert alike), a centre crop's scaled size
#     computed without wrapping an int and bounded in convert as in train.
set -euo pipefail
tower=$1 images=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$images" make "$work/imgs" 30
printf '\377\330\377\340 truncated' >"$work/imgs/cross/bad$(printf '\001').jpg"
common=(--model mnist --num_classes 3 --image_size 28 --batch_size 8 --min_after_dequeue 40 --learning_rate 0.02
        --moving_average_decay 0 --summary_every 0 --log_every 100 --input_threads 2)

# ---- the first bad image stops training without --skip_corrupt
set +e
"$tower" train "${common[@]}" --data "$work/imgs" --train_dir "$work/stop" --max_steps 40 >"$work/stop.out" 2>"$work/stop.err"
rc=$?
set -e
[ "$rc" -eq 1 ] || fail "a bad image without --skip_corrupt: exit $rc, expected 1"
[ "$(wc -l <"$work/stop.err")" -eq 1 ] || fail "expected one error line: $(cat "$work/stop.err")"
grep -Eq '^tower train: .*/imgs/(circle/broken.png|square/notes.txt|cross/bad\\x01.jpg): ' "$work/stop.err" ||
  fail "the error does not name a bad file (escaped): $(cat "$work/stop.err")"

# ---- --skip_corrupt: each bad file warned about once, escaped; the class list in train_dir
"$tower" train "${common[@]}" --data "$work/imgs" --train_dir "$work/run" --max_steps 60 --skip_corrupt \
  --max_corrupt_fraction 1 >"$work/run.out" 2>"$work/run.err"
cat "$work/run.err"
[ "$(grep -c 'warning: ' "$work/run.err")" -eq 3 ] || fail "expected 3 warning lines"
grep -q 'warning: .*/imgs/cross/bad\\x01.jpg: JPEG is truncated (premature end of data; libjpeg: .*) (skipped)$' "$work/run.err" ||
  fail "no escaped warning for bad\\x01.jpg"
! grep -q "$(printf '\001')" "$work/run.err" || fail "a raw control byte reached the terminal"
grep -q "3 corrupt records (.*) skipped" "$work/run.out" || fail "the end line does not count 3 bad images: $(tail -1 "$work/run.out")"
[ "$(cat "$work/run/labels.txt")" = "$(printf 'circle\ncross\nsquare')" ] || fail "train_dir/labels.txt: $(cat "$work/run/labels.txt")"
echo "ok: train on the folder, 3 bad files skipped with escaped warnings, labels.txt recorded"

# ---- eval on the folder = eval on its conversion
"$tower" convert --from imagefolder "$work/imgs" --out "$work/data/train" --image_size 28 --channels 1 >/dev/null 2>&1
ev=(--checkpoint_dir "$work/run" --num_classes 3 --batch_size 16 --eval_dir none)
"$tower" eval "${ev[@]}" --data "$work/imgs" --skip_corrupt --max_corrupt_fraction 1 >"$work/eval_folder.out" 2>/dev/null
"$tower" eval "${ev[@]}" --data "$work/data/train-*.tfrecord" >"$work/eval_tfr.out"
a=$(grep -o 'precision @ 1 = .*\|[0-9]* of [0-9]* examples correct; cross-entropy [0-9.]*' "$work/eval_folder.out")
b=$(grep -o 'precision @ 1 = .*\|[0-9]* of [0-9]* examples correct; cross-entropy [0-9.]*' "$work/eval_tfr.out")
[ -n "$a" ] && [ "$a" = "$b" ] || fail "eval on the folder ($a) differs from eval on its conversion ($b)"
grep -q " of 90 examples correct" <<<"$a" || fail "eval did not count the 90 good images: $a"
precision=$(sed -n 's/.*precision @ 1 = \([0-9.]*\)$/\1/p' "$work/eval_folder.out")
awk -v p="$precision" 'BEGIN { exit !(p >= 0.5) }' || fail "precision $precision after 60 steps: the labels or images are wrong"
echo "ok: eval on the folder = eval on its conversion: $(tr '\n' ' ' <<<"$a")"

# ---- TFRecords of the folder's encoded files (image/encoded, image/class/label, as build_image_data.py writes
#      them; the bad files become bad records): eval = eval on the folder; train reads them, a random crop too;
#      the default keys name the flags to give
mkdir -p "$work/enc"
"$images" encode "$work/imgs" "$work/enc/one" 1
"$images" encode "$work/imgs" "$work/enc/two" 2
enc=(--image_key image/encoded --label_key image/class/label)
"$tower" eval "${ev[@]}" "${enc[@]}" --data "$work/enc/one-*" --skip_corrupt --max_corrupt_fraction 1 \
  >"$work/eval_enc.out" 2>"$work/eval_enc.err"
c=$(grep -o 'precision @ 1 = .*\|[0-9]* of [0-9]* examples correct; cross-entropy [0-9.]*' "$work/eval_enc.out")
[ -n "$c" ] && [ "$c" = "$a" ] || fail "eval on the encoded records ($c) differs from eval on the folder ($a)"
[ "$(grep -c 'warning: .*/enc/one-00000-of-00001: record [0-9]* at offset [0-9]*: .* (skipped; [0-9]* bytes of .*/enc/one-00000-of-00001 unreadable)$' "$work/eval_enc.err")" -eq 3 ] ||
  fail "eval on the encoded records: not 3 warnings naming the bad records: $(cat "$work/eval_enc.err")"
"$tower" train "${common[@]}" "${enc[@]}" --data "$work/enc/two-*" --train_dir "$work/enc_run" --max_steps 30 \
  --skip_corrupt --max_corrupt_fraction 1 --resize_mode random_crop --log_device_placement >"$work/enc_run.out" 2>"$work/enc_run.err" ||
  fail "train on encoded records: $(tail -3 "$work/enc_run.err")"
grep -q "encoded TFRecord images: .* MiB of decode buffers" "$work/enc_run.out" ||
  fail "train on encoded records: no memory-bound line for them: $(head -5 "$work/enc_run.out")"
grep -q "3 corrupt records (.*) skipped" "$work/enc_run.out" || fail "train on encoded records: $(tail -1 "$work/enc_run.out")"
set +e
"$tower" train "${common[@]}" --data "$work/enc/two-*" --train_dir "$work/enc_keys" --max_steps 2 >/dev/null 2>"$work/enc_keys.err"
rc=$?
"$tower" train "${common[@]}" "${enc[@]}" --data "$work/enc/two-*" --train_dir "$work/enc_size" --image_size 0 \
  --max_steps 2 >/dev/null 2>"$work/enc_size.err"
rc2=$?
set -e
[ "$rc" -eq 1 ] && grep -q "feature 'image/encoded' is an encoded PNG file (.* bytes): give --image_key image/encoded" \
  "$work/enc_keys.err" || fail "the default keys on encoded records: exit $rc, $(cat "$work/enc_keys.err")"
[ "$rc2" -ne 0 ] && grep -q "encoded TFRecord images as --data need --image_size >= 1" "$work/enc_size.err" ||
  fail "encoded records without --image_size: exit $rc2, $(cat "$work/enc_size.err")"
# tower convert --encoded: the folder's files as stored (the bad ones skipped, as convert skips them), in listing
# order: eval on them = eval on the folder
"$tower" convert --from imagefolder --encoded --keep_order --out "$work/enc/conv" "${enc[@]}" "$work/imgs" \
  >"$work/conv_enc.out" 2>"$work/conv_enc.err" || fail "convert --encoded: $(cat "$work/conv_enc.err")"
grep -q "^tower convert: wrote 90 examples (JPEG and PNG files as stored, the first 28 x 28 pixels, none)" "$work/conv_enc.out" ||
  fail "convert --encoded: $(head -1 "$work/conv_enc.out")"
"$tower" eval "${ev[@]}" "${enc[@]}" --data "$work/enc/conv-*" >"$work/eval_conv_enc.out"
c=$(grep -o 'precision @ 1 = .*\|[0-9]* of [0-9]* examples correct; cross-entropy [0-9.]*' "$work/eval_conv_enc.out")
[ "$c" = "$a" ] || fail "eval on convert --encoded's records ($c) differs from eval on the folder ($a)"
# It writes no shape features, so the keys decoded images' records give them are free: eval reads them.
"$tower" convert --from imagefolder --encoded --keep_order --out "$work/enc/hw" --image_key height --label_key width \
  "$work/imgs" >/dev/null 2>"$work/conv_enc_hw.err" || fail "convert --encoded --image_key height: $(cat "$work/conv_enc_hw.err")"
"$tower" eval "${ev[@]}" --image_key height --label_key width --data "$work/enc/hw-*" >"$work/eval_conv_hw.out"
c=$(grep -o 'precision @ 1 = .*\|[0-9]* of [0-9]* examples correct; cross-entropy [0-9.]*' "$work/eval_conv_hw.out")
[ "$c" = "$a" ] || fail "eval on convert --encoded --image_key height's records ($c) differs from eval on the folder ($a)"
for given in "--channels 1" "--image_size 32"; do # refused when given, its default value too
  set +e
  "$tower" convert --from imagefolder --encoded $given --out "$work/enc/no" "$work/imgs" >/dev/null 2>"$work/conv_enc_ch.err"
  rc=$?
  set -e
  [ "$rc" -eq 2 ] && grep -q "^tower convert: ${given% *} applies to decoded images: --encoded writes the files as stored" \
    "$work/conv_enc_ch.err" || fail "convert --encoded $given: exit $rc, $(cat "$work/conv_enc_ch.err")"
done
# tower bench on them (its --image_key, --label_key and --image_size as train's)
"$tower" bench --models mnist --towers 1 --modes ps_cpu --steps 2 --warmup 1 --batch_size 8 --csv "" --svg "" \
  --data "$work/enc/conv-*" "${enc[@]}" --image_size 28 >"$work/bench_enc.out" 2>&1 ||
  fail "bench on encoded records: $(tail -3 "$work/bench_enc.out")"
grep -q "^mnist *ps_cpu *1 *8 " "$work/bench_enc.out" || fail "bench on encoded records: no row: $(cat "$work/bench_enc.out")"
"$tower" inspect "${enc[@]}" "$work/enc/conv-00000-of-00001.tfrecord" >"$work/inspect_enc.out" ||
  fail "inspect on encoded records: exit $?"
grep -q "^tower train and eval read these files: encoded JPEG or PNG images ('image/encoded', [0-9]* to [0-9]* bytes; decoded and resized to --image_size in the pipeline, not here), int64 labels ('image/class/label') from 0 to 2" \
  "$work/inspect_enc.out" || fail "inspect on encoded records: $(tail -1 "$work/inspect_enc.out")"
set +e
"$tower" inspect "${enc[@]}" "$work/enc/one-00000-of-00001" >/dev/null 2>"$work/inspect_enc_bad.err"
rc=$?
set -e
[ "$rc" -eq 3 ] && grep -q "would refuse 1 record whose image 'image/encoded' is not a JPEG or PNG file" "$work/inspect_enc_bad.err" ||
  fail "inspect on encoded records with notes.txt's bytes among them: exit $rc, $(cat "$work/inspect_enc_bad.err")"
echo "ok: encoded TFRecords: eval = eval on the folder, train reads them (random crop), the keys and size named, inspect's verdict"

# ---- a split without "cross": the checkpoint's class list maps its folders (as convert --labels does)
mkdir -p "$work/test"
cp -r "$work/imgs/circle" "$work/imgs/square" "$work/test/"
rm -f "$work/test/circle/broken.png" "$work/test/square/notes.txt"
"$tower" convert --from imagefolder "$work/test" --out "$work/tdata/test" --image_size 28 --channels 1 \
  --labels "$work/run/labels.txt" >/dev/null 2>&1
"$tower" eval "${ev[@]}" --data "$work/test" >"$work/eval_split.out" 2>"$work/eval_split.err"
"$tower" eval "${ev[@]}" --data "$work/tdata/test-*.tfrecord" >"$work/eval_split_tfr.out"
a=$(grep -o '[0-9]* of [0-9]* examples correct; cross-entropy [0-9.]*' "$work/eval_split.out")
b=$(grep -o '[0-9]* of [0-9]* examples correct; cross-entropy [0-9.]*' "$work/eval_split_tfr.out")
[ -n "$a" ] && [ "$a" = "$b" ] || fail "a split without cross: folder ($a) and --labels conversion ($b) differ"
grep -q "class 1 ('cross') of .* has no folder here" "$work/eval_split.err" || fail "no warning for the missing class"
# On a terminal (script's pty) eval counts the examples for its progress line from the listing the pipeline then
# reads (listed once): the same result, the warning once.
if command -v script >/dev/null 2>&1; then
  script -qec "$(printf '%q ' "$tower" eval "${ev[@]}" --data "$work/test")" /dev/null >"$work/eval_split_tty.out" 2>&1 </dev/null ||
    { cat "$work/eval_split_tty.out"; fail "eval on a terminal failed"; }
  c=$(grep -ao '[0-9]* of [0-9]* examples correct; cross-entropy [0-9.]*' "$work/eval_split_tty.out")
  [ "$c" = "$a" ] || fail "eval on a terminal ($c) differs from eval to a file ($a)"
  n=$(grep -ac "class 1 ('cross') of .* has no folder here" "$work/eval_split_tty.out")
  [ "$n" -eq 1 ] || fail "eval on a terminal: the missing class's warning $n times"
  echo "ok: eval on a terminal (progress line): the same result, the warning once"
fi
printf 'circle\nsquare\n' >"$work/short.txt"
set +e
"$tower" eval "${ev[@]}" --data "$work/test" --labels "$work/short.txt" >/dev/null 2>"$work/eval_short.err"
rc=$?
set -e
[ "$rc" -eq 1 ] && grep -q "differs from the checkpoint's class list" "$work/eval_short.err" ||
  fail "--labels unlike the checkpoint's: exit $rc, $(cat "$work/eval_short.err")"
echo "ok: a split without a class is scored with the checkpoint's label numbers; other --labels refused"
# The checkpoint's own labels.txt cut to 2 of the model's 3 classes: refused (eval mapped the folders by it and ran).
mkdir -p "$work/cut_run"
cp "$work/run/checkpoint" "$work/run"/model.ckpt-* "$work/cut_run/"
head -2 "$work/run/labels.txt" >"$work/cut_run/labels.txt"
set +e
"$tower" eval --checkpoint_dir "$work/cut_run" --eval_dir none --data "$work/test" >/dev/null 2>"$work/eval_cut.err"
rc=$?
set -e
[ "$rc" -eq 1 ] && [ "$(cat "$work/eval_cut.err")" = "tower eval: $work/cut_run/labels.txt names 2 classes but the checkpoint's model has 3 outputs: it is not the class list the model was trained with" ] ||
  fail "a checkpoint's labels.txt of 2 classes for 3 outputs: exit $rc, $(cat "$work/eval_cut.err")"
echo "ok: a checkpoint's class list of another count than its model's outputs is refused"

# ---- resume (skip_examples through the folder source) is bitwise a straight run
rs=("${common[@]}" --num_classes 2 --data "$work/test" --seed 5 --save_every 1000) # circle, square
"$tower" train "${rs[@]}" --train_dir "$work/straight" --max_steps 16 >/dev/null
"$tower" train "${rs[@]}" --train_dir "$work/resumed" --max_steps 8 >/dev/null
"$tower" train "${rs[@]}" --train_dir "$work/resumed" --max_steps 16 --resume >"$work/resume.out"
grep -q "resumed from .*model.ckpt-8 at step 8" "$work/resume.out" || fail "did not resume from step 8"
cmp "$work/straight/model.ckpt-16" "$work/resumed/model.ckpt-16" || fail "8 + 8 steps with --resume differ from 16 straight"
"$tower" train "${rs[@]}" --train_dir "$work/other" --max_steps 16 --seed 6 >/dev/null
if cmp -s "$work/straight/model.ckpt-16" "$work/other/model.ckpt-16"; then fail "seeds 5 and 6 gave the same variables"; fi
echo "ok: resume on an image folder is bitwise a straight run"

# ---- a JPEG whose scan data stops at a marker (cut halfway through its scan, then its end marker): kept, as
# TensorFlow and PIL keep it, with one warning naming it over 3 epochs, and counted in the end lines of train and eval
mkdir -p "$work/dmg"
cp -r "$work/test/circle" "$work/test/square" "$work/dmg/"
jpg=$(ls "$work/dmg/circle/"*.jpg | head -1)
size=$(stat -c %s "$jpg")
sos=$(LC_ALL=C grep -obUaP '\xFF\xDA' "$jpg" | head -1 | cut -d: -f1)
[ -n "$sos" ] || fail "no start of scan in $jpg"
{ head -c $(( sos + (size - sos) / 2 )) "$jpg"; printf '\377\331'; } >"$work/dmg/cut.jpg"
mv "$work/dmg/cut.jpg" "$jpg"
n_dmg=$(find "$work/dmg" -type f | wc -l)
"$tower" train "${common[@]}" --num_classes 2 --data "$work/dmg" --train_dir "$work/dmgrun" --max_steps $(( 3 * n_dmg / 8 )) \
  >"$work/dmg.out" 2>"$work/dmg.err"
[ "$(grep -c 'warning: ' "$work/dmg.err")" -eq 1 ] &&
  grep -q "warning: $jpg: damaged JPEG data (libjpeg: Corrupt JPEG data: premature end of data segment); " "$work/dmg.err" ||
  fail "train over 3 epochs: expected one warning naming $jpg: $(cat "$work/dmg.err")"
grep -q "done at step .*; 1 image kept with damaged JPEG data$" "$work/dmg.out" ||
  fail "train's end line does not count the damaged image: $(tail -1 "$work/dmg.out")"
"$tower" eval "${ev[@]}" --num_classes 2 --checkpoint_dir "$work/dmgrun" --data "$work/dmg" >"$work/dmg_eval.out" 2>"$work/dmg_eval.err"
[ "$(grep -c 'warning: .*damaged JPEG data' "$work/dmg_eval.err")" -eq 1 ] &&
  grep -q ": 1 image kept with damaged JPEG data (warned about above)$" "$work/dmg_eval.out" &&
  grep -q " of $n_dmg examples correct" "$work/dmg_eval.out" ||
  fail "eval of the folder with a damaged JPEG: $(cat "$work/dmg_eval.out" "$work/dmg_eval.err")"
echo "ok: a JPEG with damaged scan data is kept, warned about once, counted in train's and eval's end lines"

# ---- a directory of TFRecord files (no class folders) keeps the hint
set +e
"$tower" train "${common[@]}" --data "$work/data" --train_dir "$work/x" --max_steps 1 2>"$work/dir.err"
rc=$?
set -e
[ "$rc" -eq 2 ] && grep -q "is a directory: give its TFRecord files" "$work/dir.err" || fail "a TFRecord directory: exit $rc, $(cat "$work/dir.err")"
echo "ok: a directory of .tfrecord files still gets the hint"

# ---- --labels is for image folders: with TFRecord data it is refused, not ignored
set +e
"$tower" train "${common[@]}" --data "$work/data/train-*.tfrecord" --labels "$work/short.txt" --train_dir "$work/y" \
  --max_steps 1 2>"$work/labels_tfr.err"
rc=$?
set -e
[ "$rc" -eq 1 ] && grep -q "^tower train: --labels applies to an image folder" "$work/labels_tfr.err" ||
  fail "--labels with TFRecord data: exit $rc, $(cat "$work/labels_tfr.err")"
echo "ok: --labels with TFRecord data is refused"

# ---- a model that cannot take the folder's size (mobilenet_v2 needs 32x32; --image_size defaults to 24) says which flag sets it
set +e
"$tower" train --model mobilenet_v2 --num_classes 3 --data "$work/imgs" --train_dir "$work/small" --max_steps 1 \
  2>"$work/small.err"
rc=$?
set -e
[ "$rc" -eq 1 ] && [ "$(wc -l <"$work/small.err")" -eq 1 ] &&
  grep -q "^tower train: --model: model mobilenet_v2 cannot take input 24x24x3 .*resized to --image_size, 24 here" \
    "$work/small.err" || fail "mobilenet_v2 on a folder at 24x24: exit $rc, $(cat "$work/small.err")"
echo "ok: a size the model cannot take names --image_size"

# ---- --resize_mode random_crop: drawn from (seed, epoch, file), so a run repeats and resumes bitwise
rc_=("${common[@]}" --num_classes 2 --data "$work/test" --seed 5 --save_every 1000 --resize_mode random_crop)
"$tower" train "${rc_[@]}" --train_dir "$work/crop_a" --max_steps 16 >/dev/null
"$tower" train "${rc_[@]}" --train_dir "$work/crop_b" --max_steps 16 >/dev/null
cmp "$work/crop_a/model.ckpt-16" "$work/crop_b/model.ckpt-16" || fail "random_crop: the same run twice differs"
"$tower" train "${rc_[@]}" --train_dir "$work/crop_r" --max_steps 8 >/dev/null
"$tower" train "${rc_[@]}" --train_dir "$work/crop_r" --max_steps 16 --resume >/dev/null
cmp "$work/crop_a/model.ckpt-16" "$work/crop_r/model.ckpt-16" || fail "random_crop: 8 + 8 steps with --resume differ"
if cmp -s "$work/crop_a/model.ckpt-16" "$work/straight/model.ckpt-16"; then
  fail "random_crop trained the same variables as resize"
fi
set +e
"$tower" eval "${ev[@]}" --data "$work/test" --resize_mode random_crop >/dev/null 2>"$work/crop_eval.err"
rc=$?
"$tower" train "${common[@]}" --data "$work/data/train-*.tfrecord" --resize_mode center_crop --train_dir "$work/z" \
  --max_steps 1 2>"$work/crop_tfr.err"
rc2=$?
set -e
[ "$rc" -eq 2 ] && grep -q "resize_mode 'random_crop': expected resize or center_crop" "$work/crop_eval.err" ||
  fail "eval --resize_mode random_crop: exit $rc, $(cat "$work/crop_eval.err")"
[ "$rc2" -eq 1 ] && grep -q "^tower train: --resize_mode center_crop applies to an image folder" "$work/crop_tfr.err" ||
  fail "--resize_mode with TFRecord data: exit $rc2, $(cat "$work/crop_tfr.err")"
set +e # eval as train: it was accepted and ignored
"$tower" eval "${ev[@]}" --data "$work/tdata/test-*.tfrecord" --resize_mode center_crop --central_fraction 0.5 \
  >/dev/null 2>"$work/crop_tfr_eval.err"
rc=$?
set -e
[ "$rc" -eq 1 ] && [ "$(cat "$work/crop_tfr_eval.err")" = "tower eval: --resize_mode center_crop applies to an image folder or encoded TFRecord images as --data (raw TFRecord images are used at their stored size)" ] ||
  fail "eval --resize_mode with TFRecord data: exit $rc, $(cat "$work/crop_tfr_eval.err")"
# ... and an image folder refuses the TFRecord flags (they were ignored, exit 0)
for flag in "--compression gzip" "--image_key pixels" "--label_key y"; do
  set +e
  # shellcheck disable=SC2086
  "$tower" train "${common[@]}" --data "$work/imgs" --train_dir "$work/tfr_flag" --max_steps 1 $flag >/dev/null \
    2>"$work/tfr_flag.err"
  rc=$?
  # shellcheck disable=SC2086
  "$tower" eval "${ev[@]}" --data "$work/test" $flag >/dev/null 2>"$work/tfr_flag_eval.err"
  rc2=$?
  set -e
  want="${flag% *} applies to TFRecord data (an image folder's images and labels come from its files and class folders)"
  [ "$rc" -eq 1 ] && [ "$(cat "$work/tfr_flag.err")" = "tower train: $want" ] ||
    fail "train on an image folder with $flag: exit $rc, $(cat "$work/tfr_flag.err")"
  [ "$rc2" -eq 1 ] && [ "$(cat "$work/tfr_flag_eval.err")" = "tower eval: $want" ] ||
    fail "eval of an image folder with $flag: exit $rc2, $(cat "$work/tfr_flag_eval.err")"
done
echo "ok: random_crop repeats and resumes bitwise, differs from resize; eval refuses it; TFRecord data refuses --resize_mode (train and eval), an image folder the TFRecord flags"

# ---- --central_fraction: the center crop from a larger shorter side, the same in the pipeline and in convert
"$tower" convert --from imagefolder "$work/test" --out "$work/cf/test" --image_size 28 --channels 1 \
  --resize_mode center_crop --central_fraction 0.875 --labels "$work/run/labels.txt" >/dev/null 2>&1
"$tower" eval "${ev[@]}" --data "$work/test" --resize_mode center_crop --central_fraction 0.875 >"$work/cf_folder.out" 2>/dev/null
"$tower" eval "${ev[@]}" --data "$work/cf/test-*.tfrecord" >"$work/cf_tfr.out"
"$tower" eval "${ev[@]}" --data "$work/test" --resize_mode center_crop >"$work/cf_whole.out" 2>/dev/null
a=$(grep -o '[0-9]* of [0-9]* examples correct; cross-entropy [0-9.]*' "$work/cf_folder.out")
b=$(grep -o '[0-9]* of [0-9]* examples correct; cross-entropy [0-9.]*' "$work/cf_tfr.out")
c=$(grep -o '[0-9]* of [0-9]* examples correct; cross-entropy [0-9.]*' "$work/cf_whole.out")
[ -n "$a" ] && [ "$a" = "$b" ] || fail "--central_fraction: the folder ($a) and its conversion ($b) differ"
[ "$a" != "$c" ] || fail "--central_fraction 0.875 evaluated the same as without it ($c)"
set +e
"$tower" eval "${ev[@]}" --data "$work/test" --central_fraction 0.875 >/dev/null 2>"$work/cf_refused.err"
rc=$?
set -e
[ "$rc" -eq 2 ] && grep -q "^tower eval: --central_fraction applies to --resize_mode center_crop" "$work/cf_refused.err" ||
  fail "--central_fraction with resize: exit $rc, $(cat "$work/cf_refused.err")"
echo "ok: --central_fraction: folder = conversion ($a), unlike the whole shorter side ($c); refused with resize"

# ---- a symbolic link to a missing file is skipped at the listing with a warning that says so (it said only "No
#      such file or directory", naming the link, which exists)
mkdir -p "$work/dangling"
cp -r "$work/imgs/circle" "$work/imgs/square" "$work/dangling/"
ln -s "$work/gone/x.png" "$work/dangling/circle/link.png"
"$tower" convert --from imagefolder --out "$work/dangling_rec" "$work/dangling" >"$work/dangling.out" 2>"$work/dangling.err" ||
  fail "a dangling link: convert failed: $(cat "$work/dangling.err")"
grep -q "^tower convert: warning: .*/dangling/circle/link.png: a symbolic link to .*/gone/x.png, which does not exist (skipped)$" \
  "$work/dangling.err" || fail "a dangling link: $(cat "$work/dangling.err")"
echo "ok: a dangling link skipped: $(grep -m1 link.png "$work/dangling.err")"
# A FIFO, a link to a device and a subfolder in a class folder: each warning names what it is (each said "not a
# regular file (subfolders are not read)").
mkfifo "$work/dangling/circle/fifo.png"
ln -s /dev/zero "$work/dangling/circle/zero.png"
mkdir "$work/dangling/circle/sub"
"$tower" convert --from imagefolder --out "$work/kinds_rec" "$work/dangling" >"$work/kinds.out" 2>"$work/kinds.err" ||
  fail "a FIFO, a device and a subfolder: convert failed: $(cat "$work/kinds.err")"
for want in "circle/fifo.png: a pipe or FIFO, not a regular file (skipped)" \
            "circle/zero.png: a device, not a regular file (skipped)" \
            "circle/sub: a folder inside a class folder (subfolders are not read) (skipped)"; do
  grep -qF "$want" "$work/kinds.err" || fail "the warning '$want' is missing: $(cat "$work/kinds.err")"
done
echo "ok: a FIFO, a link to a device and a subfolder each named as what they are"

# ---- out of file descriptors (ulimit -n 6) under --skip_corrupt: the machine's fault, not the images': the run
#      stops with one line, not counting good images as corrupt ones and training on what is left (exit 0 before)
if "$tower" --version | grep -q "sanitizer: none"; then
  set +e
  (ulimit -n 6; "$tower" train "${common[@]}" --data "$work/imgs" --train_dir "$work/fd_run" --max_steps 30 --skip_corrupt \
     --max_corrupt_fraction 1 --input_threads 8 >"$work/fd.out" 2>"$work/fd.err")
  rc=$?
  set -e
  [ "$rc" -eq 1 ] && [ "$(wc -l <"$work/fd.err")" -eq 1 ] &&
    grep -Eq "^tower train: .*: cannot open: Too many open files \(a fault of this machine, not of the file: not skipped\)" "$work/fd.err" ||
    fail "out of descriptors under --skip_corrupt: exit $rc, $(cat "$work/fd.err")"
  echo "ok: out of file descriptors: $(cat "$work/fd.err")"
fi

# ---- --max_image_pixels: a 2100 x 2100 PNG is over the pipeline's default 4194304 pixels; the refusal says how
#      to raise the bound, and with it raised train and eval read the image (convert reads it either way)
mkdir -p "$work/big/a" "$work/big/b"
for f in "$work/imgs/circle/"*.png; do [ "$(basename "$f")" = broken.png ] || cp "$f" "$work/big/a/"; done
for f in "$work/imgs/square/"*.png; do cp "$f" "$work/big/b/"; done
"$images" grey "$work/big/a/large.png" 2100 2100
set +e
"$tower" train "${common[@]}" --num_classes 2 --data "$work/big" --train_dir "$work/big_run" --max_steps 2 \
  >"$work/big.out" 2>"$work/big.err"
rc=$?
set -e
[ "$rc" -eq 1 ] && grep -q "big/a/large.png: PNG of 2100 x 2100 pixels (at most 4194304 pixels are read: --max_image_pixels raises it, up to 268435456); no step ran, nothing saved" "$work/big.err" ||
  fail "a 2100 x 2100 PNG: exit $rc, $(cat "$work/big.err")"
"$tower" train "${common[@]}" --num_classes 2 --data "$work/big" --train_dir "$work/big_run" --max_steps 2 \
  --max_image_pixels 5000000 >"$work/big.out" 2>"$work/big.err" || fail "--max_image_pixels 5000000: $(cat "$work/big.err")"
"$tower" eval --data "$work/big" --checkpoint_dir "$work/big_run" --eval_dir none --no_progress \
  --max_image_pixels 5000000 >"$work/big_eval.out" 2>"$work/big.err" || fail "eval --max_image_pixels: $(cat "$work/big.err")"
set +e
"$tower" eval --data "$work/big" --checkpoint_dir "$work/big_run" --eval_dir none --max_image_pixels 1000 \
  >/dev/null 2>"$work/big.err"
rc=$?
set -e
[ "$rc" -eq 1 ] && [ "$(cat "$work/big.err")" = "tower eval: --max_image_pixels 1000 is below twice the 28 x 28 images the model takes (1568)" ] ||
  fail "eval --max_image_pixels 1000: exit $rc, $(cat "$work/big.err")"
set +e
"$tower" train "${common[@]}" --num_classes 2 --data "$work/big" --train_dir "$work/big_floor" --max_steps 1 \
  --max_image_pixels 1000 >/dev/null 2>"$work/big.err"
rc=$?
set -e
grep -qxF "tower train: --max_image_pixels 1000 is below twice the 28 x 28 images the model takes (1568)" "$work/big.err" &&
  [ "$rc" -eq 1 ] && [ ! -e "$work/big_floor" ] || fail "train --max_image_pixels 1000: exit $rc, $(cat "$work/big.err")"
echo "ok: --max_image_pixels: the refusal names it; raised, train and eval read a 2100 x 2100 PNG ($(grep -o '[0-9]* of [0-9]* examples correct' "$work/big_eval.out"))"

# ---- elongated images: a side over 65535 pixels is named as such, in train (which called it a pixel bound of
#      28 x 28) and in convert (which resized it); a centre crop's scaled size is computed without wrapping an int
#      (1 x 40000 at a short side of 63999 wrapped to INT_MIN, said as 63999 x 63999, and in convert a 1 x 530000
#      image at 4096 became a plain resize) and bounded in convert too (a 1 x 5000 image at 1024 asked for 15 GB)
mkdir -p "$work/tall/a" "$work/tall/b" "$work/long/a" "$work/long/b" "$work/five/a" "$work/five/b"
"$images" grey "$work/tall/a/t.png" 70000 1
"$images" grey "$work/long/a/t.png" 40000 1
"$images" grey "$work/five/a/t.png" 5000 1
for d in tall long five; do "$images" grey "$work/$d/b/s.png" 3 3; done
set +e
"$tower" train "${common[@]}" --num_classes 2 --data "$work/tall" --train_dir "$work/tall_run" --max_steps 1 \
  >/dev/null 2>"$work/tall.err"
rc=$?
set -e
[ "$rc" -eq 1 ] && grep -qF "tall/a/t.png: a 1 x 70000 image: a side over 65535 pixels is not resized; no step ran" "$work/tall.err" ||
  fail "train on a 1 x 70000 image: exit $rc, $(cat "$work/tall.err")"
"$tower" convert --from imagefolder --image_size 16 --out "$work/tall_rec/t" "$work/tall" >/dev/null 2>"$work/tall.err" ||
  fail "convert of a folder with a 1 x 70000 image: $(cat "$work/tall.err")"
grep -qF "tall/a/t.png: a 1 x 70000 image: a side over 65535 pixels is not resized (skipped)" "$work/tall.err" ||
  fail "convert did not skip the 1 x 70000 image: $(cat "$work/tall.err")"
set +e
"$tower" train --model resnet20 --num_classes 2 --batch_size 2 --image_size 16 --resize_mode center_crop \
  --central_fraction 0.00025 --data "$work/long" --train_dir "$work/long_run" --max_steps 1 >/dev/null 2>"$work/long.err"
rc=$?
set -e
[ "$rc" -eq 1 ] && grep -qF "long/a/t.png: a 1 x 40000 image does not scale to 63999 x 2147483647 within 4194304 pixels" "$work/long.err" ||
  fail "a centre crop of a 1 x 40000 image at a short side of 63999: exit $rc, $(cat "$work/long.err")"
"$tower" convert --from imagefolder --image_size 1024 --resize_mode center_crop --out "$work/five_rec/t" "$work/five" \
  >/dev/null 2>"$work/five.err" || fail "convert of a folder with a 1 x 5000 image: $(cat "$work/five.err")"
grep -qF "five/a/t.png: a 1 x 5000 image does not scale to 1024 x 5120000 within 268435456 pixels (skipped)" "$work/five.err" ||
  fail "convert did not skip the 1 x 5000 image at a 1024 centre crop: $(cat "$work/five.err")"
echo "ok: elongated images: a side over 65535 named, a centre crop's size not wrapped, convert bounded as train"

# ---- eval of a folder against a checkpoint without labels.txt (a model trained on TFRecords that had none): a
#      folder lacking a class is refused (the folders after it were renumbered: 0 of 268 correct, exit 0), and
#      where the counts agree a note says the classes are the sorted folder names
cp -r "$work/big_run" "$work/nolab_run"
rm -f "$work/nolab_run/labels.txt"
mkdir -p "$work/one_class"
cp -r "$work/big/b" "$work/one_class/"
set +e
"$tower" eval --data "$work/one_class" --checkpoint_dir "$work/nolab_run" --eval_dir none --max_image_pixels 5000000 \
  >/dev/null 2>"$work/nolab.err"
rc=$?
set -e
[ "$rc" -eq 1 ] && grep -qF "one_class holds 1 class folder and the model has 2 outputs, and the checkpoint has no labels.txt to map the folders to its classes by name: give --labels FILE" "$work/nolab.err" ||
  fail "eval of a folder lacking a class, no labels.txt: exit $rc, $(cat "$work/nolab.err")"
"$tower" eval --data "$work/big" --checkpoint_dir "$work/nolab_run" --eval_dir none --no_progress \
  --max_image_pixels 5000000 >"$work/nolab.out" 2>"$work/nolab.err" || fail "eval without labels.txt: $(cat "$work/nolab.err")"
grep -qF "tower eval: note: $work/big's classes are its folder names in sorted order (the checkpoint has no labels.txt)" "$work/nolab.err" ||
  fail "eval without labels.txt: no note that the classes are the sorted folder names: $(cat "$work/nolab.err")"
# Watching: the note once, however many checkpoints are evaluated (the checkpoint rewritten is a new file).
ckpt=$(ls "$work/nolab_run"/model.ckpt-* | head -n 1)
"$tower" eval --data "$work/big" --checkpoint_dir "$work/nolab_run" --eval_dir none --no_progress \
  --max_image_pixels 5000000 --eval_interval_secs 1 >"$work/watch.out" 2>"$work/watch.err" &
watch_pid=$!
evals() { grep -c "precision @ 1 = " "$work/watch.out" 2>/dev/null || true; }
for _ in $(seq 600); do [ "$(evals)" -ge 1 ] && break; sleep 0.1; done
cp "$ckpt" "$ckpt.copy" && mv "$ckpt.copy" "$ckpt"
for _ in $(seq 600); do [ "$(evals)" -ge 2 ] && break; sleep 0.1; done
kill -TERM "$watch_pid"
set +e
wait "$watch_pid"
rc=$?
set -e
[ "$rc" -eq 143 ] && [ "$(evals)" -ge 2 ] ||
  fail "watching without labels.txt: exit $rc, $(evals) evaluations: $(cat "$work/watch.out" "$work/watch.err")"
[ "$(grep -c "sorted order" "$work/watch.err")" -eq 1 ] ||
  fail "watching without labels.txt: the folder-order note is not printed once: $(cat "$work/watch.err")"
printf 'a\nb\n' >"$work/ab.txt"
"$tower" eval --data "$work/one_class" --checkpoint_dir "$work/nolab_run" --eval_dir none --no_progress --labels "$work/ab.txt" \
  --max_image_pixels 5000000 >/dev/null 2>"$work/nolab.err" || fail "eval of one class with --labels: $(cat "$work/nolab.err")"
echo "ok: eval of a folder without the checkpoint's labels.txt: a missing class refused, the folder order noted, --labels maps"

# ---- a path of 900+ bytes: the bad image's message is whole (file, reason), as a refusal and as a warning
long=$work/long
for i in 1 2 3 4 5 6; do long=$long/$(printf 'd%.0s' $(seq 1 150)); done
mkdir -p "$long/a" "$long/b"
cp "$work/imgs/circle/000.png" "$long/a/"
cp "$work/imgs/cross/000.png" "$long/b/"
printf '\377\330\377\340 truncated' >"$long/b/bad.jpg"
set +e
"$tower" train --model mnist --num_classes 2 --image_size 28 --batch_size 2 --data "$long" --max_steps 2 \
  --train_dir "$work/long_run" >/dev/null 2>"$work/long.err"
rc=$?
set -e
[ "$rc" -eq 1 ] && grep -q "/b/bad.jpg: JPEG is truncated (premature end of data; libjpeg: .*); no step ran, nothing saved$" \
  "$work/long.err" || fail "a bad image under a 900-byte path: exit $rc, $(tail -c 300 "$work/long.err")"
"$tower" train --model mnist --num_classes 2 --image_size 28 --batch_size 2 --data "$long" --max_steps 2 --skip_corrupt \
  --max_corrupt_fraction 1 --train_dir "$work/long_run2" >/dev/null 2>"$work/long2.err" ||
  fail "--skip_corrupt under a 900-byte path: $(tail -c 300 "$work/long2.err")"
grep -q "/b/bad.jpg: JPEG is truncated (premature end of data; libjpeg: .*) (skipped)$" "$work/long2.err" ||
  fail "the warning under a 900-byte path: $(tail -c 300 "$work/long2.err")"
echo "ok: a bad image's message under a 900-byte path is whole, refused and warned"
