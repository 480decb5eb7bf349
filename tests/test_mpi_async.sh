#!/usr/bin/env bash
# test_mpi_async.sh TOWER HELPER EVENTS — asynchronous parameter servers
# (--sync_replicas false, train/mode_ps_async.c) across MPI ranks on loopback:
#   - one worker: ps_mpi_async is bitwise ps_mpi (one process of 2 towers,
#     adam; and under mpirun -np 1, momentum), through tests/test_mpi_ps_helper;
#   - bad flags refused with one line: --sync_replicas false in one process,
#     with --variable_update replicated, --max_staleness -1;
#   - 4 ranks x 1 tower on Fashion-MNIST, sgd: asynchronous (1600 applied
#     updates of 16 examples, learning rate 0.05; its checkpoint at step
#     1600) reaches a test precision at most 3.5 points below synchronous
#     (400 steps of 4 x 16, learning rate 0.2): the same examples, the same
#     learning rate per example.  Both ends move: async's with its arrival
#     order, 23 runs on the 2-core development machine (2026-11-27, RESULTS)
#     scored 0.805 to 0.832, two near 0.805, and CI saw 0.803 and
#     0.804 (each failing the 2-point check this test had); sync's with the
#     seed, 0.811 to 0.828 over seeds 1, 2, 3 and 7 (0.826).  One worker's
#     quarter of the updates alone reaches 0.733, half of them 0.784: both
#     below the bound.  (After 6400 examples, on the steep part of the
#     curve, async scored 0.619 to 0.694 against 0.662: hence 25600);
#   - the staleness lines of rank 0's log: max never above their bound
#     (R - 1)(2S + 1); --max_staleness 0 is lockstep: max at most R - 1 = 3;
#   - --num_epochs_per_decay decays after the same examples as a synchronous
#     run: an applied update carries one worker's batch, so with 640
#     examples an epoch, decays every half epoch = 20 updates of 16: the
#     learning_rate scalars rank 0 writes (read back by EVENTS, the
#     test_events binary) of the lockstep run at steps 8 .. 48;
#   - on a terminal (script's pty) the progress line reaches 100% at the
#     last update (it counts the run in one worker's batches too);
#   - --save_every + --resume: the checkpoint of step 8 is resumed to 16;
#   - kill -9 of rank 1 mid-run ends the job, non-zero, within 10 s.
# Skips (77) without mpirun, MPI in the build, or the data.
source "$(dirname "$0")/train_common.sh"
helper=$2
events=$3
source "$(dirname "$0")/mpi_common.sh"
t0=$(date +%s)

# (a) One worker: its gradient applied at once, ps_cpu's arithmetic.
mkdir -p "$work/h-sync" "$work/h-async" "$work/h-sync1" "$work/h-async1"
"$helper" train mnist adam 2 3 "$work/h-sync" ps_mpi >/dev/null || fail "helper ps_mpi failed"
"$helper" train mnist adam 2 3 "$work/h-async" ps_mpi_async >/dev/null || fail "helper ps_mpi_async failed"
cmp "$work/h-sync/model.ckpt-3" "$work/h-async/model.ckpt-3" || fail "one process, 2 towers: ps_mpi_async differs from ps_mpi"
"${mpi[@]}" -np 1 "$helper" train mnist momentum 1 3 "$work/h-sync1" ps_mpi >/dev/null || fail "mpirun -np 1 ps_mpi failed"
"${mpi[@]}" -np 1 "$helper" train mnist momentum 1 3 "$work/h-async1" ps_mpi_async >/dev/null || fail "mpirun -np 1 ps_mpi_async failed"
cmp "$work/h-sync1/model.ckpt-3" "$work/h-async1/model.ckpt-3" || fail "mpirun -np 1: ps_mpi_async differs from ps_mpi"
echo "one worker: ps_mpi_async bitwise ps_mpi (1 process x 2 towers, adam; mpirun -np 1, momentum)"

convert_fashion_mnist
common=(--model mnist --data "$work/train-*.tfrecord" --batch_size 16 --seed 7 --save_every 1000 --min_after_dequeue 500
        --device cpu --no_progress --summary_every 0 --histogram_every 0 --num_towers 1 --optimizer sgd)

