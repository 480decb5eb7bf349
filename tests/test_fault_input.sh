#!/usr/bin/env bash
# test_fault_input.sh TOWER HELPER — TFRecord files that change under a
# running input pipeline.  Every command runs under `timeout`: a hang fails
# the test, and so does a crash (any exit but the expected one).
#   truncated while read: the file the pipeline has open (found in
#     /proc/PID/fd, its read position in /proc/PID/fdinfo) is cut in the middle
#     of a record ahead of the reader: `tower train` and `tower eval` stop with
#     exit 1 and one line naming the file, the record and its offset.
#   deleted, not yet opened: the pipeline reaches it (train: in this epoch or
#     the next; eval: later in its single pass) and stops with one line
#     "FILE: cannot open: No such file or directory".
#   deleted while open: the open descriptor still reads it to the end (POSIX
#     unlink), so `tower eval` counts every example and succeeds; `tower
#     train` stops when the next epoch opens it again.
set -euo pipefail
tower=$1
helper=$2
work=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
limit=120 # seconds any one command may take; far more than any needs (a few seconds here)

# Two sets of the same records: A, 2 files of 3000 (2.7 MB each), for cutting
# ahead of the reader; B, 3 files of 700, for deleting (short epochs).
"$helper" idx "$work/img" "$work/lab" 6000
"$tower" convert --from idx --images "$work/img" --labels "$work/lab" --out "$work/A" --num_shards 2 >/dev/null
"$helper" idx "$work/imgb" "$work/labb" 2100
"$tower" convert --from idx --images "$work/imgb" --labels "$work/labb" --out "$work/B" --num_shards 3 >/dev/null
record_n_bytes=$(($(stat -c %s "$work/A-00000-of-00002.tfrecord") / 3000))
[ $((record_n_bytes * 3000)) -eq "$(stat -c %s "$work/A-00000-of-00002.tfrecord")" ] || fail "records are not all one size"
data_n_bytes=$((record_n_bytes - 16)) # the 12-byte header and 4-byte footer around each record
"$tower" train --model mnist --data "$work/A-*.tfrecord" --train_dir "$work/ckpt" --device cpu --batch_size 4 \
  --min_after_dequeue 50 --max_steps 1 --no_progress >/dev/null
train=(--model mnist --device cpu --num_towers 2 --batch_size 16 --min_after_dequeue 50 --max_steps 1000000
       --save_every 1000000 --log_every 1 --no_progress --summary_every 0)
eval_=(--checkpoint_dir "$work/ckpt" --batch_size 10 --input_threads 1 --eval_dir none)

# child_of PID: the process whose parent is PID (from /proc/*/stat; no procps needed).
child_of() {
  local d st
  for d in /proc/[0-9]*; do
    { st=$(<"$d/stat"); } 2>/dev/null || continue
    st=${st##*) }
    read -r _ ppid _ <<<"$st"
    [ "$ppid" = "$1" ] && { echo "${d#/proc/}"; return; }
  done
}
# open_file PREFIX MIN_POS: "PATH POS" of a file under PREFIX that tower ($pid
# is `timeout`, tower its child) has open at a read position of at least
# MIN_POS bytes, or nothing.
open_file() {
  local fd link pos child
  child=$(child_of "$pid")
  [ -n "$child" ] || return 0
  for fd in /proc/"$child"/fd/*; do
    link=$(readlink "$fd" 2>/dev/null) || continue
    case $link in "$1"*.tfrecord) ;; *) continue ;; esac
    pos=$(awk '/^pos:/ {print $2}' /proc/"$child"/fdinfo/"${fd##*/}" 2>/dev/null) || continue
    [ -n "$pos" ] && [ "$pos" -ge "$2" ] && { echo "$link $pos"; return; }
  done
}
# wait_open PREFIX MIN_POS MAX_POS: wait until open_file finds one below MAX_POS; sets $file and $pos.
wait_open() {
  file= pos=
  for _ in $(seq 1 1000); do
    kill -0 "$pid" 2>/dev/null || fail "the command ended before it had a file open"
    read -r file pos < <(open_file "$1" "$2"; echo) || true
    [ -n "$file" ] && [ "$pos" -lt "$3" ] && return
    sleep 0.01
  done
  fail "no file of $1 open at a position in [$2, $3)"
}
# finish WHAT: wait for $pid (under timeout); sets $rc; fails on a hang or a crash.
finish() {
  rc=0
  wait "$pid" || rc=$?
  pid=
  [ $rc -ne 124 ] || fail "$1: no exit within $limit s (a hang)"
  [ $rc -lt 128 ] || fail "$1: killed by signal $((rc - 128)) (a crash)"
}
# one_line FILE REGEX WHAT: FILE is exactly one line matching REGEX in full.
one_line() {
  [ "$(wc -l <"$1")" -eq 1 ] || { cat "$1"; fail "$3: not exactly one line on stderr"; }
  grep -Eqx -- "$2" "$1" || { cat "$1"; fail "$3: the line is not /$2/"; }
  echo "ok: $3 -> $(cat "$1") (exit $rc)"
}
# saved_ok N: the checkpoint train's error line names (the last step's variables, saved as it stopped) is
# in $work/tN and is the latest.
saved_ok() {
  local ck
  ck=$(sed -n 's/.* are saved in \(.*\)$/\1/p' "$work/err")
  [ -f "$ck" ] && grep -q "^model_checkpoint_path: \"$(basename "$ck")\"" "$work/t$1/checkpoint" ||
    fail "train $1: the checkpoint the error names ($ck) is not the latest in $work/t$1"
}
# cut_ahead: truncate $file in the middle of a record 600 KB (more than a read
# buffer) past the reader's position; sets $cut_record and $cut_offset.
cut_ahead() {
  cut_record=$(( (pos + 600000) / record_n_bytes + 1 ))
  cut_offset=$((cut_record * record_n_bytes))
  truncate -s $((cut_offset + 12 + 100)) "$file"
}
restore() { rm -f "$work"/A-* "$work"/B-*; "$tower" convert --from idx --images "$work/img" --labels "$work/lab" --out "$work/A" --num_shards 2 >/dev/null
            "$tower" convert --from idx --images "$work/imgb" --labels "$work/labb" --out "$work/B" --num_shards 3 >/dev/null; }

