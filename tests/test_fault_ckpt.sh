#!/usr/bin/env bash
# test_fault_ckpt.sh TOWER HELPER — checkpoints that must be refused, through
# the three commands that read one: `tower eval`, `tower export` and
# `tower train --resume`.  Each refusal is exit 1 and EXACTLY one line on
# stderr, compared in full: which file, and what is wrong with it.  A refused
# --resume leaves the train dir as it was (the bad file is not replaced and
# no checkpoint is added).  The files: a flipped byte, cut short (in the
# payload and in the header), empty, a directory, a FIFO (whose open would
# wait for a writer: refused, not a hang), not a checkpoint at all,
# bytes appended, a newer format version, a run state with a negative
# count (a correct CRC), valid files of another variable
# table (renamed, missing, extra, reshaped variable; forged by HELPER with a
# correct CRC), no momentum slots, another optimizer's slots (adam vs
# momentum, both ways; momentum vs centered rmsprop); a checkpoint of another model (mnist vs
# cifar10), of another input shape (cifar10 24 vs 28) and another class
# count; a broken `checkpoint` index (garbage, a directory, a FIFO, a name
# that is not there).
set -euo pipefail
tower=$1
helper=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
re() { printf '%s' "$1" | sed 's/[].[*^$()+?{}|\\]/\\&/g'; } # a literal as an extended regex

"$helper" idx "$work/img" "$work/lab" 1000
"$tower" convert --from idx --images "$work/img" --labels "$work/lab" --out "$work/mnist" >/dev/null
"$helper" cifar "$work/cifar.bin" 300
"$tower" convert --from cifar10 --out "$work/cifar" "$work/cifar.bin" >/dev/null
mnist_data="$work/mnist-*.tfrecord"
cifar_data="$work/cifar-*.tfrecord"
small=(--device cpu --num_towers 2 --batch_size 4 --min_after_dequeue 50 --no_progress --save_every 1)
"$tower" train --model mnist --data "$mnist_data" --train_dir "$work/m" --max_steps 2 "${small[@]}" >/dev/null
"$tower" train --model cifar10 --image_size 24 --data "$cifar_data" --train_dir "$work/c24" --max_steps 1 "${small[@]}" >/dev/null
good=$work/m/model.ckpt-2
cgood=$work/c24/model.ckpt-1
n_checked=0

# expect WHAT REGEX ARGS...: tower ARGS exits 1 with exactly one stderr line matching REGEX in full.
expect() {
  local what=$1 regex=$2
  shift 2
  local rc=0
  "$tower" "$@" >/dev/null 2>"$work/err" || rc=$?
  [ $rc -eq 1 ] || { cat "$work/err"; fail "$what: tower $1 exited $rc, expected 1"; }
  [ "$(wc -l <"$work/err")" -eq 1 ] || { cat "$work/err"; fail "$what: tower $1: not exactly one line on stderr"; }
  grep -Eqx -- "$regex" "$work/err" || { cat "$work/err"; fail "$what: tower $1: the line is not /$regex/"; }
  echo "ok: $what: $(cat "$work/err")"
  n_checked=$((n_checked + 1))
}

# refused FILE WHAT REGEX: eval, export and train --resume all refuse FILE with "FILE: REGEX".
refused() {
  local file=$1 what=$2 why=$3
  expect "$what (eval)" "tower eval: $(re "$file"): $why" eval --checkpoint "$file" --data "$mnist_data" --eval_dir none
  expect "$what (export)" "tower export: $(re "$file"): $why" export --checkpoint "$file" --out "$work/x.safetensors"
  [ ! -e "$work/x.safetensors" ] || fail "$what: export wrote a file"
  resume_refused "$file" "$what" "$why" --model mnist --data "$mnist_data"
}

# resume_refused FILE WHAT REGEX TRAIN_ARGS...: FILE as the latest checkpoint of a train dir; --resume refuses it
# and leaves the dir as it was.
resume_refused() {
  local file=$1 what=$2 why=$3
  shift 3
  local dir=$work/resume
  rm -rf "$dir"
  mkdir -p "$dir"
  cp -r "$file" "$dir/model.ckpt-2"
  printf 'model_checkpoint_path: "model.ckpt-2"\nall_model_checkpoint_paths: "model.ckpt-2"\n' >"$dir/checkpoint"
  local before
  before=$(cd "$dir" && find . -type f -exec md5sum {} + | sort)
  expect "$what (train --resume)" "tower train: --resume: $(re "$dir/model.ckpt-2"): $why" \
    train "$@" --train_dir "$dir" --resume --max_steps 5 "${small[@]}" --summary_every 0
  [ "$(cd "$dir" && find . -type f -exec md5sum {} + | sort)" = "$before" ] || { ls -la "$dir"; fail "$what: --resume changed the train dir"; }
}

