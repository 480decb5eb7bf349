#!/usr/bin/env bash
# test_train_errors.sh TOWER — failures are one clear line and a non-zero exit:
# divergence, bad flags, no GPU, missing data; SIGTERM checkpoints and exits 143.
source "$(dirname "$0")/train_common.sh"
convert_fashion_mnist
data="$work/train-*.tfrecord"

# Divergence: a huge learning rate; the last good checkpoint stays.
"$tower" train --model mnist --data "$data" --train_dir "$work/nan" --batch_size 16 --max_steps 2 --save_every 1 \
  --learning_rate 0.001 >/dev/null
set +e
"$tower" train --model mnist --data "$data" --train_dir "$work/nan" --batch_size 16 --max_steps 100 --save_every 1 \
  --learning_rate 1e30 --resume >"$work/nan.out" 2>"$work/nan.err"
rc=$?
set -e
cat "$work/nan.err"
[ $rc -ne 0 ] || fail "a diverged run exited 0"
grep -Eq "Model diverged with (loss = (NaN|Inf)|non-finite gradients \(not applied\)|non-finite variables) at step [0-9]+" "$work/nan.err" ||
  fail "no divergence message"
last=$(sed -n 's/^model_checkpoint_path: "\(.*\)"/\1/p' "$work/nan/checkpoint")
"$tower" eval --checkpoint_dir "$work/nan" --data "$work/test-*.tfrecord" --no_moving_average >/dev/null ||
  fail "the last good checkpoint ($last) does not evaluate"