# 1. train: the open file cut ahead of the reader.
timeout $limit "$tower" train "${train[@]}" --data "$work/A-*.tfrecord" --train_dir "$work/t1" >"$work/out" 2>"$work/err" &
pid=$!
for _ in $(seq 1 500); do grep -q "step 1," "$work/out" && break; sleep 0.02; done
wait_open "$work/A-" 0 $((record_n_bytes * 3000 - 1500000))
cut_ahead
finish "train, file cut"
[ $rc -eq 1 ] || { cat "$work/err"; fail "train, file cut: exit $rc, expected 1"; }
one_line "$work/err" "tower train: $file: record $cut_record at offset $cut_offset: truncated: end of file inside the data \(100 of $data_n_bytes bytes\); the variables of step [0-9]+ are saved in $work/t1/model\.ckpt-[0-9]+" \
  "train, the open file cut at record $cut_record"
saved_ok 1
restore

# 2. eval: the open file cut ahead of the reader; no precision line.
timeout $limit "$tower" eval "${eval_[@]}" --data "$work/A-*.tfrecord" >"$work/out" 2>"$work/err" &
pid=$!
wait_open "$work/A-" 262145 $((record_n_bytes * 3000 - 1500000))
cut_ahead
finish "eval, file cut"
[ $rc -eq 1 ] || { cat "$work/err"; fail "eval, file cut: exit $rc, expected 1"; }
one_line "$work/err" "tower eval: $file: record $cut_record at offset $cut_offset: truncated: end of file inside the data \(100 of $data_n_bytes bytes\)" \
  "eval, the open file cut at record $cut_record"
if grep -q "precision" "$work/out"; then fail "eval printed a precision over a cut file"; fi
restore

# 3. eval: the last file deleted while the first is read.
timeout $limit "$tower" eval "${eval_[@]}" --data "$work/B-*.tfrecord" >"$work/out" 2>"$work/err" &
pid=$!
wait_open "$work/B-00000" 1 1000000000
rm "$work/B-00002-of-00003.tfrecord"
finish "eval, a file deleted before it was opened"
[ $rc -eq 1 ] || { cat "$work/err"; fail "eval, deleted file: exit $rc, expected 1"; }
one_line "$work/err" "tower eval: $work/B-00002-of-00003\.tfrecord: cannot open: No such file or directory" \
  "eval, a file deleted before it was opened"
if grep -q "precision" "$work/out"; then fail "eval printed a precision without one of its files"; fi
restore

# 4. eval: the file being read deleted: its descriptor reads it to the end; every example counts.
timeout $limit "$tower" eval "${eval_[@]}" --data "$work/A-*.tfrecord" >"$work/out" 2>"$work/err" &
pid=$!
wait_open "$work/A-00000" 262145 1000000000
rm "$file"
finish "eval, the open file deleted"
[ $rc -eq 0 ] || { cat "$work/err"; fail "eval, the open file deleted: exit $rc, expected 0"; }
grep -q " of 6000 examples correct" "$work/out" || { cat "$work/out"; fail "eval, the open file deleted: not all 6000 examples counted"; }
echo "ok: eval, the open file deleted -> read to its end through the open descriptor, 6000 examples counted (exit 0)"
restore

# 5. train: a file not open deleted; the reader reaches it in this epoch or the next.
timeout $limit "$tower" train "${train[@]}" --data "$work/B-*.tfrecord" --train_dir "$work/t5" >"$work/out" 2>"$work/err" &
pid=$!
for _ in $(seq 1 500); do grep -q "step 1," "$work/out" && break; sleep 0.02; done
wait_open "$work/B-" 0 1000000000
victim=
for f in "$work"/B-*.tfrecord; do [ "$f" = "$file" ] || victim=$f; done
rm "$victim"
finish "train, a file deleted while not open"
[ $rc -eq 1 ] || { cat "$work/err"; fail "train, deleted file: exit $rc, expected 1"; }
one_line "$work/err" "tower train: $victim: cannot open: No such file or directory; the variables of step [0-9]+ are saved in $work/t5/model\.ckpt-[0-9]+" "train, a file deleted while not open"
saved_ok 5
restore

# 6. train: the open file deleted; the next epoch cannot open it again.
timeout $limit "$tower" train "${train[@]}" --data "$work/B-*.tfrecord" --train_dir "$work/t6" >"$work/out" 2>"$work/err" &
pid=$!
for _ in $(seq 1 500); do grep -q "step 1," "$work/out" && break; sleep 0.02; done
wait_open "$work/B-" 0 1000000000
rm "$file"
finish "train, the open file deleted"
[ $rc -eq 1 ] || { cat "$work/err"; fail "train, the open file deleted: exit $rc, expected 1"; }
one_line "$work/err" "tower train: $file: cannot open: No such file or directory; the variables of step [0-9]+ are saved in $work/t6/model\.ckpt-[0-9]+" "train, the open file deleted"
saved_ok 6
echo "ok: truncated and deleted input files stop train and eval with one line, never a hang"
