#!/usr/bin/env bash
# test_eco_cli.sh TOWER TEST_IMAGEFOLDER TEST_EVENTS TEST_SAFETENSORS — the
# ecosystem features through the `tower` binary, on a dataset made here:
#   convert --from imagefolder: warnings for the bad files, the count, labels.txt;
#   train (not a terminal): TensorFlow log lines only, and an events file whose
#     tags, steps and values (checked by test_events' own decoder against the
#     checkpoint) are right;
#   eval: "Precision @ 1" in train_dir/eval at the checkpoint's step;
#   export: moving averages and raw variables, checked by test_safetensors'
#     own parser against the checkpoint;
#   train on a terminal (script(1)): one live bar line for the whole run, the
#     epoch in its label, no log lines; a --skip_corrupt warning on its own line;
#     --no_progress on a terminal: log lines, no bar;
#   failures: one line and a non-zero exit.
set -euo pipefail
tower=$1 images=$2 events=$3 safetensors=$4
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# ---- convert an image folder (3 classes x 40 grey 28x28 images, 2 bad files)
"$images" make "$work/imgs" 40
"$tower" convert --from imagefolder "$work/imgs" --out "$work/data/train" --image_size 28 --channels 1 \
  --num_shards 2 >"$work/convert.out" 2>"$work/convert.err"
cat "$work/convert.out" "$work/convert.err"
[ "$(wc -l <"$work/convert.err")" -eq 2 ] || fail "expected 2 warning lines"
grep -q "warning: .*circle/broken.png" "$work/convert.err" || fail "no warning for broken.png"
grep -q "warning: .*square/notes.txt" "$work/convert.err" || fail "no warning for notes.txt"
grep -q "wrote 120 examples (28 x 28 x 1, none) to 2 shards" "$work/convert.out" || fail "not 120 examples"
grep -q "0: 40, 1: 40, 2: 40" "$work/convert.out" || fail "labels not 40 each"
grep -q "2 files skipped" "$work/convert.out" || fail "no count of the skipped files"
[ "$(cat "$work/data/labels.txt")" = "$(printf 'circle\ncross\nsquare')" ] || fail "labels.txt: $(cat "$work/data/labels.txt")"

data="$work/data/train-*.tfrecord"
common=(--model mnist --num_classes 3 --data "$data" --num_towers 2 --batch_size 8 --min_after_dequeue 50
        --learning_rate 0.02)

# ---- train, output not a terminal: the TensorFlow log lines only
"$tower" train "${common[@]}" --train_dir "$work/run" --max_steps 12 --summary_every 5 --histogram_every 10 \
  --log_every 1 >"$work/train.out"
! grep -q $'\r' "$work/train.out" || fail "carriage returns in non-terminal output"
bad=$(grep -Ev '^[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9:.]+: (step [0-9]+, loss = [0-9.]+ \([0-9.]+ examples/sec; [0-9.]+ sec/batch\)|device auto: .*|no GPU driver found: CPU towers.*|done at step 12; .*)$' \
  "$work/train.out" || true)
[ -z "$bad" ] || fail "lines other than log lines: $bad"
[ "$(grep -c ': step ' "$work/train.out")" -eq 12 ] || fail "expected 12 step lines"
"$events" train "$work/run" 5 10 12 2 0.02 16 || fail "events file of tower train"
echo "ok: train wrote $(ls "$work/run" | grep -c tfevents) events file with the expected tags, steps and values"

# ---- eval: a failed evaluation leaves no events file (TensorBoard would list an empty eval run)
if "$tower" eval --checkpoint_dir "$work/run" --data "$work/none-*.tfrecord" --no_progress 2>/dev/null; then
  fail "eval of data that does not exist succeeded"
fi
! ls "$work/run/eval"/events.out.tfevents.* >/dev/null 2>&1 || fail "a failed eval left $(ls "$work/run/eval")"
echo "ok: a failed eval leaves no events file"