expect_error() { # expect_error PATTERN ARGS... : exit non-zero with PATTERN in a one-line stderr
  local pattern=$1; shift
  set +e; "$tower" "$@" >/dev/null 2>"$work/err"; local rc=$?; set -e
  [ $rc -ne 0 ] || fail "tower $* exited 0"
  grep -q -- "$pattern" "$work/err" || { cat "$work/err"; fail "tower $*: no '$pattern' in the message"; }
  [ "$(wc -l <"$work/err")" -le 2 ] || { cat "$work/err"; fail "tower $*: more than a line or two of error"; }
  echo "ok: tower $* -> $(head -1 "$work/err")"
}
expect_error "unknown flag --no_such_flag" train --no_such_flag 1
expect_error "--batch_size 'abc': expected an integer" train --batch_size abc
expect_error "unknown command" frobnicate
expect_error "--data" train --data "$work/none-*.tfrecord" --train_dir "$work/x"
expect_error "--model" train --model resnet --data "$data" --train_dir "$work/x"
expect_error "--device gpu" train --device gpu --data "$data" --train_dir "$work/x"
expect_error "checkpoint_dir $work/empty: No such file or directory" eval --checkpoint_dir "$work/empty" --data "$work/test-*.tfrecord"
mkdir "$work/empty"
expect_error "no checkpoint found in $work/empty" eval --checkpoint_dir "$work/empty" --data "$work/test-*.tfrecord"
# A stream as data (a FIFO with no writer: opening it would wait forever; a pipe would be read twice): refused
# by its kind before anything opens it.
mkfifo "$work/stream.tfrecord"
expect_error "stream.tfrecord: not a regular file (a pipe or FIFO)" train --data "$work/stream.tfrecord" --train_dir "$work/x"
expect_error "stream.tfrecord: not a regular file (a pipe or FIFO)" eval --checkpoint_dir "$work/nan" --data "$work/stream.tfrecord"
expect_error "/dev/null: not a regular file (a device)" train --data "$work/test-*.tfrecord,/dev/null" --train_dir "$work/x"
# inspect reads each file once and takes a pipe: where it reads the stream to its end, the same report as for the
# file (a stream's size is known at its end, and so is its share of --max_corrupt_fraction): a bad record, a cut
# stream, the fraction exceeded (there the verdict: the bad record's line, the byte counts, the stop, the exit; a
# pipe is read to its end before its share can be weighed, a file stops at the record, so the counts of good
# records differ).  Stopped at the first bad record (no --skip_corrupt), the same bad record's line and exit, and
# the sizes said to be lower bounds ("at least"): nothing reads a stream on to learn its size, since one may not
# end (/dev/zero: refused at once, not read forever).
test_file=$(ls "$work"/test-*.tfrecord | head -1)
cp "$test_file" "$work/bad.tfrecord"
printf '\377' | dd of="$work/bad.tfrecord" bs=1 seek=8340 conv=notrunc 2>/dev/null
head -c 5000 "$test_file" >"$work/cut.tfrecord"
for args in "--skip_corrupt|bad" "--skip_corrupt --max_corrupt_fraction 0.00001|bad" "|bad" "--skip_corrupt|cut"; do
  flags=${args%|*}
  f="$work/${args#*|}.tfrecord"
  for kind in file pipe; do
    set +e
    # shellcheck disable=SC2086
    if [ $kind = file ]; then "$tower" inspect $flags "$f" >"$work/insp.$kind" 2>&1
    else "$tower" inspect $flags <(cat "$f") >"$work/insp.$kind" 2>&1; fi
    echo "exit $?" >>"$work/insp.$kind"
    set -e
    sed -i -e "s|$f|INPUT|g" -e 's|/dev/fd/[0-9]*|INPUT|g' "$work/insp.$kind"
    case $flags in *fraction*) grep -E "at offset|^bad records|^exit|stopped" "$work/insp.$kind" >"$work/verdict.$kind"
                              mv "$work/verdict.$kind" "$work/insp.$kind" ;;
                   "") if [ $kind = pipe ]; then
                         grep -q "1 bad (at least 891 of at least" "$work/insp.pipe" ||
                           fail "inspect of a pipe stopped at its first bad record: the sizes not said to be lower bounds"
                       fi
                       grep -E "at offset|^exit" "$work/insp.$kind" >"$work/verdict.$kind"
                       mv "$work/verdict.$kind" "$work/insp.$kind" ;; esac
  done
  diff "$work/insp.file" "$work/insp.pipe" >/dev/null || { diff "$work/insp.file" "$work/insp.pipe"; fail "inspect $args: a pipe's report differs from the file's"; }
  grep -q "at offset" "$work/insp.file" || fail "inspect $args: no bad record reported"
  echo "ok: inspect $args: a pipe's report is the file's ($(grep -c . "$work/insp.file") lines, $(tail -1 "$work/insp.file"))"
done
# A loss of exactly the fraction is not over it: 891 of 8,910,000 bytes is 0.0001 (float32's 0.0001 was under it,
# and the run stopped "over --max_corrupt_fraction 0.0001").
set +e
"$tower" inspect --skip_corrupt --max_corrupt_fraction 0.0001 "$work/bad.tfrecord" >"$work/exact.out" 2>&1
set -e
grep -q "891 of 8910000 bytes unreadable" "$work/exact.out" && ! grep -q "stopped" "$work/exact.out" ||
  fail "a loss of exactly --max_corrupt_fraction: $(cat "$work/exact.out")"
echo "ok: a loss of exactly --max_corrupt_fraction 0.0001 goes on"
set +e
timeout 60 "$tower" inspect /dev/zero >"$work/zero.out" 2>"$work/zero.err"
rc=$?
set -e
[ $rc = 1 ] || fail "inspect /dev/zero: exit $rc, want 1 (124: it read the endless stream)"
grep -q "its size is unknown" "$work/zero.err" || fail "inspect /dev/zero: $(cat "$work/zero.err")"
echo "ok: inspect /dev/zero: $(head -1 "$work/zero.err")"

