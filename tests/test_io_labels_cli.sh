#!/usr/bin/env bash
# test_io_labels_cli.sh TOWER TEST_IMAGEFOLDER — the class list (labels.txt)
# through the `tower` binary, on an image folder made here (3 classes):
#   convert: a split whose class list differs from the labels.txt already in
#     its --out directory is refused before any shard is written (the file
#     kept); an identical one, or the split converted with --labels, is fine;
#   train: a labels file (beside the data, or --labels of an image folder)
#     naming another number of classes than --num_classes is refused; an image
#     folder whose classes differ from the train_dir's labels.txt is refused
#     before its pipeline starts, naming the class folders;
#   train and eval: every directory of --data's files that holds a labels.txt
#     must hold the same one, not only the first file's;
#   eval of a folder with a class not in the list names where the list came from
#     (the checkpoint's labels.txt, or --labels); one whose line holds the
#     name with stray bytes (CRLF, a byte-order mark) shows that line escaped;
#   a labels file that is a FIFO (convert --labels, eval and train --labels,
#     labels.txt beside the data) is refused at once as not a regular file,
#     a directory as a directory.
# Each refusal: exit 1 and exactly one line.
set -euo pipefail
tower=$1 images=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

refuse() { # refuse 'EXACT STDERR LINE' ARGS...: exit 1 within 30 s
  local line=$1
  shift
  set +e
  timeout 30 "$tower" "$@" >"$work/out" 2>"$work/err"
  local rc=$?
  set -e
  [ "$rc" -ne 124 ] || fail "tower $*: hung (killed after 30 s)"
  [ "$rc" -eq 1 ] || fail "tower $*: exit $rc, expected 1 ($(cat "$work/err"))"
  [ "$(cat "$work/err")" = "$line" ] || fail "tower $*: stderr
  $(cat "$work/err")
expected exactly
  $line"
}

"$images" make "$work/imgs" 6 # circle, cross, square; 2 bad files (warnings)
cv=(convert --from imagefolder --image_size 28 --channels 1 --no_progress)

# ---- convert: one labels.txt for every split in a directory
"$tower" "${cv[@]}" "$work/imgs" --out "$work/d/train" >/dev/null 2>&1
cp "$work/d/labels.txt" "$work/train_labels.txt"
mkdir -p "$work/test_imgs"
cp -r "$work/imgs/cross" "$work/imgs/square" "$work/test_imgs/"
refuse "tower convert: $work/d/labels.txt already holds another class list, which this conversion would replace: line 1 is 'cross' in the class folders of $work/test_imgs but 'circle' in $work/d/labels.txt; pass --labels $work/d/labels.txt (this split then takes its label numbers) or another --out directory" \
  "${cv[@]}" "$work/test_imgs" --out "$work/d/test"
cmp -s "$work/d/labels.txt" "$work/train_labels.txt" || fail "the refused conversion changed labels.txt"
! ls "$work"/d/test-* >/dev/null 2>&1 || fail "the refused conversion wrote shards"
"$tower" "${cv[@]}" "$work/test_imgs" --out "$work/d/test" --labels "$work/d/labels.txt" >"$work/out" 2>/dev/null ||
  fail "convert with --labels the directory's labels.txt"
grep -q "labels (label: count): 1: 6, 2: 6" "$work/out" || fail "--labels: not the train split's numbers: $(cat "$work/out")"
"$tower" "${cv[@]}" "$work/imgs" --out "$work/d/train" --overwrite >/dev/null 2>&1 || fail "the same class list again"
cmp -s "$work/d/labels.txt" "$work/train_labels.txt" || fail "labels.txt changed"
echo "ok: convert refuses to replace another split's labels.txt; --labels and the same list pass"

# ---- train: a labels file names --num_classes classes
tr=(train --model mnist --batch_size 4 --min_after_dequeue 10 --summary_every 0 --histogram_every 0 --no_progress
    --device cpu --max_steps 1)
refuse "tower train: $work/d/labels.txt names 3 classes but --num_classes is 10: the model's outputs would not be the list's classes" \
  "${tr[@]}" --num_classes 10 --data "$work/d/train-*.tfrecord" --train_dir "$work/r10"
printf 'cross\nsquare\n' >"$work/two.txt"
refuse "tower train: $work/two.txt names 2 classes but --num_classes is 3: the model's outputs would not be the list's classes" \
  "${tr[@]}" --num_classes 3 --data "$work/test_imgs" --labels "$work/two.txt" --image_size 28 --skip_corrupt \
  --train_dir "$work/r2"
printf 'cross\n\nsquare\n' >"$work/gap.txt" # a fault of the labels file is named as --labels', not --data's
refuse "tower train: --labels: $work/gap.txt: line 2 is empty (expected one class name a line)" \
  "${tr[@]}" --num_classes 2 --data "$work/test_imgs" --labels "$work/gap.txt" --image_size 28 --train_dir "$work/rg"