size=$(stat -c %s "$good")
payload=$((size - 24))
cp "$good" "$work/flipped"
printf '\x5a' | dd of="$work/flipped" bs=1 seek=$((24 + payload / 2)) conv=notrunc 2>/dev/null
cmp -s "$good" "$work/flipped" && fail "the byte flip changed nothing"
refused "$work/flipped" "a flipped byte" \
  "checksum mismatch: file is corrupted \(crc32 stored 0x[0-9a-f]{8}, computed 0x[0-9a-f]{8}\)"
head -c $((size / 2)) "$good" >"$work/truncated"
refused "$work/truncated" "cut short" \
  "truncated: the header says $payload payload bytes at offset 24, the file has $((size / 2 - 24))"
head -c 10 "$good" >"$work/short_header"
refused "$work/short_header" "cut inside the header" "truncated: 10 bytes, the header alone needs 24"
: >"$work/empty"
refused "$work/empty" "an empty file" "empty file \(0 bytes\), not a checkpoint"
mkdir "$work/a_directory"
refused "$work/a_directory" "a directory" "not a regular file"
mkfifo "$work/a_fifo" # opening a FIFO to read waits for a writer: refused without the wait, not a hang
refused "$work/a_fifo" "a FIFO" "not a regular file"
cp "$work/mnist-00000-of-00001.tfrecord" "$work/a_tfrecord"
refused "$work/a_tfrecord" "a TFRecord file" "not a checkpoint \(bad magic\)"
# The index, a manifest or a shard named in the checkpoint's place: which name to give (the manifest was "bad
# magic", a shard "variable ... missing").
mkdir -p "$work/named"
printf 'model_checkpoint_path: "model.ckpt-7"\n' >"$work/named/checkpoint"
cp "$good" "$work/named/model.ckpt-7.shard-00001-of-00002"
printf 'not read\n' >"$work/named/model.ckpt-7.shards"
expect "the index as --checkpoint" "tower eval: $(re "$work/named/checkpoint"): the index of a train_dir's checkpoints, not a checkpoint: name the directory \(--checkpoint_dir\) or one of its model\.ckpt-N" \
  eval --checkpoint "$work/named/checkpoint" --data "$mnist_data" --eval_dir none
expect "a manifest as --checkpoint" "tower export: $(re "$work/named/model.ckpt-7.shards"): the manifest of a sharded checkpoint, not a checkpoint: name the checkpoint, $(re "$work/named/model.ckpt-7")" \
  export --checkpoint "$work/named/model.ckpt-7.shards" --out "$work/x.safetensors"
expect "a shard as --checkpoint" "tower export: $(re "$work/named/model.ckpt-7.shard-00001-of-00002"): a shard of a sharded checkpoint, not a checkpoint: name the checkpoint, $(re "$work/named/model.ckpt-7")" \
  export --checkpoint "$work/named/model.ckpt-7.shard-00001-of-00002" --out "$work/x.safetensors"
{ cat "$good"; printf 'junk'; } >"$work/appended"
refused "$work/appended" "bytes appended" "4 unexpected bytes after the payload \(the header says $payload payload bytes\)"
"$helper" forge "$good" "$work/version" version
refused "$work/version" "a newer format" "unsupported checkpoint format version 99 \(this build reads version 1\)"
"$helper" forge "$good" "$work/negative" negative_examples
refused "$work/negative" "a negative example count" \
  "the run state's examples_consumed is -5: out of range \(not a file Tower wrote\)"
"$helper" forge "$good" "$work/renamed" rename_var
refused "$work/renamed" "a renamed variable" "variables: unexpected variable 'forged/weights' \(not in model 'mnist'\)"
"$helper" forge "$good" "$work/dropped" drop_var
refused "$work/dropped" "a missing variable" "variables: variable '[^']+' missing"
"$helper" forge "$good" "$work/extra" extra_var
refused "$work/extra" "an extra variable" "variables: unexpected variable 'forged/biases' \(not in model 'mnist'\)"
"$helper" forge "$good" "$work/reshaped" reshape_var
refused "$work/reshaped" "a reshaped variable" \
  "variables: variable '[^']+' has shape \([0-9, ]+\), expected \([0-9, ]+\)"