# (d) Bad flags: one line each, non-zero.
refused "--sync_replicas false in one process" "--sync_replicas false: asynchronous updates need --variable_update parameter_server across the ranks" \
  "$tower" train "${common[@]}" --sync_replicas false --max_steps 1 --train_dir "$work/r1"
refused "--sync_replicas false with replicated" "this run is --variable_update replicated on 2 rank" \
  "${mpi[@]}" -np 2 "$tower" train "${common[@]}" --variable_update replicated --sync_replicas false --max_steps 1 --train_dir "$work/r2"
refused "--max_staleness -1" "max_staleness" "$tower" train "${common[@]}" --max_staleness -1 --max_steps 1 --train_dir "$work/r3"

# (c) Staleness: every line's max within its bound.
staleness_ok() { # staleness_ok LOG MAX_ALLOWED: prints the last line; fails beyond MAX_ALLOWED or without lines
  local log=$1 allowed=$2
  grep -q "staleness mean" "$log" || { cat "$log"; fail "$log: no staleness line"; }
  grep "staleness mean" "$log" | sed 's/.*max \([0-9]*\) over.*(bound \([0-9]*\))/\1 \2/' | while read -r max bound; do
    [ "$max" -le "$bound" ] && [ "$max" -le "$allowed" ] || fail "staleness max $max beyond its bound $bound (or $allowed)"
  done
  grep "staleness mean" "$log" | tail -1 | sed 's/^[^:]*:[^:]*:[^:]*: //'
}
"${mpi[@]}" -np 4 "$tower" train "${common[@]}" --learning_rate 0.05 --sync_replicas false --max_staleness 0 \
  --max_steps 48 --log_every 8 --summary_every 8 --num_examples_per_epoch 640 --num_epochs_per_decay 0.5 \
  --train_dir "$work/lockstep" >"$work/lockstep.log" 2>&1 ||
  { cat "$work/lockstep.log"; fail "--max_staleness 0 run failed"; }
echo "--max_staleness 0 at 4 ranks (lockstep): $(staleness_ok "$work/lockstep.log" 3)"

# (e) The learning rate decays after the same examples as in a synchronous run (320 of them): every 20 updates.
# Rank 0 writes after its round k (step 4k), when the owners may have applied up to 3 of round k + 1 (lockstep
# lets a worker on once every worker pushed round k): no step below is within 3 of a multiple of 20.
lr_seen=$("$events" scalars "$work/lockstep" learning_rate) || fail "reading the lockstep run's events: $lr_seen"
lr_want=$(printf '%s\n' "8 0.05" "16 0.05" "24 0.005" "32 0.005" "40 0.0005" "48 0.0005")
[ "$(echo "$lr_seen" | awk '{ print $1 }')" = "$(echo "$lr_want" | awk '{ print $1 }')" ] ||
  fail "learning_rate summaries at steps $(echo $lr_seen | tr '\n' ' '), expected 8, 16, .., 48"
paste -d ' ' <(echo "$lr_seen") <(echo "$lr_want") | awk '{ if ($2 < $4 * 0.999999 || $2 > $4 * 1.000001) {
  printf "step %d: learning_rate %s, expected %s\n", $1, $2, $4; bad = 1 } } END { exit bad }' ||
  fail "--num_epochs_per_decay 0.5 of 640 examples: not every 20 updates of 16"
echo "--num_epochs_per_decay: the learning rate falls tenfold every 20 updates of 16 examples (steps 8-48)"

# (b) Convergence: the same examples, the same learning rate per example.
"${mpi[@]}" -np 4 "$tower" train "${common[@]}" --learning_rate 0.2 --max_steps 400 --log_every 100 \
  --train_dir "$work/sync" >"$work/sync.log" 2>&1 || { cat "$work/sync.log"; fail "synchronous run failed"; }
"${mpi[@]}" -np 4 "$tower" train "${common[@]}" --learning_rate 0.05 --sync_replicas false --max_staleness 4 \
  --max_steps 1600 --log_every 160 --train_dir "$work/async" >"$work/async.log" 2>&1 ||
  { cat "$work/async.log"; fail "asynchronous run failed"; }