refuse "tower train: $work/test_imgs holds 2 class folders but --num_classes is 3: the model's outputs would not be its classes (pass --num_classes 2)" \
  "${tr[@]}" --num_classes 3 --data "$work/test_imgs" --image_size 28 --skip_corrupt --train_dir "$work/r2f"
! ls "$work"/r2f/ckpt* >/dev/null 2>&1 || fail "the refused run wrote a checkpoint"
"$tower" "${tr[@]}" --num_classes 3 --data "$work/d/train-*.tfrecord" --train_dir "$work/run" >/dev/null ||
  fail "train on 3 classes with --num_classes 3"
echo "ok: train refuses a labels file or class folders of another number of classes than --num_classes"

# ---- train on an image folder whose classes differ from the train_dir's list: one line, naming the folders
# (not a temporary file), before the pipeline's workers start (imgs/circle/broken.png would warn first)
mkdir -p "$work/rl"
cp "$work/run/checkpoint" "$work"/run/model.ckpt-* "$work/rl/" # trained with that list: a checkpoint beside it
printf 'circle\ncross\nstar\n' >"$work/rl/labels.txt"
refuse "tower train: the data's class list differs from the one this train_dir was trained with: line 3 is 'square' in the class folders of $work/imgs but 'star' in $work/rl/labels.txt" \
  "${tr[@]}" --num_classes 3 --data "$work/imgs" --image_size 28 --skip_corrupt --train_dir "$work/rl" --resume
