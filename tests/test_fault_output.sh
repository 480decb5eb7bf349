#!/usr/bin/env bash
# test_fault_output.sh TOWER HELPER — a command's output that cannot be
# delivered, and a conversion stopped by a signal:
#   standard output on a full disk (/dev/full): `tower eval`, `tower inspect`
#     and `tower --version` exit 1 with one line ("writing standard output: No
#     space left on device"), not 0 with the result lost (a closed pipe on
#     `tower train`: tests/test_train_guard.sh); convert and export say
#     that their files are written all the same;
#   `tower convert` stopped by SIGINT or SIGTERM between two examples: exit
#     128 + the signal, one line, no partial .tmp shard left (an inspect of
#     PREFIX-* read one before), and, under --overwrite, the shards already
#     there kept byte for byte.
set -euo pipefail
tower=$1
helper=$2
work=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

[ -w /dev/full ] || { echo "no writable /dev/full: skipped"; exit 77; }
"$helper" idx "$work/img" "$work/lab" 2000
"$tower" convert --from idx --images "$work/img" --labels "$work/lab" --out "$work/small/t" >/dev/null
"$tower" train --model mnist --data "$work/small/t-*.tfrecord" --train_dir "$work/run" --max_steps 1 --batch_size 8 \
  --min_after_dequeue 10 --summary_every 0 --histogram_every 0 --no_progress >/dev/null

full() { # full 'EXACT STDERR LINE' ARGS...: stdout on /dev/full, exit 1 and that one line
  local line=$1
  shift
  set +e
  timeout 120 "$tower" "$@" >/dev/full 2>"$work/err"
  local rc=$?
  set -e
  [ "$rc" -eq 1 ] || fail "tower $* > /dev/full: exit $rc, expected 1 ($(cat "$work/err"))"
  [ "$(cat "$work/err")" = "$line" ] || fail "tower $* > /dev/full: stderr
  $(cat "$work/err")
expected exactly
  $line"
}
full "tower eval: writing standard output: No space left on device" \
  eval --checkpoint_dir "$work/run" --data "$work/small/t-*.tfrecord" --eval_dir none --no_progress
full "tower inspect: writing standard output: No space left on device" inspect "$work/small/t-00000-of-00001.tfrecord"
full "tower: writing standard output: No space left on device" --version
# Where the run's files are written all the same, the line says so (a script seeing the 1 retried, and the shards
# already there refused it).
full "tower convert: writing standard output: No space left on device (its report is lost; the shards are written)" \
  convert --from idx --images "$work/img" --labels "$work/lab" --out "$work/full/t"
[ -f "$work/full/t-00000-of-00001.tfrecord" ] || fail "convert > /dev/full: no shard written"
full "tower export: writing standard output: No space left on device (its report is lost; the .safetensors file is written)" \
  export --checkpoint_dir "$work/run" --out "$work/full.safetensors"
[ -s "$work/full.safetensors" ] || fail "export > /dev/full: no file written"
echo "ok: eval, inspect, --version, convert and export whose standard output is full exit 1 with one line"

# The same where standard output is a pipe whose reader has gone (`| head`): EPIPE, one line, exit 1 (SIGPIPE
# killed eval, convert and export without a word, exit 141).  The FIFO's reader opens it and closes it before the
# command starts: its first write fails.
closed() { # closed 'EXACT STDERR LINE' ARGS...
  local line=$1
  shift
  rm -f "$work/closed.fifo"
  mkfifo "$work/closed.fifo"
  (exec 3<"$work/closed.fifo") &
  exec 8>"$work/closed.fifo"
  wait $!
  set +e
  timeout 120 "$tower" "$@" >&8 2>"$work/err"
  local rc=$?
  set -e
  exec 8>&-
  [ "$rc" -eq 1 ] && [ "$(cat "$work/err")" = "$line" ] ||
    fail "tower $* into a closed pipe: exit $rc, stderr '$(cat "$work/err")', expected 1 and '$line'"
}
closed "tower eval: writing standard output: Broken pipe" \
  eval --checkpoint_dir "$work/run" --data "$work/small/t-*.tfrecord" --eval_dir none --no_progress
closed "tower convert: writing standard output: Broken pipe (its report is lost; the shards are written)" \
  convert --from idx --images "$work/img" --labels "$work/lab" --out "$work/pipe/t"
closed "tower export: writing standard output: Broken pipe (its report is lost; the .safetensors file is written)" \
  export --checkpoint_dir "$work/run" --out "$work/pipe.safetensors"
echo "ok: eval, convert and export into a closed pipe exit 1 with one line"

# A conversion long enough to stop in the middle: 60000 images into gzip shards.
"$helper" idx "$work/bigimg" "$work/biglab" 60000
for sig in INT TERM; do
  mkdir -p "$work/cv_$sig"
  "$tower" convert --from idx --images "$work/img" --labels "$work/lab" --out "$work/cv_$sig/a" --num_shards 3 \
    >/dev/null
  sha256sum "$work/cv_$sig"/a-* >"$work/before_$sig"
  timeout 120 "$tower" convert --from idx --images "$work/bigimg" --labels "$work/biglab" --out "$work/cv_$sig/a" \
    --num_shards 3 --compression gzip --overwrite --no_progress >/dev/null 2>"$work/cv_$sig.err" &
  pid=$!
  for _ in $(seq 1 2000); do ls "$work/cv_$sig"/*.tmp >/dev/null 2>&1 && break; sleep 0.005; done
  ls "$work/cv_$sig"/*.tmp >/dev/null 2>&1 || fail "SIG$sig: the conversion wrote no .tmp shard to stop in"
  kill -"$sig" "$pid"
  set +e
  wait "$pid"
  rc=$?
  set -e
  pid=
  want=$((128 + $(kill -l "$sig")))
  [ "$rc" -eq "$want" ] || fail "convert stopped by SIG$sig: exit $rc, expected $want ($(cat "$work/cv_$sig.err"))"
  [ "$(wc -l <"$work/cv_$sig.err")" -eq 1 ] &&
    grep -Eq "^tower convert: stopped after [0-9]+ examples by SIG$sig: no shard written \(the partial .tmp files removed\), the shards already there kept$" "$work/cv_$sig.err" ||
    fail "convert stopped by SIG$sig: stderr $(cat "$work/cv_$sig.err")"
  ! ls "$work/cv_$sig"/*.tmp >/dev/null 2>&1 || fail "SIG$sig left $(ls "$work/cv_$sig"/*.tmp | tr '\n' ' ')"
  sha256sum -c --quiet "$work/before_$sig" || fail "SIG$sig: the shards already there changed"
  [ "$(ls "$work/cv_$sig" | wc -l)" -eq 3 ] || fail "SIG$sig: $(ls "$work/cv_$sig" | tr '\n' ' ')"
  echo "ok: convert stopped by SIG$sig: exit $rc, $(cat "$work/cv_$sig.err")"
done