# ---- eval: Precision @ 1 beside the run
"$tower" eval --checkpoint_dir "$work/run" --data "$data" --num_classes 3 --batch_size 50 >"$work/eval.out"
precision=$(sed -n 's/.*: precision @ 1 = \([0-9.]*\)$/\1/p' "$work/eval.out")
[ -n "$precision" ] || fail "no precision line: $(cat "$work/eval.out")"
"$events" eval "$work/run/eval" 12 "$precision" || fail "events file of tower eval"
echo "ok: eval wrote Precision @ 1 = $precision at step 12 to $work/run/eval"
# Without --num_classes eval takes the checkpoint's 3 (it refused: "--num_classes 10 but ... 3 classes").
"$tower" eval --checkpoint_dir "$work/run" --data "$data" --batch_size 50 --eval_dir none >"$work/eval3.out" ||
  fail "eval without --num_classes of a 3-class checkpoint"
[ "$(sed -n 's/.*: precision @ 1 = \([0-9.]*\)$/\1/p' "$work/eval3.out")" = "$precision" ] ||
  fail "eval without --num_classes: $(cat "$work/eval3.out")"
echo "ok: eval without --num_classes takes the checkpoint's 3 classes"

# ---- one class list for every split: a test split without "cross" gets a shorter labels.txt, which
# eval refuses (its label 1 would be "square"); converted with --labels it shares the train split's list
cmp -s "$work/data/labels.txt" "$work/run/labels.txt" || fail "train did not record the data's labels.txt in train_dir"
mkdir -p "$work/imgs_test"
cp -r "$work/imgs/circle" "$work/imgs/square" "$work/imgs_test/"
"$tower" convert --from imagefolder "$work/imgs_test" --out "$work/short/test" --image_size 28 --channels 1 >/dev/null 2>&1
set +e
"$tower" eval --checkpoint_dir "$work/run" --data "$work/short/test-*.tfrecord" --num_classes 3 --eval_dir none \
  >/dev/null 2>"$work/short.err"
rc=$?
set -e
[ $rc -eq 1 ] || fail "eval on a split with a shorter class list: exit $rc"
grep -q "class list differs from the checkpoint's.*line 2 is 'square' in .*short/labels.txt but 'cross' in" "$work/short.err" ||
  fail "eval on shifted labels: $(cat "$work/short.err")"
"$tower" convert --from imagefolder "$work/imgs_test" --out "$work/shared/test" --image_size 28 --channels 1 \
  --labels "$work/data/labels.txt" >"$work/shared.out" 2>"$work/shared.err"
grep -q "0: 40, 2: 40" "$work/shared.out" || fail "--labels: square is not label 2: $(cat "$work/shared.out")"
grep -q "class 1 ('cross') of .* has no folder here" "$work/shared.err" || fail "--labels: no note of the missing class"
cmp -s "$work/data/labels.txt" "$work/shared/labels.txt" || fail "--labels: labels.txt is not the given list"
"$tower" eval --checkpoint_dir "$work/run" --data "$work/shared/test-*.tfrecord" --num_classes 3 --eval_dir none \
  >/dev/null || fail "eval on a split converted with --labels"
mkdir -p "$work/imgs_test/star"
cp "$work/imgs/circle/"*.png "$work/imgs_test/star/" 2>/dev/null || true
set +e
"$tower" convert --from imagefolder "$work/imgs_test" --out "$work/star/test" --image_size 28 --channels 1 \
  --labels "$work/data/labels.txt" >/dev/null 2>"$work/star.err"
rc=$?
set -e
[ $rc -eq 1 ] && grep -q "star: class folder not in --labels" "$work/star.err" ||
  fail "a class folder not in --labels: exit $rc: $(cat "$work/star.err")"
set +e
"$tower" train --model mnist --num_classes 3 --data "$work/short/test-*.tfrecord" --train_dir "$work/run" --resume \
  --max_steps 13 --summary_every 0 >/dev/null 2>"$work/resume.err"
rc=$?
set -e
[ $rc -eq 1 ] && grep -q "class list differs from the one this train_dir was trained with" "$work/resume.err" ||
  fail "train --resume on data with another class list: exit $rc: $(cat "$work/resume.err")"