# No momentum slots (an sgd run's): eval and export read it; resuming momentum does not.
"$helper" forge "$good" "$work/sgd" no_momentum
"$tower" eval --checkpoint "$work/sgd" --data "$mnist_data" --eval_dir none >/dev/null || fail "eval of a checkpoint without momentum slots"
resume_refused "$work/sgd" "no momentum slots" "no momentum accumulators \(saved with sgd\): cannot resume with nesterov" \
  --model mnist --data "$mnist_data"

# Another optimizer's slots: an adam checkpoint evaluates and resumes adam, but
# not momentum (and a momentum checkpoint not adam or centered rmsprop).
"$tower" train --model mnist --data "$mnist_data" --train_dir "$work/adam" --optimizer adam --max_steps 2 "${small[@]}" >/dev/null
"$tower" eval --checkpoint "$work/adam/model.ckpt-2" --data "$mnist_data" --eval_dir none >/dev/null || fail "eval of an adam checkpoint"
"$tower" train --model mnist --data "$mnist_data" --train_dir "$work/adam" --optimizer adam --resume --max_steps 3 "${small[@]}" \
  --summary_every 0 >/dev/null || fail "adam --resume of an adam checkpoint"
[ -f "$work/adam/model.ckpt-3" ] || fail "adam --resume wrote no model.ckpt-3"
resume_refused "$work/adam/model.ckpt-2" "an adam checkpoint for momentum" \
  "no momentum accumulators \(saved with adam\): cannot resume with nesterov" --model mnist --data "$mnist_data"
resume_refused "$good" "a momentum checkpoint for adam" \
  "no first moments \(Adam\) \(saved with nesterov\): cannot resume with adam" --model mnist --data "$mnist_data" --optimizer adam
resume_refused "$good" "a momentum checkpoint for centered rmsprop" \
  "no mean squares \(RMSProp\) \(saved with nesterov\): cannot resume with rmsprop_centered" --model mnist --data "$mnist_data" \
  --optimizer rmsprop --rmsprop_centered

# Another model, another input shape, another class count.
resume_refused "$good" "an mnist checkpoint for cifar10" \
  "the checkpoint is for model 'mnist' on 28x28x1 inputs with 10 classes, expected 'cifar10' on 24x24x3 inputs with 10 classes" \
  --model cifar10 --data "$cifar_data"
resume_refused "$cgood" "a cifar10 checkpoint for mnist" \
  "the checkpoint is for model 'cifar10' on 24x24x3 inputs with 10 classes, expected 'mnist' on 28x28x1 inputs with 10 classes" \
  --model mnist --data "$mnist_data"
resume_refused "$cgood" "cifar10 at 24 resumed at 28" \
  "the checkpoint is for model 'cifar10' on 24x24x3 inputs with 10 classes, expected 'cifar10' on 28x28x3 inputs with 10 classes" \
  --model cifar10 --image_size 28 --data "$cifar_data"
resume_refused "$good" "10 classes resumed with 5" \
  "the checkpoint is for model 'mnist' on 28x28x1 inputs with 10 classes, expected 'mnist' on 28x28x1 inputs with 5 classes" \
  --model mnist --num_classes 5 --data "$mnist_data"
expect "an mnist checkpoint on cifar10 data (eval)" \
  "tower eval: $(re "$work")/cifar-00000-of-00001\.tfrecord holds 32x32x3 images; the checkpoint's model takes 28x28x1" \
  eval --checkpoint "$good" --data "$cifar_data" --eval_dir none
expect "cifar10 at 24 evaluated at 28 (eval)" "tower eval: --image_size 28 but $(re "$cgood") was trained on 24x24 inputs" \
  eval --checkpoint "$cgood" --image_size 28 --data "$cifar_data" --eval_dir none
expect "10 classes evaluated with 5 (eval)" "tower eval: --num_classes 5 but $(re "$good") was trained for 10 classes" \
  eval --checkpoint "$good" --num_classes 5 --data "$mnist_data" --eval_dir none
"$tower" eval --checkpoint "$cgood" --image_size 24 --data "$cifar_data" --eval_dir none >/dev/null ||
  fail "eval at the checkpoint's own --image_size 24"