echo "--max_staleness 4 at 4 ranks: $(staleness_ok "$work/async.log" 27)"
precision() { "$tower" eval --checkpoint_dir "$1" --data "$work/test-*.tfrecord" --eval_dir none --no_progress 2>&1 |
  sed -n 's/.*precision @ 1 = \([0-9.]*\).*/\1/p'; }
ps=$(precision "$work/sync")
pa=$(precision "$work/async")
[ -n "$ps" ] && [ -n "$pa" ] || fail "no precision from eval (sync '$ps', async '$pa')"
[ -f "$work/async/model.ckpt-1600" ] || { ls "$work/async"; fail "no asynchronous checkpoint at step 1600"; }
awk -v s="$ps" -v a="$pa" 'BEGIN { exit !(s > 0.5 && a > 0.5 && s - a <= 0.035) }' ||
  fail "asynchronous precision $pa is more than 3.5 points below synchronous $ps (or one did not learn)"
echo "Fashion-MNIST, 4 ranks x 1 tower, 25600 examples: synchronous precision $ps, asynchronous $pa"

# Checkpoint and resume: 8 applied updates (2 steps a worker), saved at 4 and 8, resumed to 16.
"${mpi[@]}" -np 4 "$tower" train "${common[@]}" --learning_rate 0.05 --sync_replicas false --max_steps 8 --save_every 4 \
  --log_every 4 --train_dir "$work/resume" >"$work/resume1.log" 2>&1 || { cat "$work/resume1.log"; fail "first 8 updates failed"; }
[ -f "$work/resume/model.ckpt-4" ] && [ -f "$work/resume/model.ckpt-8" ] || { ls "$work/resume"; fail "no checkpoints at 4 and 8"; }
"${mpi[@]}" -np 4 "$tower" train "${common[@]}" --learning_rate 0.05 --sync_replicas false --max_steps 16 --save_every 4 \
  --log_every 4 --resume --train_dir "$work/resume" >"$work/resume2.log" 2>&1 || { cat "$work/resume2.log"; fail "--resume failed"; }
grep -q "resumed from .*model.ckpt-8 at step 8" "$work/resume2.log" || { cat "$work/resume2.log"; fail "no 'resumed' line"; }
[ -f "$work/resume/model.ckpt-16" ] || fail "no checkpoint at 16 after --resume"
"$tower" eval --checkpoint "$work/resume/model.ckpt-16" --data "$work/test-*.tfrecord" --eval_dir none --no_progress \
  >/dev/null 2>&1 || fail "the resumed checkpoint does not load"
echo "checkpoints at 4, 8; --resume from 8 to 16: loads"

# (f) The progress line on a terminal (Open MPI gives the ranks script's pty) counts the run in updates of one
# worker's batch: 100% after the last (counted in global batches, it ended at 25%).
if command -v script >/dev/null 2>&1; then
  bar_args=()
  for a in "${common[@]}"; do [ "$a" = --no_progress ] || bar_args+=("$a"); done
  script -qec "$(printf '%q ' "${mpi[@]}" -np 4 "$tower" train "${bar_args[@]}" --learning_rate 0.05 \
    --sync_replicas false --max_steps 48 --log_every 0 --train_dir "$work/bar")" /dev/null >"$work/bar.out" 2>&1 </dev/null ||
    { cat "$work/bar.out"; fail "the run on a terminal failed"; }
  last=$(tr '\r' '\n' <"$work/bar.out" | grep -a '%|' | tail -1)
  case "$last" in *" 100%|"*"step 48,"*) ;; *) fail "the progress line's last state: '$last', expected 100% at step 48" ;; esac
  echo "the progress line on a terminal: 100% at step 48"
fi

# A killed rank ends the job.
"${mpi[@]}" -np 2 "$tower" train "${common[@]}" --learning_rate 0.05 --sync_replicas false --max_steps 100000 --log_every 0 \
  --train_dir "$work/killed" >"$work/kill.log" 2>&1 &
launcher=$!
mpi_kill_rank 1 5
echo "kill -9 of rank 1: the job ended with exit $killed_rc"
echo "asynchronous parameter servers: all checks passed ($(( $(date +%s) - t0 )) s)"
