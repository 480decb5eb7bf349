#!/usr/bin/env bash
# test_fault_disk.sh TOWER HELPER ulimit|tmpfs — a full disk while `tower`
# writes.  The documented behaviour (docs/robustness.md): the write that
# fails prints ONE line naming the file and the errno text, its temporary
# file is removed, the previous checkpoint and index stay intact and load,
# and the command stops with exit 1; `--resume` then continues from the last
# good checkpoint.
#   ulimit: a file-size limit (ulimit -f; tower ignores SIGXFSZ, so a write
#     past it fails with EFBIG): a checkpoint, the events file of train and of
#     eval, the safetensors of export.  Needs nothing; always runs.
#   tmpfs: a small tmpfs (mount; exit 77 where mounting is not permitted),
#     filled so that (a) a checkpoint, then (b) only the index after it, no
#     longer fits (ENOSPC).
set -euo pipefail
tower=$1
helper=$2
mode=${3:-ulimit}
work=$(mktemp -d)
mnt=
cleanup() {
  if [ -n "$mnt" ]; then umount "$mnt" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$helper" idx "$work/img" "$work/lab" 2000
"$tower" convert --from idx --images "$work/img" --labels "$work/lab" --out "$work/data" --num_shards 2 >/dev/null

# limited LIMIT_KB ERRFILE ARGS...: tower ARGS under ulimit -f LIMIT_KB; its
# stderr goes through a pipe (a file would be limited too), stdout is dropped.
# Returns tower's exit status.
limited() {
  local limit=$1 errfile=$2
  shift 2
  set +e
  (ulimit -f "$limit"; exec "$tower" "$@" 2>&1 >/dev/null) | cat >"$errfile"
  local rc=${PIPESTATUS[0]}
  set -e
  return "$rc"
}
# one_line ERRFILE PATTERN WHAT: ERRFILE holds exactly one line, matching PATTERN.
one_line() {
  [ "$(wc -l <"$1")" -eq 1 ] || { cat "$1"; fail "$3: not exactly one line on stderr"; }
  grep -Eq -- "$2" "$1" || { cat "$1"; fail "$3: the line does not match $2"; }
  echo "ok: $3 -> $(cat "$1")"
}
# intact DIR STEP WHAT: the latest checkpoint is STEP, everything under a final
# name loads, no temporary file is left, and export can read the latest.
intact() {
  "$helper" check "$1" >"$work/check" || { cat "$work/check"; fail "$3: a checkpoint does not load"; }
  [ "$(sed -n 's/^latest //p' "$work/check")" = "$2" ] || { cat "$work/check"; fail "$3: latest is not step $2"; }
  if grep -q '^tmp ' "$work/check" || ls "$1"/*.tmp >/dev/null 2>&1; then
    ls -la "$1"; fail "$3: a temporary file was left behind"
  fi
  "$tower" export --checkpoint_dir "$1" --out "$work/x.safetensors" >/dev/null || fail "$3: export cannot load step $2"
}

common=(--model mnist --data "$work/data-*.tfrecord" --device cpu --num_towers 2 --batch_size 4
        --min_after_dequeue 100 --log_every 1 --no_progress)

if [ "$mode" = ulimit ]; then
  dir=$work/train
  "$tower" train "${common[@]}" --train_dir "$dir" --max_steps 2 --save_every 1 >/dev/null
  intact "$dir" 2 "before"

  # A checkpoint (39 MB for mnist) past a 20 MB limit.
  rc=0; limited 20000 "$work/err" train "${common[@]}" --train_dir "$dir" --max_steps 10 --save_every 1 --resume || rc=$?
  [ $rc -eq 1 ] || fail "checkpoint past the limit: exit $rc, expected 1"
  one_line "$work/err" "^tower train: checkpoint at step 3: $dir/model\.ckpt-3\.tmp: write failed: File too large\$" \
    "checkpoint past ulimit -f"
  intact "$dir" 2 "after the failed checkpoint"
  [ ! -e "$dir/model.ckpt-3" ] || fail "model.ckpt-3 exists after its write failed"

  # The events file past a 40 KB limit (a histogram of every variable every step).
  rc=0; limited 40 "$work/err" train "${common[@]}" --train_dir "$dir" --max_steps 50 --save_every 1000 \
    --summary_every 1 --histogram_every 1 --resume || rc=$?
  [ $rc -eq 1 ] || fail "events file past the limit: exit $rc, expected 1"
  one_line "$work/err" "^tower train: summaries at step [0-9]+: $dir/events\.out\.tfevents\.[^ ]+: write error: File too large; saving the variables of step [0-9]+ failed too: $dir/model\.ckpt-[0-9]+\.tmp: write failed: File too large\$" \
    "events file past ulimit -f"
  intact "$dir" 2 "after the failed events file"

  # The events file past a limit a checkpoint fits in (resnet20's 3.3 MB under 3.4 MB): the steps run are saved,
  # as after a bad record, and the run resumes from them.
  small=$work/small
  rc=0; limited 3400 "$work/err" train "${common[@]}" --model resnet20 --num_towers 1 --train_dir "$small" \
    --max_steps 500 --save_every 0 --summary_every 1 --histogram_every 1 || rc=$?
  [ $rc -eq 1 ] || fail "events file past the limit, the checkpoint within: exit $rc, expected 1"
  one_line "$work/err" "^tower train: summaries at step ([0-9]+): $small/events\.out\.tfevents\.[^ ]+: write error: File too large; the variables of step [0-9]+ are saved in $small/model\.ckpt-[0-9]+\$" \
    "events file past ulimit -f, the checkpoint saved"
  saved=$(sed -n 's/^tower train: summaries at step \([0-9]*\):.*/\1/p' "$work/err")
  intact "$small" "$saved" "the steps before the failed events file saved"

  # eval: its events file cannot be written at all; with --eval_dir none it needs no file.
  rc=0; limited 0 "$work/err" eval --checkpoint_dir "$dir" --data "$work/data-*.tfrecord" || rc=$?
  [ $rc -eq 1 ] || fail "eval with no room for its events file: exit $rc, expected 1"
  one_line "$work/err" "^tower eval: $dir/eval/events\.out\.tfevents\.[^ ]+: write error: File too large \(--eval_dir none writes no events file\)\$" \
    "eval events file past ulimit -f 0"
  [ ! -e "$dir/eval" ] || fail "eval left the --eval_dir it made, empty: $(ls -a "$dir/eval" | tr '\n' ' ')"
  limited 0 "$work/err" eval --checkpoint_dir "$dir" --data "$work/data-*.tfrecord" --eval_dir none ||
    { cat "$work/err"; fail "eval --eval_dir none needs no file but failed"; }

  # export: a 13 MB safetensors past a 1 MB limit; neither it nor its temporary file stays.
  rc=0; limited 1000 "$work/err" export --checkpoint_dir "$dir" --out "$work/out.safetensors" || rc=$?
  [ $rc -eq 1 ] || fail "export past the limit: exit $rc, expected 1"
  one_line "$work/err" "^tower export: $work/out\.safetensors\.tmp: write error: File too large\$" "export past ulimit -f"
  [ ! -e "$work/out.safetensors" ] && [ ! -e "$work/out.safetensors.tmp" ] || fail "export left a file behind"

  # The --trace timeline (tower bench: synthetic data, no checkpoint) past a 20 KB limit.
  rc=0; limited 20 "$work/err" bench --models mnist --modes ps_cpu --towers 1 --batch_size 4 --steps 200 --warmup 1 \
    --repeat 1 --trace "$work/trace.json" || rc=$?
  [ $rc -eq 1 ] || fail "a trace past the limit: exit $rc, expected 1"
  one_line "$work/err" "^tower bench: mnist, ps_cpu, 1 tower\(s\): --trace $work/trace-mnist-ps_cpu-1\.json: write failed: File too large\$" \
    "trace past ulimit -f"
  [ ! -e "$work/trace-mnist-ps_cpu-1.json" ] || fail "the cut trace stayed: $(wc -c <"$work/trace-mnist-ps_cpu-1.json") bytes"

  # With room again, --resume continues from the last good checkpoint.
  "$tower" train "${common[@]}" --train_dir "$dir" --max_steps 4 --save_every 1 --resume >"$work/log" ||
    fail "resume after the full disk"
  grep -q "resumed from $dir/model.ckpt-2 at step 2\$" "$work/log" || fail "did not resume from model.ckpt-2"
  intact "$dir" 4 "after resuming"
  echo "ok: a file-size limit stops train, eval, export and bench --trace with one line; the last checkpoint stays intact"
  exit 0
fi

[ "$mode" = tmpfs ] || fail "mode '$mode': expected ulimit or tmpfs"
mkdir -p "$work/mnt"
if ! mount -t tmpfs -o size=130m tmpfs "$work/mnt" 2>"$work/mount.err"; then
  echo "skipped: cannot mount a tmpfs here: $(cat "$work/mount.err")"
  exit 77
fi
mnt=$work/mnt
dir=$mnt/train
"$tower" train "${common[@]}" --train_dir "$dir" --max_steps 1 --save_every 1 >/dev/null
intact "$dir" 1 "before"
ckpt_pages=$(( ($(stat -c %s "$dir/model.ckpt-1") + 4095) / 4096 ))
# fill FREE_PAGES: leave exactly that many 4 KiB pages free on the tmpfs.
fill() {
  rm -f "$mnt/filler"
  local avail=$(( $(stat -f -c '%a' "$mnt") * $(stat -f -c '%S' "$mnt") ))
  head -c $(( avail - $1 * 4096 )) /dev/zero >"$mnt/filler"
  [ $(( $(stat -f -c '%a' "$mnt") * $(stat -f -c '%S' "$mnt") )) -eq $(( $1 * 4096 )) ] || fail "cannot fill the tmpfs"
}
# (a) The checkpoint does not fit (a page for the run's events file, 10 too few for the checkpoint).
fill $(( ckpt_pages - 9 ))
rc=0; "$tower" train "${common[@]}" --train_dir "$dir" --max_steps 5 --save_every 1 --resume >/dev/null 2>"$work/err" || rc=$?
[ $rc -eq 1 ] || fail "tmpfs, checkpoint: exit $rc, expected 1"
one_line "$work/err" "^tower train: checkpoint at step 2: $dir/model\.ckpt-2\.tmp: (write|flush/fsync) failed: No space left on device\$" \
  "checkpoint on a full tmpfs"
intact "$dir" 1 "after the failed checkpoint"
# (b) The checkpoint fits, its index does not: the old index still names step 1 (one page more for the
# train dir's .lock, which holds the run's PID while it runs).
fill $(( ckpt_pages + 2 ))
rc=0; "$tower" train "${common[@]}" --train_dir "$dir" --max_steps 5 --save_every 1 --resume >/dev/null 2>"$work/err" || rc=$?
[ $rc -eq 1 ] || fail "tmpfs, index: exit $rc, expected 1"
one_line "$work/err" "^tower train: checkpoint at step 2: $dir/checkpoint\.tmp: (write|flush/fsync) failed: No space left on device\$" \
  "index on a full tmpfs"
intact "$dir" 1 "after the failed index"
grep -q '^orphan model.ckpt-2$' "$work/check" || fail "model.ckpt-2 (complete, not listed) should be there"
# Room again: resume from step 1; the next save removes the unlisted model.ckpt-2 or replaces it.
rm -f "$mnt/filler"
"$tower" train "${common[@]}" --train_dir "$dir" --max_steps 3 --save_every 3 --resume >"$work/log" ||
  fail "resume after the full tmpfs"
grep -q "resumed from $dir/model.ckpt-1 at step 1\$" "$work/log" || fail "did not resume from model.ckpt-1"
intact "$dir" 3 "after resuming"
if grep -q '^orphan ' "$work/check"; then cat "$work/check"; fail "an unlisted checkpoint survived the next save"; fi
echo "ok: a full tmpfs stops train with one line; the last checkpoint and its index stay intact"
