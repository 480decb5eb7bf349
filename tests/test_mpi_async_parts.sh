#!/usr/bin/env bash
# test_mpi_async_parts.sh TOWER FAULT — the asynchronous parameter servers (--sync_replicas false,
# train/mode_ps_async.c) with a split input (--input_split files / records) on co-located ranks (every rank a
# worker and a server), and each worker part's own examples in the checkpoint (RunState.part_examples_consumed):
# each worker runs to its own part's end, then stays passive (its server thread serving on) until the last part
# ends; --resume skips exactly each part's own count.  `FAULT run CKPT` prints a checkpoint's run state.
#   - files, 2 ranks, 3 files of 100 records (worker 0 files 0 and 2, worker 1 file 1), --num_epochs 1, batch 4,
#     --max_staleness 2: rank 0 logs the parts' ends after 50 and 25 steps; done at step 75 (not at 50, the first
#     part's end, as before); checkpoints 16 32 48 57 65 73 75 (--save_every 16: the rounds'); checkpoint 75
#     records 300 examples, parts 200,100, split files; every staleness line within the bound 5; rank 0's logged
#     steps only grow, and count 1 a round after worker 1's end (56 64 72; with these parts a count told late,
#     S = 2, could only be 52 or 54, never a logged multiple of 8);
#   - records, 3 ranks, 203 records (parts of 68, 68, 67): ends after 17, 17 and 16 steps; done at 50; checkpoint
#     48 records parts 64,64,64 and checkpoint 50 records 200 examples, parts 68,68,64, split records; staleness
#     within (W - 1)(2S + 1) = 66;
#   - --max_steps 60, 2 ranks, files of 40 and 2000 records: rank 0's part ends after 10 steps, it stays as a
#     passive rank and logs the rounds' counts (30 and 40); done at step 40 (10 + 30 rounds); checkpoint 40
#     records 160 examples, parts 40,120;
#   - exact --resume (files of 40 and 120 records, --num_epochs 2: parts of 20 and 60 steps): a straight run ends
#     at step 80 with 320 examples, parts 80,240; --max_steps 60 stops after round 30 at step 50 (parts 80,120);
#     --resume of it: worker 0's input ends after 0 steps and worker 1's after exactly 60 - 30 = 30, done at step
#     80 with the straight run's 320 examples and parts (the older rule, 200 / 2 = 100 skipped each, ends
#     worker 1 after 35, at step 85);
#   - the same checkpoint resumed by 1 server + 2 workers (--ps_dedicated, as many workers, the same split):
#     the same 0 and 30 steps, done at 80;
#   - the same checkpoint without the parts' counts (`FAULT forge ... no_parts`: a file of an older build):
#     the older rule, 100 skipped each: worker 1 ends after 35 steps, done at 85, 340 examples;
#   - the same checkpoint resumed with --input_split records (another split): a note on stderr, 100 skipped
#     each (records parts of 80 a epoch): each ends after 15 steps, done at 80;
#   - SIGINT to rank 0 after its part ended (files of 40 and 2000 records: a co-located passive rank 0, its
#     server thread serving on): every rank ends within 10 s at the same step, past 20, whose checkpoint is the
#     latest and loads.
# Skips (77) without mpirun or without MPI in the build.
set -euo pipefail
tower=$1 fault=$2
mpi_timeout=300
source "$(dirname "$0")/mpi_common.sh"
work=$(mktemp -d)
launcher=
trap '[ -n "$launcher" ] && kill -9 "$launcher" 2>/dev/null; rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

data() { # data NAME N SHARDS: N synthetic records in SHARDS files $work/NAME-*.tfrecord
  "$fault" idx "$work/img" "$work/lab" "$2"
  "$tower" convert --from idx --images "$work/img" --labels "$work/lab" --out "$work/$1" --num_shards "$3" >/dev/null
}
data three 300 3
data odd 203 1
data uneven-a 40 1
data uneven-b 2000 1
data res-a 40 1
data res-b 120 1
common=(--model mnist --device cpu --num_towers 1 --batch_size 4 --min_after_dequeue 100 --no_progress --summary_every 0
        --histogram_every 0 --optimizer momentum --variable_update parameter_server --sync_replicas false)