printf 'circle\ncross\nstar\n' | cmp -s - "$work/rl/labels.txt" || fail "the refused run changed the train_dir's labels.txt"
! ls "$work"/rl/*.tmp >/dev/null 2>&1 || fail "the refused run left a temporary file in the train_dir"
# A labels.txt beside no checkpoint (a run stopped in its start-up, or killed before its first save, left it)
# pairs with nothing: replaced, with a note, and the run trains.
mkdir -p "$work/stale"
printf 'circle\ncross\nstar\n' >"$work/stale/labels.txt"
"$tower" "${tr[@]}" --num_classes 3 --data "$work/imgs" --image_size 28 --skip_corrupt --train_dir "$work/stale" \
  >"$work/stale.out" 2>"$work/stale.err" || fail "train beside a stale labels.txt: $(cat "$work/stale.err")"
grep -qF "note: $work/stale/labels.txt paired with no checkpoint (a run stopped before its first save left it): replaced by this run's class list" \
  "$work/stale.err" || fail "no note for the stale labels.txt: $(cat "$work/stale.err")"
printf 'circle\ncross\nsquare\n' | cmp -s - "$work/stale/labels.txt" || fail "the stale labels.txt was not replaced"
echo "ok: train refuses an image folder whose classes differ from the train_dir's list, naming the folders"

# ---- train and eval: the labels.txt of every directory of --data
mkdir -p "$work/A" "$work/B" "$work/C"
cp "$work/d/train-00000-of-00001.tfrecord" "$work/A/x.tfrecord"
cp "$work/d/train-00000-of-00001.tfrecord" "$work/B/x.tfrecord"
cp "$work/d/train-00000-of-00001.tfrecord" "$work/C/x.tfrecord"
cp "$work/d/labels.txt" "$work/A/labels.txt"
printf 'cross\nsquare\nstar\n' >"$work/B/labels.txt" # C has none
refuse "tower train: the class lists beside --data's files differ, so their label numbers name other classes: line 1 is 'cross' in $work/B/labels.txt but 'circle' in $work/A/labels.txt" \
  "${tr[@]}" --num_classes 3 --data "$work/C/*.tfrecord,$work/A/*.tfrecord,$work/B/*.tfrecord" --train_dir "$work/rab"
ev=(eval --checkpoint_dir "$work/run" --num_classes 3 --batch_size 4 --eval_dir none --no_progress)
refuse "tower eval: the class lists beside --data's files differ, so their label numbers name other classes: line 1 is 'cross' in $work/B/labels.txt but 'circle' in $work/A/labels.txt" \
  "${ev[@]}" --data "$work/A/*.tfrecord,$work/B/*.tfrecord"
"$tower" "${ev[@]}" --data "$work/A/*.tfrecord,$work/C/*.tfrecord" >/dev/null || fail "eval on A and C (one list)"
# Names that differ only past their 100th byte: shown far enough to tell apart (both were cut at 100, the same).
c120=$(printf 'c%.0s' $(seq 120))
mkdir -p "$work/LA" "$work/LB"
cp "$work/d/train-00000-of-00001.tfrecord" "$work/LA/x.tfrecord"
cp "$work/d/train-00000-of-00001.tfrecord" "$work/LB/x.tfrecord"
printf '%s1\nb\nc\n' "$c120" >"$work/LA/labels.txt"
printf '%s2\nb\nc\n' "$c120" >"$work/LB/labels.txt"
refuse "tower eval: the class lists beside --data's files differ, so their label numbers name other classes: line 1 is '${c120}2' in $work/LB/labels.txt but '${c120}1' in $work/LA/labels.txt" \
  "${ev[@]}" --data "$work/LA/*.tfrecord,$work/LB/*.tfrecord"
echo "ok: train and eval compare the labels.txt of every directory of --data"

# ---- eval of a folder: a class folder not in the checkpoint's list says where the list came from
mkdir -p "$work/star_imgs"
cp -r "$work/imgs/cross" "$work/star_imgs/"
cp -r "$work/imgs/square" "$work/star_imgs/star"
refuse "tower eval: $work/star_imgs/star: class folder not in the checkpoint's class list $work/run/labels.txt (3 classes): every split must share one class list" \
  "${ev[@]}" --data "$work/star_imgs"
refuse "tower eval: $work/star_imgs/star: class folder not in --labels $work/d/labels.txt (3 classes): every split must share one class list" \
  "${ev[@]}" --data "$work/star_imgs" --labels "$work/d/labels.txt"
# A list that is the checkpoint's with a class more, or one fewer: the extra line is named (the message named
# the last shared line, the same in both files)
printf 'circle\ncross\nsquare\nstar\n' >"$work/four.txt"
refuse "tower eval: --labels differs from the checkpoint's class list, so its label numbers name other classes: line 4 is 'star' in $work/four.txt but $work/run/labels.txt ends after line 3" \
  "${ev[@]}" --data "$work/test_imgs" --labels "$work/four.txt"
printf 'circle\ncross\n' >"$work/first_two.txt"
refuse "tower eval: --labels differs from the checkpoint's class list, so its label numbers name other classes: line 3 is 'square' in $work/run/labels.txt but $work/first_two.txt ends after line 2" \
  "${ev[@]}" --data "$work/test_imgs" --labels "$work/first_two.txt"
echo "ok: eval names the checkpoint's class list or --labels"

# ---- a labels file written with CRLF line ends or a byte-order mark: the line shown, its stray bytes escaped
printf 'circle\r\ncross\r\nsquare\r\n' >"$work/crlf.txt"
refuse "tower convert: $work/test_imgs/cross: class folder not in --labels $work/crlf.txt (3 classes): its line 2 is 'cross\x0d', the name with stray bytes (CRLF line ends, a byte-order mark, spaces)" \
  "${cv[@]}" "$work/test_imgs" --out "$work/crlf/test" --labels "$work/crlf.txt"
printf '\357\273\277cross\nsquare\n' >"$work/bom.txt"
refuse "tower convert: $work/test_imgs/cross: class folder not in --labels $work/bom.txt (2 classes): its line 1 is '\xef\xbb\xbfcross', the name with stray bytes (CRLF line ends, a byte-order mark, spaces)" \
  "${cv[@]}" "$work/test_imgs" --out "$work/crlf/test" --labels "$work/bom.txt"
echo "ok: a CRLF or byte-order-marked labels file: the stray bytes shown"

# ---- a FIFO or a directory where a labels file is read: refused at once
mkfifo "$work/fifo"
refuse "tower convert: $work/fifo: the labels file is not a regular file (a pipe or FIFO)" \
  "${cv[@]}" "$work/test_imgs" --out "$work/f/test" --labels "$work/fifo"
refuse "tower convert: $work: the labels file is a directory, not a regular file" \
  "${cv[@]}" "$work/test_imgs" --out "$work/f/test" --labels "$work"
refuse "tower eval: $work/fifo: the labels file is not a regular file (a pipe or FIFO)" \
  "${ev[@]}" --data "$work/test_imgs" --labels "$work/fifo"
refuse "tower train: --labels: $work/fifo: the labels file is not a regular file (a pipe or FIFO)" \
  "${tr[@]}" --num_classes 3 --data "$work/test_imgs" --labels "$work/fifo" --image_size 28 --train_dir "$work/rf"
mkfifo "$work/C/labels.txt"
refuse "tower train: $work/C/labels.txt: the labels file is not a regular file (a pipe or FIFO)" \
  "${tr[@]}" --num_classes 3 --data "$work/C/*.tfrecord" --train_dir "$work/rc"
refuse "tower eval: $work/C/labels.txt: the labels file is not a regular file (a pipe or FIFO)" \
  "${ev[@]}" --data "$work/C/*.tfrecord"
mkdir -p "$work/g"
mkfifo "$work/g/labels.txt"
refuse "tower convert: $work/g/labels.txt: the labels file is not a regular file (a pipe or FIFO)" \
  "${cv[@]}" "$work/test_imgs" --out "$work/g/test"
echo "ok: a FIFO or a directory as a labels file is refused, without waiting"