# A bad first record under a long path (4 directories of 200 bytes): train's and eval's line is whole, the file,
# the record and the reason (train's was cut at 511 bytes, eval's at 880, inside the path).
a200=$(printf 'a%.0s' $(seq 200))
long="$work/$a200/$a200/$a200/$a200"
mkdir -p "$long"
cp "$test_file" "$long/bad0.tfrecord"
printf '\377' | dd of="$long/bad0.tfrecord" bs=1 seek=20 conv=notrunc 2>/dev/null
expect_error "$long/bad0.tfrecord: record 0 at offset 0: data CRC mismatch (stored 0x" train --data "$long/bad0.tfrecord" \
  --train_dir "$work/x"
expect_error "$long/bad0.tfrecord: record 0 at offset 0: data CRC mismatch (stored 0x" eval --checkpoint_dir "$work/nan" \
  --data "$long/bad0.tfrecord"
# Shards of one prefix from two conversions (an interrupted convert --overwrite, two at once): train, eval and
# inspect's verdict refuse to read them as one data set; so with a conversion's .tmp beside them.
mkdir -p "$work/mix"
cp "$test_file" "$work/mix/t-00000-of-00002.tfrecord"
cp "$test_file" "$work/mix/t-00001-of-00003.tfrecord"
mixed="$work/mix/t-00000-of-00002.tfrecord and $work/mix/t-00001-of-00003.tfrecord: shards of one prefix from two conversions (of 2 and of 3 shards)"
expect_error "$mixed" train --data "$work/mix/t-*" --train_dir "$work/x"
expect_error "$mixed" eval --checkpoint_dir "$work/nan" --data "$work/mix/t-*"
set +e; "$tower" inspect "$work/mix/t-*" >/dev/null 2>"$work/err"; rc=$?; set -e
[ $rc -eq 3 ] && grep -qF "would refuse these files: $mixed" "$work/err" || fail "inspect of two sets: exit $rc, $(cat "$work/err")"
rm "$work/mix/t-00000-of-00002.tfrecord"
touch "$work/mix/t-00000-of-00003.tfrecord.tmp"
expect_error "$work/mix/t-00001-of-00003.tfrecord: a conversion to its prefix is under way, or was killed while it put its shards in place ($work/mix/t-00000-of-00003.tfrecord.tmp is there)" \
  train --data "$work/mix/t-*.tfrecord" --train_dir "$work/x"
# A --train_dir holding control bytes, said escaped where --resume finds no checkpoint in it.
esc_dir="$work/r$(printf '\033')[2Jx"
"$tower" train --model mnist --data "$data" --train_dir "$esc_dir" --batch_size 16 --max_steps 1 --resume \
  >"$work/esc.out" 2>"$work/esc.err" || fail "train in $esc_dir: $(cat "$work/esc.err")"
grep -qF -- "--resume: no checkpoint in $work/r\x1b[2Jx: starting from step 0" "$work/esc.out" &&
  ! grep -q "$(printf '\033')" "$work/esc.out" "$work/esc.err" || fail "train_dir with ESC: $(cat -v "$work/esc.out")"
echo "ok: a train_dir with ESC said escaped"

# SIGTERM: finish the step, write a checkpoint, exit 128 + 15.
"$tower" train --model mnist --data "$data" --train_dir "$work/sig" --batch_size 16 --max_steps 100000 \
  --save_every 100000 --log_every 1 >"$work/sig.log" 2>&1 &
pid=$!
for _ in $(seq 1 200); do grep -q "step 3," "$work/sig.log" 2>/dev/null && break; sleep 0.1; done
kill -TERM $pid
set +e; wait $pid; rc=$?; set -e
[ $rc -eq 143 ] || fail "SIGTERM: exit status $rc, expected 143"
grep -q "stop requested" "$work/sig.log" || fail "SIGTERM: no stop message"
ls "$work/sig"/model.ckpt-* >/dev/null 2>&1 || fail "SIGTERM: no checkpoint written"
echo "ok: SIGTERM wrote $(sed -n 's/^model_checkpoint_path: //p' "$work/sig/checkpoint") and exited 143"