# A broken index: garbage, a directory, a name that is not there.
idx=$work/idx
for kind in garbage directory fifo missing; do
  rm -rf "$idx"
  mkdir -p "$idx"
  cp "$good" "$idx/model.ckpt-2"
  case $kind in
    garbage)
      printf 'model_checkpoint_path: "model.ckpt-2"\nthis is not an index line\n' >"$idx/checkpoint"
      why="$(re "$idx/checkpoint"): line 2 of the checkpoint index is not model_checkpoint_path: \"NAME\" or all_model_checkpoint_paths: \"NAME\"" ;;
    directory)
      mkdir "$idx/checkpoint"
      why="$(re "$idx/checkpoint"): the checkpoint index is not a regular file" ;;
    fifo)
      mkfifo "$idx/checkpoint"
      why="$(re "$idx/checkpoint"): the checkpoint index is not a regular file" ;;
    missing)
      printf 'model_checkpoint_path: "model.ckpt-7"\n' >"$idx/checkpoint"
      why="$(re "$idx/model.ckpt-7"): cannot open: No such file or directory" ;;
  esac
  expect "index: $kind (eval)" "tower eval: $why" eval --checkpoint_dir "$idx" --data "$mnist_data" --eval_dir none
  expect "index: $kind (export)" "tower export: $why" export --checkpoint_dir "$idx" --out "$work/x.safetensors"
  expect "index: $kind (train --resume)" "tower train: --resume: $why" \
    train --model mnist --data "$mnist_data" --train_dir "$idx" --resume --max_steps 5 "${small[@]}" --summary_every 0
done

# export never writes its .safetensors over a file of the checkpoints: the one it reads, another checkpoint, the
# index (each left as it was).
rm -rf "$idx"
mkdir -p "$idx"
cp "$good" "$idx/model.ckpt-2"
cp "$good" "$idx/model.ckpt-1"
printf 'model_checkpoint_path: "model.ckpt-2"\n' >"$idx/checkpoint"
before=$(cd "$idx" && md5sum checkpoint model.ckpt-*)
for out in "$idx/model.ckpt-2" "$idx/model.ckpt-1" "$idx/checkpoint" "$idx/model.ckpt-999"; do # 999: to come
  expect "export --out $(basename "$out")" \
    "tower export: --out $(re "$out") is a file of a train_dir's checkpoints, or named as one \(a training run would replace or remove it; export writes a \.safetensors file\): give another --out" \
    export --checkpoint_dir "$idx" --out "$out"
done
cp "$good" "$work/renamed_ckpt"
expect "export --out a checkpoint under another name" \
  "tower export: --out $(re "$work/renamed_ckpt") is a file of a train_dir's checkpoints, or named as one \(a training run would replace or remove it; export writes a \.safetensors file\): give another --out" \
  export --checkpoint "$good" --out "$work/renamed_ckpt"
[ "$(cd "$idx" && md5sum checkpoint model.ckpt-*)" = "$before" ] || fail "export --out into the checkpoints changed them"
[ ! -e "$idx/model.ckpt-999" ] || fail "export wrote model.ckpt-999, which the next --resume would remove"
# Nor over any other file that is not a .safetensors export: the train_dir's class list, its events file (they
# were replaced, and eval and --resume on an image folder refused the 7 MB labels.txt); an export is replaced.
printf 'circle\ncross\n' >"$idx/labels.txt"
printf 'not an export' >"$idx/events.out.tfevents.1.host"
before_other=$(cd "$idx" && md5sum labels.txt events.out.tfevents.1.host)
for out in "$idx/labels.txt" "$idx/events.out.tfevents.1.host"; do
  expect "export --out $(basename "$out")" \
    "tower export: --out $(re "$out") exists and is not a \.safetensors file \(export would replace it\): give another --out" \
    export --checkpoint_dir "$idx" --out "$out"
done
[ "$(cd "$idx" && md5sum labels.txt events.out.tfevents.1.host)" = "$before_other" ] || fail "export replaced a class list"
# Nor over a .safetensors file Tower did not write (anyone's PyTorch weights were replaced): its metadata lacks
# "source": "tower".  A --out under a file is refused for what it is (it was "exists and is not a .safetensors file").
json='{"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}'
printf "$(printf '\\x%02x' $((${#json} & 255)))"'\x00\x00\x00\x00\x00\x00\x00%s\x00\x00\x80\x3f' "$json" >"$work/theirs.safetensors"
before_theirs=$(md5sum <"$work/theirs.safetensors")
expect "export --out a .safetensors file of another tool" \
  "tower export: --out $(re "$work/theirs.safetensors") is a \.safetensors file Tower did not write \(its metadata has no \"source\": \"tower\"; export would replace it\): give another --out, or remove it first" \
  export --checkpoint_dir "$idx" --out "$work/theirs.safetensors"
