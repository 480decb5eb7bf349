#!/usr/bin/env bash
# test_mpi_async_split.sh TOWER FAULT — --ps_dedicated with the asynchronous parameter servers (--sync_replicas
# false, train/mode_ps_async.c) and a split input (--input_split files / records), whose workers' parts end at
# different steps: each worker runs to its own part's end, then waits, passive, for the others; the job ends
# with the last part (or --max_steps, or a stop), every rank at the same round.
#   - files, 1 server + 2 workers, 3 files of 100 records (worker 0 reads files 0 and 2, worker 1 file 1),
#     --num_epochs 1, batch 4: the job ends, status 0, within the timeout; rank 0 logs worker 0's part ended
#     after 50 steps and worker 1's after 25 (steps x batch = each part's records: every example once);
#     "done at step 75" (every worker step applied); the index's latest checkpoint is 75, it loads, and `tower
#     eval` reads it at step 75; the --save_every 16 saves are the rounds' (8, 16, 24, 32, 40, 48 of 2 steps a
#     round as scheduled) with the exact counts 16, 32, 48, then 57, 65, 73 (worker 1 ended after 25);
#     rank 0's logged steps only grow, and count 1 a round once worker 1 ended (56, 64, 72);
#   - records, 2 servers + 2 workers, one file of 199 records: parts of 100 and 99, 25 and 24 steps of batch 4;
#     done at step 49, checkpoint 49 latest and loadable (the server-only rank 1 asks owner 0 for each round);
#   - --max_steps with a part ended (40 records and 2000 in two files, files split, --num_epochs 1): --max_steps 60 ends after
#     the 30th round, as scheduled, with the exact count 10 + 30 = 40: done at step 40, checkpoint 40;
#   - a stop by signal after a part ended (same data, --num_epochs 1): SIGTERM to the server rank 0, and SIGINT
#     to worker 0 (rank 1, its part ended: a passive rank, it tells owner 0): every rank ends within 10 s, at a
#     step past 20 (after the end of worker 0's 10 steps), whose checkpoint is the latest and loads.
# Skips (77) without mpirun or without MPI in the build.
set -euo pipefail
tower=$1 fault=$2
mpi_timeout=300
source "$(dirname "$0")/mpi_common.sh"
work=$(mktemp -d)
launcher=
trap '[ -n "$launcher" ] && kill -9 "$launcher" 2>/dev/null; rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$fault" idx "$work/img300" "$work/lab300" 300
"$tower" convert --from idx --images "$work/img300" --labels "$work/lab300" --out "$work/three" --num_shards 3 >/dev/null
"$fault" idx "$work/img199" "$work/lab199" 199
"$tower" convert --from idx --images "$work/img199" --labels "$work/lab199" --out "$work/odd" --num_shards 1 >/dev/null
"$fault" idx "$work/img40" "$work/lab40" 40
"$tower" convert --from idx --images "$work/img40" --labels "$work/lab40" --out "$work/uneven-a" --num_shards 1 >/dev/null
"$fault" idx "$work/img2k" "$work/lab2k" 2000
"$tower" convert --from idx --images "$work/img2k" --labels "$work/lab2k" --out "$work/uneven-b" --num_shards 1 >/dev/null
common=(--model mnist --device cpu --num_towers 1 --batch_size 4 --min_after_dequeue 100 --no_progress --summary_every 0
        --histogram_every 0 --optimizer momentum --variable_update parameter_server --sync_replicas false --ps_dedicated)

# ended LOG RANK WORKER: the step count rank 0 logged for that worker's end of input.
ended() { sed -n "s/.*: rank $2 (worker $3): its input ended after \([0-9]*\) step(s).*/\1/p" "$1" | head -1; }

# latest_loads NAME DIR STEP: the index's latest is model.ckpt-STEP, every checkpoint loads, none partial.
latest_loads() {
  "$fault" check "$2" >"$work/check" || { cat "$work/check"; fail "$1: a checkpoint does not load"; }
  [ "$(sed -n 's/^latest //p' "$work/check")" = "$3" ] || { cat "$work/check"; fail "$1: the latest checkpoint is not $3"; }
  if grep -q "^tmp \|^orphan \|^bad " "$work/check"; then cat "$work/check"; fail "$1: a bad or partial checkpoint"; fi
}

# 1. --input_split files, 1 server + 2 workers, parts of 200 and 100 records.
t=$SECONDS
log=$work/files.log dir=$work/files
"${mpi[@]}" -np 3 "$tower" train "${common[@]}" --ps_ranks 1 --input_split files --data "$work/three-*.tfrecord" \
  --num_epochs 1 --max_staleness 2 --save_every 16 --keep_checkpoints 0 --log_every 8 --train_dir "$dir" >"$log" 2>&1 ||
  { cat "$log"; fail "files: the job failed or hung (status $?)"; }