echo "ok: one class list: eval refuses a split with a shorter labels.txt; --labels shares the train split's list"

# ---- bytes from files and names reach the terminal escaped: a checkpoint name from the index file (eval's
# result line), an --out prefix (convert's lines)
esc=$(printf '\033')
mkdir -p "$work/esc"
cp "$work/run/model.ckpt-12" "$work/esc/model.ckpt-12${esc}[2J"
printf 'model_checkpoint_path: "model.ckpt-12%s[2J"\n' "$esc" >"$work/esc/checkpoint"
"$tower" eval --checkpoint_dir "$work/esc" --data "$data" --num_classes 3 --batch_size 50 --eval_dir none \
  >"$work/esc.out" || fail "eval of a checkpoint whose name holds ESC"
grep -q "; checkpoint $work/esc/model.ckpt-12\\\\x1b\[2J (step 12, moving averages)$" "$work/esc.out" ||
  fail "eval: the checkpoint name not escaped: $(cat -v "$work/esc.out")"
"$tower" convert --from imagefolder "$work/imgs" --out "$work/esc/o${esc}[2J/train" --image_size 28 --channels 1 \
  >>"$work/esc.out" 2>/dev/null || fail "convert to an --out holding ESC"
grep -q "shard: $work/esc/o\\\\x1b\[2J/train-00000-of-00001.tfrecord$" "$work/esc.out" ||
  fail "convert: --out not escaped: $(cat -v "$work/esc.out")"
grep -q "class names in label order in $work/esc/o\\\\x1b\[2J/labels.txt; " "$work/esc.out" ||
  fail "convert: labels.txt's path not escaped: $(cat -v "$work/esc.out")"
! grep -q "$esc" "$work/esc.out" || fail "a raw ESC reached stdout: $(cat -v "$work/esc.out")"
echo "ok: eval's checkpoint name and convert's --out are printed escaped"

# ---- export: moving averages by default, raw with --no_moving_average
"$tower" export --checkpoint_dir "$work/run" --out "$work/ema.safetensors" >"$work/export.out"
grep -q "wrote 10 tensors (.* floats, moving averages) of model mnist at step 12" "$work/export.out" ||
  fail "export: $(cat "$work/export.out")"
"$safetensors" check "$work/ema.safetensors" "$work/run" ema || fail "exported moving averages"
"$tower" export --checkpoint_dir "$work/run" --out "$work/raw.safetensors" --no_moving_average >/dev/null
"$safetensors" check "$work/raw.safetensors" "$work/run" raw || fail "exported raw variables"
echo "ok: export of the moving averages and of the raw variables"
# The class names travel in the metadata ("labels": labels.txt beside the checkpoint), UTF-8 only (JSON's).
[ -f "$work/run/labels.txt" ] || fail "the run has no labels.txt"
LC_ALL=C grep -aqF "\"labels\":\"$(awk '{printf "%s\\n", $0}' "$work/run/labels.txt")\"" "$work/ema.safetensors" ||
  fail "the export's metadata lacks the class names of $work/run/labels.txt"
cp -r "$work/run" "$work/run_latin1"
printf 'caf\xe9\nbar\nbaz\n' >"$work/run_latin1/labels.txt"
"$tower" export --checkpoint_dir "$work/run_latin1" --out "$work/latin1.safetensors" >/dev/null 2>"$work/latin1.err" ||
  fail "export with a Latin-1 labels.txt: $(cat "$work/latin1.err")"
grep -q "labels.txt is not UTF-8 text free of NUL bytes, which the file's JSON header holds alone; the export holds no class names" \
  "$work/latin1.err" && ! LC_ALL=C grep -aqF '"labels"' "$work/latin1.safetensors" ||
  fail "a Latin-1 labels.txt: $(cat "$work/latin1.err")"
"$safetensors" check "$work/latin1.safetensors" "$work/run_latin1" ema || fail "the export without class names"
echo "ok: export carries the class names (UTF-8), and says so where it cannot"