[ "$(md5sum <"$work/theirs.safetensors")" = "$before_theirs" ] || fail "export replaced another tool's .safetensors file"
expect "export --out under a regular file" \
  "tower export: --out $(re "$work/theirs.safetensors/x.safetensors"): Not a directory" \
  export --checkpoint_dir "$idx" --out "$work/theirs.safetensors/x.safetensors"
"$tower" export --checkpoint_dir "$idx" --out "$work/again.safetensors" >/dev/null &&
  "$tower" export --checkpoint_dir "$idx" --out "$work/again.safetensors" >/dev/null || fail "an export over an export"
rm -f "$idx/labels.txt" "$idx/events.out.tfevents.1.host"
# A checkpoint name from the index reaches the terminal escaped (an ESC sequence in it would clear the screen).
esc=$(printf 'model.ckpt-2\033[2J')
cp "$good" "$idx/$esc"
printf 'model_checkpoint_path: "%s"\n' "$esc" >"$idx/checkpoint"
"$tower" export --checkpoint_dir "$idx" --out "$work/x.safetensors" >"$work/esc.out" || fail "export of an ESC-named checkpoint"
grep -qF 'model.ckpt-2\x1b[2J to' "$work/esc.out" && ! grep -q "$(printf '\033')" "$work/esc.out" ||
  { cat -v "$work/esc.out"; fail "export printed a checkpoint name unescaped"; }
echo "ok: export escapes the checkpoint's name: $(cat "$work/esc.out")"

# The good ones still load (the refusals above can fail for the right reason only).
"$tower" eval --checkpoint "$good" --data "$mnist_data" --eval_dir none >/dev/null || fail "eval of the good checkpoint"
"$tower" export --checkpoint "$good" --out "$work/x.safetensors" >/dev/null || fail "export of the good checkpoint"
# Logits that tie (every variable 0): in_top_k counts each example correct, and the confusion matrix puts it on
# the diagonal too (it took the first largest logit: column 0, against "N of N correct").
"$helper" forge "$good" "$work/zero.ckpt" zero_vars
"$tower" eval --checkpoint "$work/zero.ckpt" --data "$mnist_data" --eval_dir none --no_progress --confusion_matrix \
  >"$work/tie.out" || fail "eval of the all-zero checkpoint"
correct=$(sed -n 's/.* \([0-9]*\) of \([0-9]*\) examples correct.*/\1 \2/p' "$work/tie.out")
diagonal=$(awk '/^confusion matrix/ { on = 1; next } on == 1 { on = 2; next } on && $1 ~ /^[0-9]+$/ { d += $($1 + 2) } END { print d + 0 }' \
  "$work/tie.out")
[ -n "$correct" ] && [ "${correct% *}" = "${correct#* }" ] && [ "$diagonal" = "${correct% *}" ] ||
  { cat "$work/tie.out"; fail "ties: correct '$correct', confusion diagonal $diagonal"; }
echo "ok: ties: $correct correct, the confusion matrix's diagonal $diagonal"
# Logits that overflow (every variable 1e30, finite): counted wrong as in_top_k counts them, left out of the
# confusion matrix, and said in one warning line; the cross-entropy prints "nan" (it printed -nan, silently, and the
# matrix put every such example in column 0).
"$helper" forge "$good" "$work/huge.ckpt" huge_vars
"$tower" eval --checkpoint "$work/huge.ckpt" --data "$mnist_data" --eval_dir none --no_progress --confusion_matrix \
  >"$work/huge.out" 2>"$work/huge.err" || fail "eval of the overflowing checkpoint: exit $?"
n_ex=$(sed -n 's/.* \([0-9]*\) of \([0-9]*\) examples correct.*/\2/p' "$work/huge.out")
grep -q "examples correct; cross-entropy nan;" "$work/huge.out" &&
  grep -q "examples of non-finite logits left out)" "$work/huge.out" &&
  [ "$(wc -l <"$work/huge.err")" -eq 1 ] &&
  grep -q "^tower eval: warning: $n_ex of $n_ex examples have non-finite logits (the model overflows on them): counted wrong" "$work/huge.err" ||
  { cat "$work/huge.out" "$work/huge.err"; fail "non-finite logits"; }
echo "ok: non-finite logits: $(cat "$work/huge.err")"
echo "ok: $n_checked refusals, each one line naming the file and what is wrong"