e0=$(ended "$log" 1 0) e1=$(ended "$log" 2 1)
[ "$e0" = 50 ] && [ "$e1" = 25 ] || { cat "$log"; fail "files: the parts ended after '$e0' and '$e1' steps, want 50 and 25"; }
[ $(( (e0 + e1) * 4 )) = 300 ] || fail "files: $e0 + $e1 steps of 4 examples are not the 300 records"
grep -q "done at step 75;" "$log" || { cat "$log"; fail "files: not done at step 75 (50 + 25 worker steps)"; }
latest_loads files "$dir" 75
for s in 16 32 48 57 65 73 75; do [ -f "$dir/model.ckpt-$s" ] || { ls "$dir"; fail "files: no checkpoint $s"; }; done
"$tower" eval --checkpoint_dir "$dir" --data "$work/three-*.tfrecord" --eval_dir none >"$work/eval.log" 2>&1 ||
  { cat "$work/eval.log"; fail "files: tower eval failed"; }
grep -q "model.ckpt-75 (step 75" "$work/eval.log" || { cat "$work/eval.log"; fail "files: eval did not read step 75"; }
steps_rise files "$log" 56 64 72 # one update a round after 50
echo "files, 1 + 2: parts ended after 50 and 25 steps (300 records once), done at 75, checkpoints 16 32 48 57 65 73 75," \
  "eval reads 75 ($((SECONDS - t)) s)"

# 2. --input_split records, 2 servers + 2 workers, 199 records: parts of 100 and 99.
t=$SECONDS
log=$work/records.log dir=$work/records
"${mpi[@]}" -np 4 "$tower" train "${common[@]}" --ps_ranks 2 --input_split records --data "$work/odd-*.tfrecord" \
  --num_epochs 1 --save_every 16 --keep_checkpoints 0 --log_every 8 --train_dir "$dir" >"$log" 2>&1 ||
  { cat "$log"; fail "records: the job failed or hung (status $?)"; }
e0=$(ended "$log" 2 0) e1=$(ended "$log" 3 1)
[ "$e0" = 25 ] && [ "$e1" = 24 ] || { cat "$log"; fail "records: the parts ended after '$e0' and '$e1' steps, want 25 and 24"; }
grep -q "done at step 49;" "$log" || { cat "$log"; fail "records: not done at step 49"; }
latest_loads records "$dir" 49
for s in 16 32 48 49; do [ -f "$dir/model.ckpt-$s" ] || { ls "$dir"; fail "records: no checkpoint $s"; }; done
echo "records, 2 + 2: parts of 100 and 99 records ended after 25 and 24 steps, done at 49, checkpoint 49 loads" \
  "($((SECONDS - t)) s)"

# 3. --max_steps after a part ended: 30 rounds as scheduled, 10 + 30 updates.
t=$SECONDS
log=$work/max.log dir=$work/max
"${mpi[@]}" -np 3 "$tower" train "${common[@]}" --ps_ranks 1 --input_split files --data "$work/uneven-*.tfrecord" \
  --num_epochs 1 --max_steps 60 --log_every 10 --train_dir "$dir" >"$log" 2>&1 || { cat "$log"; fail "max_steps: the job failed"; }
[ "$(ended "$log" 1 0)" = 10 ] || { cat "$log"; fail "max_steps: worker 0's 40 records did not end after 10 steps"; }
grep -q "done at step 40;" "$log" || { cat "$log"; fail "max_steps: not done at step 40 (10 + 30)"; }
latest_loads max_steps "$dir" 40
echo "--max_steps 60 with worker 0's part ended after 10: done at 40 = 10 + 30 rounds ($((SECONDS - t)) s)"

# 4. A stop by signal after worker 0's part ended (mpirun itself the launcher: mpi_stop_job finds the ranks among its
# children, and bounds the waits itself).
mpi=(mpirun --oversubscribe --bind-to none)
stop_run() {
  local name=$1 sig=$2 target=$3 want=$4
  t=$SECONDS
  mpi_stop_job "$name" "$sig" "$target" "$want" 1 "$fault" "its input ended after" 3 "${common[@]}" --ps_ranks 1 \
    --input_split files --data "$work/uneven-*.tfrecord" --num_epochs 1 --save_every 0 --log_every 1
  [ "$mpi_stop_step" -gt 20 ] || fail "$name: stopped at step $mpi_stop_step, not after worker 0's 10 steps"
  [ "$(ended "$work/$name.log" 1 0)" = 10 ] || { cat "$work/$name.log"; fail "$name: worker 0's part did not end after 10"; }
  echo "$name: SIG$sig to rank $target after worker 0's part ended: every rank stopped at step $mpi_stop_step within" \
    "$mpi_stop_sec s, model.ckpt-$mpi_stop_step loads ($((SECONDS - t)) s)"
}
stop_run term-server0 TERM 0 SIGTERM
stop_run int-ended-worker INT 1 "another rank"
