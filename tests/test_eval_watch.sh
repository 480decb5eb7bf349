#!/usr/bin/env bash
# test_eval_watch.sh TOWER HELPER EVENTS — `tower eval --eval_interval_secs`,
# cifar10_eval.py's loop beside a training run (docs/training.md):
#   1. started before the run, it waits for the first checkpoint, evaluates
#      each new latest one once, in step order, and stops with exit 0 after
#      a checkpoint of --until_step; its events file holds one "Precision @ 1"
#      a checkpoint evaluated, at that step, equal to the printed precision;
#   2. a checkpoint already evaluated is not evaluated again; a run started
#      over in the same train_dir (the earlier run's checkpoints removed, as
#      `tower train` asks, then the same names as new files) is; SIGTERM
#      ends the watch with its line and exit 143;
#   3. SIGINT while waiting: exit 130, no evaluation;
#   4. a latest checkpoint that does not load: one line, exit 1;
#   5. the flags that contradict it: exit 2, one line;
#   6. where MPI runs, a checkpoint in shards (a manifest, no single file) is
#      evaluated once, not at every poll.
# HELPER is test_fault_helper (synthetic IDX data), EVENTS is test_events
# (`scalars DIR TAG` prints an events file's STEP VALUE lines).
set -euo pipefail
tower=$1
helper=$2
events=$3
work=$(mktemp -d)
bg=
cleanup() {
  if [ -n "$bg" ]; then kill -KILL "$bg" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$helper" idx "$work/img" "$work/lab" 600
"$tower" convert --from idx --images "$work/img" --labels "$work/lab" --out "$work/data" --num_shards 1 >/dev/null
data="$work/data-*.tfrecord"
train=(--model mnist --data "$data" --batch_size 16 --no_progress --log_every 0 --save_every 10)
watch=(--data "$data" --batch_size 100 --no_progress --eval_interval_secs 1)

# until_grep FILE PATTERN SECONDS: wait for PATTERN in FILE.
until_grep() {
  for _ in $(seq $((10 * $3))); do
    grep -q -- "$2" "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  cat "$1"; fail "no '$2' in $1 after $3 s"
}
# finish PID SECONDS: the exit status of background PID, killed (and failed) after SECONDS.
finish() {
  local pid=$1 limit=$2
  for _ in $(seq $((10 * limit))); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -0 "$pid" 2>/dev/null && fail "eval --eval_interval_secs still running after $limit s"
  set +e
  wait "$pid"
  local rc=$?
  set -e
  bg=
  return "$rc"
}
# steps FILE: the steps of the checkpoints FILE's evaluations, one a line.
steps() { sed -n 's/.*; checkpoint .* (step \([0-9]*\), .*/\1/p' "$1"; }

# 1. Before the run, until step 30.
"$tower" eval --checkpoint_dir "$work/run" --eval_dir "$work/ev1" "${watch[@]}" --until_step 30 \
  >"$work/w1.out" 2>"$work/w1.err" &
bg=$!
until_grep "$work/w1.out" "no checkpoint in $work/run yet: waiting" 20
"$tower" train "${train[@]}" --train_dir "$work/run" --max_steps 30 >/dev/null
rc=0
finish "$bg" 60 || rc=$?
[ "$rc" -eq 0 ] || { cat "$work/w1.out" "$work/w1.err"; fail "1: exit $rc after --until_step, expected 0"; }
[ ! -s "$work/w1.err" ] || { cat "$work/w1.err"; fail "1: stderr is not empty"; }
grep -q "watching $work/run for new checkpoints every 1 s (until step 30)" "$work/w1.out" || fail "1: no start line"
evaluated=$(steps "$work/w1.out" | tr '\n' ' ')
[ "$(steps "$work/w1.out" | tail -n 1)" = 30 ] || { cat "$work/w1.out"; fail "1: the last evaluation is not step 30"; }
[ "$(steps "$work/w1.out" | sort -n | uniq | tr '\n' ' ')" = "$evaluated" ] ||
  fail "1: steps evaluated out of order or twice: $evaluated"
# The events file: one Precision @ 1 an evaluation, at its step, the printed value.
printed=$(sed -n 's/.*: precision @ 1 = \([0-9.]*\)$/\1/p' "$work/w1.out")
"$events" scalars "$work/ev1" "Precision @ 1" >"$work/ev1.txt" || fail "1: the events file does not read"
[ "$(cut -d' ' -f1 "$work/ev1.txt" | tr '\n' ' ')" = "$evaluated" ] ||
  { cat "$work/ev1.txt"; fail "1: events at steps other than those evaluated ($evaluated)"; }
paste -d' ' <(cut -d' ' -f2 "$work/ev1.txt") <(echo "$printed") |
  awk '{ d = $1 - $2; if (d < -0.0005 || d > 0.0005) { print "FAIL: 1: event " $1 " printed " $2; bad = 1 } } END { exit bad }' ||
  fail "1: an event's precision is not the printed one"
echo "ok 1: waited, evaluated steps $evaluated, stopped at --until_step 30 (exit 0), events at the same steps"

# 2. No second evaluation of the same file; a run started over is evaluated again; SIGTERM.
"$tower" eval --checkpoint_dir "$work/run" --eval_dir "$work/ev2" "${watch[@]}" >"$work/w2.out" 2>"$work/w2.err" &
bg=$!
until_grep "$work/w2.out" "(step 30, " 30
sleep 2.5
[ "$(steps "$work/w2.out" | wc -l)" -eq 1 ] || { cat "$work/w2.out"; fail "2: step 30 evaluated more than once"; }
rm -f "$work"/run/model.ckpt-* "$work/run/checkpoint"
"$tower" train "${train[@]}" --train_dir "$work/run" --max_steps 30 --seed 7 >/dev/null
for _ in $(seq 300); do
  [ "$(steps "$work/w2.out" | tail -n 1)" = 30 ] && [ "$(steps "$work/w2.out" | wc -l)" -ge 2 ] && break
  sleep 0.1
done
n2=$(steps "$work/w2.out" | wc -l)
[ "$n2" -ge 2 ] && [ "$(steps "$work/w2.out" | tail -n 1)" = 30 ] ||
  { cat "$work/w2.out"; fail "2: the restarted run's step 30 was not evaluated"; }
kill -TERM "$bg"
rc=0
finish "$bg" 30 || rc=$?
[ "$rc" -eq 143 ] || { cat "$work/w2.out" "$work/w2.err"; fail "2: exit $rc after SIGTERM, expected 143"; }
grep -q ": stopped by SIGTERM after $n2 evaluations (the last at step 30)$" "$work/w2.out" ||
  { cat "$work/w2.out"; fail "2: no stop line"; }
echo "ok 2: step 30 once, the restarted run's checkpoints again ($n2 evaluations), SIGTERM -> 143"

# 3. SIGINT while waiting.
mkdir "$work/empty"
"$tower" eval --checkpoint_dir "$work/empty" --eval_dir none "${watch[@]}" >"$work/w3.out" 2>"$work/w3.err" &
bg=$!
until_grep "$work/w3.out" "yet: waiting" 20
kill -INT "$bg"
rc=0
finish "$bg" 30 || rc=$?
[ "$rc" -eq 130 ] || { cat "$work/w3.out" "$work/w3.err"; fail "3: exit $rc after SIGINT, expected 130"; }
grep -q ": stopped by SIGINT after 0 evaluations$" "$work/w3.out" || { cat "$work/w3.out"; fail "3: no stop line"; }
echo "ok 3: SIGINT while waiting -> 130"

# 4. The latest checkpoint cut short: one line, exit 1.
mkdir "$work/bad"
cp "$work/run/checkpoint" "$work/run/model.ckpt-30" "$work/bad/"
truncate -s 100 "$work/bad/model.ckpt-30"
rc=0
timeout 60 "$tower" eval --checkpoint_dir "$work/bad" --eval_dir none "${watch[@]}" >"$work/w4.out" 2>"$work/w4.err" ||
  rc=$?
[ "$rc" -eq 1 ] || { cat "$work/w4.out" "$work/w4.err"; fail "4: exit $rc for a cut checkpoint, expected 1"; }
[ "$(wc -l <"$work/w4.err")" -eq 1 ] && grep -q "^tower eval: $work/bad/model.ckpt-30: truncated" "$work/w4.err" ||
  { cat "$work/w4.err"; fail "4: not one line naming the file"; }
echo "ok 4: $(cat "$work/w4.err")"

# 5. What watching can know before the first checkpoint is refused at once, not when one appears: --data whose
# pattern matches nothing, a --checkpoint_dir that is a file.
rc=0
timeout 20 "$tower" eval --checkpoint_dir "$work/empty" --eval_dir none --eval_interval_secs 1 \
  --data "$work/none-*.tfrecord" >"$work/w5.out" 2>"$work/w5.err" || rc=$?
[ "$rc" -eq 1 ] && [ "$(cat "$work/w5.err")" = "tower eval: --data: pattern '$work/none-*.tfrecord' matches no files" ] ||
  { cat "$work/w5.err"; fail "5: --data matching nothing while watching: exit $rc (124: it waited)"; }
echo x >"$work/afile"
rc=0
timeout 20 "$tower" eval --checkpoint_dir "$work/afile" --eval_dir none "${watch[@]}" >"$work/w5.out" 2>"$work/w5.err" ||
  rc=$?
[ "$rc" -eq 1 ] && [ "$(cat "$work/w5.err")" = "tower eval: --checkpoint_dir $work/afile is not a directory" ] ||
  { cat "$work/w5.err"; fail "5: a file as --checkpoint_dir while watching: exit $rc (124: it waited)"; }
echo "ok 5: refused before watching: --data matching nothing, a file as --checkpoint_dir"

# 6 (where this tower has MPI and mpirun starts 2 ranks). A checkpoint in shards (ps_mpi's owners write
# model.ckpt-N.shard-* and the manifest model.ckpt-N.shards, no file model.ckpt-N): evaluated once, not at
# every poll.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader,tcp
mpi=(timeout 120 mpirun --oversubscribe --bind-to none -np 2)
if command -v mpirun >/dev/null 2>&1 &&
   "${mpi[@]}" "$tower" train "${train[@]}" --train_dir "$work/sharded" --max_steps 10 --variable_update \
     parameter_server --checkpoint_writers owners >"$work/mpi.out" 2>&1 &&
   [ -f "$work/sharded/model.ckpt-10.shards" ] && [ ! -e "$work/sharded/model.ckpt-10" ]; then
  "$tower" eval --checkpoint_dir "$work/sharded" --eval_dir none "${watch[@]}" >"$work/w6.out" 2>"$work/w6.err" &
  bg=$!
  until_grep "$work/w6.out" "(step 10, " 30
  sleep 3.5
  kill -TERM "$bg"
  rc=0
  finish "$bg" 30 || rc=$?
  [ "$rc" -eq 143 ] && [ "$(steps "$work/w6.out" | wc -l)" -eq 1 ] ||
    { cat "$work/w6.out" "$work/w6.err"; fail "6: the sharded checkpoint evaluated other than once (exit $rc)"; }
  echo "ok 6: a checkpoint in shards evaluated once"
else
  echo "skipped 6: no sharded checkpoint here (a tower without MPI, or mpirun cannot start 2 ranks): $(tail -n 1 "$work/mpi.out")"
fi

# 5. Refusals.
refused() {
  local want=$1
  shift
  local rc=0
  "$tower" eval "$@" >/dev/null 2>"$work/r.err" || rc=$?
  [ "$rc" -eq 2 ] && [ "$(wc -l <"$work/r.err")" -eq 1 ] && grep -qF -- "$want" "$work/r.err" ||
    { cat "$work/r.err"; fail "5: eval $* gave exit $rc, expected 2 and '$want'"; }
}
refused "--eval_interval_secs watches --checkpoint_dir" --checkpoint "$work/run/model.ckpt-30" --data "$data" \
  --eval_interval_secs 5
refused "--until_step 5 needs --eval_interval_secs" --checkpoint_dir "$work/run" --data "$data" --until_step 5
echo "ok 5: the contradicting flags refused"