# ended LOG RANK WORKER: the step count rank 0 logged for that worker's end of input.
ended() { sed -n "s/.*: rank $2 (worker $3): its input ended after \([0-9]*\) step(s).*/\1/p" "$1" | head -1; }
# run_state NAME CKPT: the run state line of CKPT (step, examples, parts, split).
run_state() { "$fault" run "$2" || fail "$1: $2 does not load"; }
# want_state NAME CKPT LINE: CKPT's run state is LINE.
want_state() {
  local got
  got=$(run_state "$1" "$2")
  [ "$got" = "$3" ] || fail "$1: $(basename "$2") records '$got', want '$3'"
}
# within_bound NAME LOG: every staleness line's max within its bound, and at least one line.
within_bound() {
  local lines
  lines=$(sed -n 's/.*staleness mean [0-9.]*, max \([0-9]*\) over .*(bound \([0-9]*\)).*/\1 \2/p' "$2")
  [ -n "$lines" ] || { cat "$2"; fail "$1: rank 0 logged no staleness line"; }
  echo "$lines" | while read -r max bound; do [ "$max" -le "$bound" ] || fail "$1: staleness $max beyond $bound"; done
}
job() { # job NAME NP ARGS...: tower train on NP ranks, --train_dir $work/NAME, rank 0's log in $work/NAME.log
  local name=$1 np=$2
  shift 2
  "${mpi[@]}" -np "$np" "$tower" train "${common[@]}" "$@" --train_dir "$work/$name" >"$work/$name.log" 2>&1 ||
    { cat "$work/$name.log"; fail "$name: the job failed or hung"; }
}

# 1. files, 2 co-located ranks, parts of 200 and 100 records.
t=$SECONDS
job files 2 --input_split files --data "$work/three-*.tfrecord" --num_epochs 1 --max_staleness 2 --save_every 16 \
  --keep_checkpoints 0 --log_every 8
log=$work/files.log
e0=$(ended "$log" 0 0) e1=$(ended "$log" 1 1)
[ "$e0" = 50 ] && [ "$e1" = 25 ] || { cat "$log"; fail "files: the parts ended after '$e0' and '$e1' steps, want 50 and 25"; }
grep -q "done at step 75;" "$log" || { cat "$log"; fail "files: not done at step 75 (50 + 25 worker steps)"; }
for s in 16 32 48 57 65 73 75; do [ -f "$work/files/model.ckpt-$s" ] || { ls "$work/files"; fail "files: no checkpoint $s"; }; done
want_state files "$work/files/model.ckpt-57" "step 57 examples 228 parts 128,100 split files"
want_state files "$work/files/model.ckpt-75" "step 75 examples 300 parts 200,100 split files"
within_bound files "$log"
steps_rise files "$log" 56 64 72 # one update a round after 50
echo "files, 2 co-located ranks: parts ended after 50 and 25 steps, done at 75 (not 50), checkpoints 16 .. 75," \
  "75 records 300 examples, parts 200,100; staleness within 5; logged steps grow ($((SECONDS - t)) s)"

# 2. records, 3 co-located ranks, parts of 68, 68 and 67 records.
t=$SECONDS
job records 3 --input_split records --data "$work/odd-*.tfrecord" --num_epochs 1 --save_every 16 --keep_checkpoints 0 \
  --log_every 3
log=$work/records.log
e0=$(ended "$log" 0 0) e1=$(ended "$log" 1 1) e2=$(ended "$log" 2 2)
[ "$e0 $e1 $e2" = "17 17 16" ] || { cat "$log"; fail "records: the parts ended after '$e0 $e1 $e2' steps, want 17 17 16"; }
grep -q "done at step 50;" "$log" || { cat "$log"; fail "records: not done at step 50 (17 + 17 + 16)"; }
want_state records "$work/records/model.ckpt-48" "step 48 examples 192 parts 64,64,64 split records"
want_state records "$work/records/model.ckpt-50" "step 50 examples 200 parts 68,68,64 split records"
within_bound records "$log"
echo "records, 3 co-located ranks: parts ended after 17, 17 and 16 steps, done at 50, parts 68,68,64" \
  "($((SECONDS - t)) s)"

# 3. --max_steps with rank 0's part ended first: it logs the rounds as a passive rank.
t=$SECONDS
job max 2 --input_split files --data "$work/uneven-*.tfrecord" --num_epochs 1 --max_steps 60 --log_every 10
log=$work/max.log
[ "$(ended "$log" 0 0)" = 10 ] || { cat "$log"; fail "max_steps: rank 0's 40 records did not end after 10 steps"; }
grep -q "done at step 40;" "$log" || { cat "$log"; fail "max_steps: not done at step 40 (10 + 30 rounds)"; }
for s in 30 40; do
  echo " $(logged "$log") " | grep -q " $s " || { cat "$log"; fail "max_steps: passive rank 0 logged no step $s"; }
done
want_state max_steps "$work/max/model.ckpt-40" "step 40 examples 160 parts 40,120 split files"
echo "--max_steps 60, rank 0's part ended after 10: passive, logs 30 and 40, done at 40 = 10 + 30 rounds" \
  "($((SECONDS - t)) s)"