# ---- on a terminal: one live line for the run (9 steps of 16 = 3 epochs of 48), the epoch in its label
if command -v script >/dev/null 2>&1; then
  q() { printf '%q ' "$@"; }
  script -q -e -c "$(q "$tower" train "${common[@]}" --train_dir "$work/tty" --max_steps 9 \
    --num_examples_per_epoch 48 --summary_every 0 --histogram_every 0)" /dev/null >"$work/tty.out"
  grep -q $'\r' "$work/tty.out" || fail "terminal: no carriage-return updates"
  ! grep -q "loss = " "$work/tty.out" || fail "terminal: log lines printed"
  # The run ends as one kept line at 100 %: its last redraw, then a newline.
  tr '\r' '\n' <"$work/tty.out" | grep -Eq "^epoch 3/3 100%\|#+\| step 9, loss [0-9.]+, acc [0-9.]+ \[[0-9:]+<[0-9:]+, [0-9.]+ ex/s\]" ||
    fail "terminal: the run does not end at 100 % in epoch 3/3: $(tr '\r' '\n' <"$work/tty.out" | tail -3)"
  [ "$(grep -c 'epoch' "$work/tty.out")" -eq 1 ] || fail "terminal: not one line for the run"
  # --max_steps shorter than an epoch: the bar still ends at 100 % (it followed the epoch: 33 %).
  script -q -e -c "$(q "$tower" train "${common[@]}" --train_dir "$work/tty3" --max_steps 1 \
    --num_examples_per_epoch 48 --summary_every 0 --histogram_every 0)" /dev/null >"$work/tty3.out"
  tr '\r' '\n' <"$work/tty3.out" | grep -Eq "^epoch 1/1 100%\|#+\| step 1, " ||
    fail "terminal: a 1-step run does not end at 100 %: $(tr '\r' '\n' <"$work/tty3.out" | tail -2)"
  ! ls "$work/tty"/events.out.tfevents.* >/dev/null 2>&1 || fail "an events file with --summary_every 0 --histogram_every 0"
  script -q -e -c "$(q "$tower" train "${common[@]}" --train_dir "$work/tty2" --max_steps 3 --log_every 1 --no_progress)" \
    /dev/null >"$work/tty2.out"
  grep -q "step 3, loss = " "$work/tty2.out" || fail "--no_progress: no log lines on a terminal"
  ! grep -q "%|" "$work/tty2.out" || fail "--no_progress: a bar was drawn"
  echo "ok: terminal output: one bar line for the run, ending at 100 %; --no_progress: log lines"
else
  echo "note: script(1) is missing (util-linux): the terminal checks are not run"
fi