# 4. Exact --resume: parts of 20 and 60 steps (2 epochs of 40 and 120 records).
t=$SECONDS
res=(--input_split files --data "$work/res-*.tfrecord" --num_epochs 2 --log_every 10)
job straight 2 "${res[@]}"
grep -q "done at step 80;" "$work/straight.log" || { cat "$work/straight.log"; fail "straight: not done at step 80"; }
want_state straight "$work/straight/model.ckpt-80" "step 80 examples 320 parts 80,240 split files"
job stop 2 "${res[@]}" --max_steps 60
want_state stop "$work/stop/model.ckpt-50" "step 50 examples 200 parts 80,120 split files"
cp -r "$work/stop" "$work/dedicated"
cp -r "$work/stop" "$work/old"
cp -r "$work/stop" "$work/other"
"$fault" forge "$work/old/model.ckpt-50" "$work/forged" no_parts
mv "$work/forged" "$work/old/model.ckpt-50"
want_state old "$work/old/model.ckpt-50" "step 50 examples 200 parts - split -"
job stop 2 "${res[@]}" --resume
log=$work/stop.log
e0=$(ended "$log" 0 0) e1=$(ended "$log" 1 1)
[ "$e0" = 0 ] && [ "$e1" = 30 ] ||
  { cat "$log"; fail "resume: the parts ended after '$e0' and '$e1' steps, want 0 and 30 (60 - 30 taken)"; }
grep -q "done at step 80;" "$log" || { cat "$log"; fail "resume: not done at step 80, the straight run's"; }
want_state resume "$work/stop/model.ckpt-80" "$(run_state straight "$work/straight/model.ckpt-80")"
echo "exact resume: stopped at 50 (parts 80,120), resumed parts ended after 0 and 30 steps, done at 80 with the" \
  "straight run's 320 examples, parts 80,240 ($((SECONDS - t)) s)"

# 5. The same into 1 server + 2 workers.
t=$SECONDS
job dedicated 3 "${res[@]}" --ps_dedicated --ps_ranks 1 --resume
log=$work/dedicated.log
e0=$(ended "$log" 1 0) e1=$(ended "$log" 2 1)
[ "$e0" = 0 ] && [ "$e1" = 30 ] || { cat "$log"; fail "dedicated: the parts ended after '$e0' and '$e1' steps, want 0 and 30"; }
want_state dedicated "$work/dedicated/model.ckpt-80" "step 80 examples 320 parts 80,240 split files"
echo "resumed by 1 server + 2 workers: the parts ended after 0 and 30 steps, done at 80 ($((SECONDS - t)) s)"

# 6. An older checkpoint (no parts' counts): examples / 2 each.
t=$SECONDS
job old 2 "${res[@]}" --resume
log=$work/old.log
e0=$(ended "$log" 0 0) e1=$(ended "$log" 1 1)
[ "$e0" = 0 ] && [ "$e1" = 35 ] ||
  { cat "$log"; fail "old: the parts ended after '$e0' and '$e1' steps, want 0 and 35 (100 of 240 skipped)"; }
want_state old "$work/old/model.ckpt-85" "step 85 examples 340 parts 100,240 split files"
echo "a checkpoint without the parts: 100 skipped each, the parts ended after 0 and 35 steps, done at 85" \
  "($((SECONDS - t)) s)"

# 7. Another split: a note, examples / 2 each.
t=$SECONDS
job other 2 --input_split records --data "$work/res-*.tfrecord" --num_epochs 2 --log_every 10 --resume
log=$work/other.log
grep -q "note: the checkpoint records the examples of 2 worker(s)' parts of --input_split files; this run has 2" \
  "$log" || { cat "$log"; fail "other split: no note"; }
e0=$(ended "$log" 0 0) e1=$(ended "$log" 1 1)
[ "$e0" = 15 ] && [ "$e1" = 15 ] ||
  { cat "$log"; fail "other split: the parts ended after '$e0' and '$e1' steps, want 15 and 15 (100 of 160 skipped)"; }
echo "another split: a note, 100 skipped each, the parts ended after 15 and 15 steps ($((SECONDS - t)) s)"

# 8. A stop by signal to the co-located rank 0 once passive (mpirun itself the launcher: mpi_stop_job finds the
# ranks among its children and bounds the waits itself).
t=$SECONDS
mpi=(mpirun --oversubscribe --bind-to none)
mpi_stop_job stop-passive INT 0 SIGINT 1 "$fault" "its input ended after" 2 "${common[@]}" --input_split files \
  --data "$work/uneven-*.tfrecord" --num_epochs 1 --save_every 0 --log_every 1
[ "$mpi_stop_step" -gt 20 ] || fail "stop-passive: stopped at step $mpi_stop_step, not after rank 0's 10 steps"
[ "$(ended "$work/stop-passive.log" 0 0)" = 10 ] ||
  { cat "$work/stop-passive.log"; fail "stop-passive: rank 0's part did not end after 10"; }
echo "SIGINT to the passive rank 0: every rank stopped at step $mpi_stop_step within $mpi_stop_sec s," \
  "model.ckpt-$mpi_stop_step loads ($((SECONDS - t)) s)"