# ---- --skip_corrupt: distinct bad records, bytes lost, and a limit
# (python3 flips a byte at OFFSET bytes into record K: 20 is in its data, 9 in its length CRC, which
# loses the rest of the shard; record 0 stays good, the trainer reads its shape)
flip() { python3 -c '
import struct, sys
p, k, o = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
b = bytearray(open(p, "rb").read())
at = 0
for _ in range(k): at += 16 + struct.unpack("<Q", b[at:at + 8])[0]
b[at + o] ^= 0x40
open(p, "wb").write(b)' "$@"; }
mkdir -p "$work/bad1" "$work/bad2"
cp "$work"/data/train-*.tfrecord "$work/bad1/"
cp "$work"/data/train-*.tfrecord "$work/bad2/"
shard0=$(basename "$(ls "$work"/data/train-*.tfrecord | head -1)")
flip "$work/bad1/$shard0" 5 20
flip "$work/bad2/$shard0" 1 9
bad1=(--model mnist --num_classes 3 --data "$work/bad1/train-*.tfrecord" --batch_size 16 --min_after_dequeue 20)
# 24 steps of 16 read the 119 good records 3 times and more: the one bad record is counted once.
"$tower" train "${bad1[@]}" --train_dir "$work/sk1" --max_steps 24 --skip_corrupt --max_corrupt_fraction 0.05 \
  --summary_every 0 >"$work/sk1.out" 2>"$work/sk1.err" || fail "--skip_corrupt with 1 bad record: exit $?"
[ "$(grep -c 'warning: ' "$work/sk1.err")" -eq 1 ] || fail "--skip_corrupt: not one warning: $(cat "$work/sk1.err")"
grep -Eq "; 1 corrupt record \([0-9]+ of [0-9]+ input bytes\) skipped [3-9] times" "$work/sk1.out" ||
  fail "--skip_corrupt: the distinct count: $(tail -1 "$work/sk1.out")"
# The lost framing: half the data unreadable, over the default limit (1 %): exit 1, saying why.
set +e
"$tower" train --model mnist --num_classes 3 --data "$work/bad2/train-*.tfrecord" --batch_size 16 --train_dir "$work/sk2" \
  --max_steps 20 --skip_corrupt --summary_every 0 >"$work/sk2.out" 2>"$work/sk2.err"
rc=$?
set -e
[ $rc -eq 1 ] || fail "--skip_corrupt on a shard with a broken frame: exit $rc: $(cat "$work/sk2.out" "$work/sk2.err")"
grep -q "length CRC mismatch .*input bytes unreadable .*over max_corrupt_fraction 0.01" "$work/sk2.err" ||
  fail "--skip_corrupt limit: $(cat "$work/sk2.err")"
set +e
"$tower" inspect --skip_corrupt "$work/bad2/train-*.tfrecord" >"$work/sk3.out" 2>"$work/sk3.err"
set -e
grep -q "$shard0: 1 records, none, 1 bad record, [0-9]* of [0-9]* bytes unreadable (the rest of the file" "$work/sk3.out" ||
  fail "inspect --skip_corrupt: $(cat "$work/sk3.out")"
echo "ok: --skip_corrupt counts 1 distinct record; a broken frame (half the data) stops train: $(head -c 160 "$work/sk2.err")"

# ---- failures: one line, non-zero exit
expect_error() { # expect_error CODE PATTERN ARGS...
  local code=$1 pattern=$2; shift 2
  set +e; "$tower" "$@" >/dev/null 2>"$work/err"; local rc=$?; set -e
  [ $rc -eq "$code" ] || { cat "$work/err"; fail "tower $*: exit $rc, expected $code"; }
  grep -q -- "$pattern" "$work/err" || { cat "$work/err"; fail "tower $*: no '$pattern' in the message"; }
  [ "$(wc -l <"$work/err")" -eq 1 ] || { cat "$work/err"; fail "tower $*: not one line"; }
  echo "ok: tower $* -> $(cat "$work/err")"
}
mkdir -p "$work/empty"
expect_error 1 "no checkpoint found in $work/empty (no index $work/empty/checkpoint)" export --checkpoint_dir "$work/empty" --out "$work/x.safetensors"
expect_error 1 "^tower export: --checkpoint_dir $work/missing: No such file or directory$" export --checkpoint_dir "$work/missing" --out "$work/x.safetensors"
expect_error 1 "^tower eval: --checkpoint_dir $work/err is not a directory$" eval --checkpoint_dir "$work/err" --data "$data"
expect_error 2 "--out" export --checkpoint_dir "$work/run"
expect_error 1 "cannot read the image folder" convert --from imagefolder "$work/missing" --out "$work/o/x"
expect_error 1 "no class folders" convert --from imagefolder "$work/empty" --out "$work/o/x"
expect_error 2 "exactly one DIR" convert --from imagefolder --out "$work/o/x"
expect_error 2 "resize_mode" convert --from imagefolder "$work/imgs" --out "$work/o/x" --resize_mode zoom
expect_error 1 "eval_dir" eval --checkpoint_dir "$work/run" --data "$data" --num_classes 3 \
  --eval_dir "$work/ema.safetensors/sub"
expect_error 2 "summary_every" train "${common[@]}" --train_dir "$work/neg" --summary_every -1
[ ! -e "$work/x.safetensors" ] || fail "a failed export left a file"
