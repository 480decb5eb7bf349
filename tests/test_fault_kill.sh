#!/usr/bin/env bash
# test_fault_kill.sh TOWER HELPER [N_KILLS] — kill -9 a training run N_KILLS
# times (50 by default, seed TOWER_FAULT_SEED), checkpoints written every 1-3
# steps: every other kill at a random moment, the others the moment a
# checkpoint's temporary file appears, so that many land inside a checkpoint
# write.  After every kill:
#   - every file under a final name (model.ckpt-N, the `checkpoint` index)
#     loads with its CRC checked (HELPER check), whatever was in flight;
#   - `tower export` loads the latest checkpoint, as eval would;
#   - the next `tower train --resume` continues from exactly the latest
#     checkpoint the index names, and never goes back (global step >= the last
#     one saved).
# Temporary files (*.tmp) left by a kill are counted: kills inside a write are
# what the test is about, so it fails unless enough of them landed there.
# A last run goes to the end, eval reads its checkpoint, and the leftovers
# of the interrupted writes (temporary files, checkpoints the index does not
# list) are gone: at most --keep_checkpoints checkpoints remain.
set -euo pipefail
tower=$1
helper=$2
n_kills=${3:-50}
work=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# A small synthetic set: 4000 examples in 2 files.
"$helper" idx "$work/img" "$work/lab" 4000
"$tower" convert --from idx --images "$work/img" --labels "$work/lab" --out "$work/data" --num_shards 2 >/dev/null
dir=$work/train
common=(--model mnist --data "$work/data-*.tfrecord" --train_dir "$dir" --device cpu --num_towers 2 --batch_size 4
        --min_after_dequeue 100 --keep_checkpoints 2 --log_every 1 --summary_every 5 --histogram_every 20 --no_progress)
"$tower" train "${common[@]}" --max_steps 2 --save_every 1 >"$work/first.log" || fail "the first run failed"
"$helper" check "$dir" >"$work/check" || { cat "$work/check"; fail "checkpoints after a clean run"; }
last=$(sed -n 's/^latest //p' "$work/check")
[ "$last" = 2 ] || fail "the first run's latest checkpoint is step $last, not 2"

RANDOM=${TOWER_FAULT_SEED:-$$}
echo "seed $RANDOM"
in_write=0 orphans=0
start=$SECONDS
for i in $(seq 1 "$n_kills"); do
  save_every=$((1 + RANDOM % 3))
  # Leftovers of the previous kill go, so that a .tmp after this kill is this run's
  # (the trainer's own clean-up of them is checked after the last kill).
  rm -f "$dir"/*.tmp
  # The log goes first: the background run truncates it only once it starts,
  # and the wait below must not read the previous run's resume line.
  rm -f "$work/run.log"
  "$tower" train "${common[@]}" --max_steps 1000000 --save_every $save_every --resume >"$work/run.log" 2>&1 &
  pid=$!
  # The resume line comes before the first step: wait for it, then the moment to kill.
  # A loaded CI machine may take seconds to start a CUDA-linked binary: wait
  # while the run is alive, up to 120 s.
  deadline=$((SECONDS + 120))
  until grep -qs "resumed from .* at step [0-9]*$" "$work/run.log"; do
    kill -0 $pid 2>/dev/null || { cat "$work/run.log" 2>/dev/null; fail "kill $i: the run ended before it resumed"; }
    [ $SECONDS -lt $deadline ] || { cat "$work/run.log" 2>/dev/null; fail "kill $i: no 'resumed from' line in 120 s"; }
    sleep 0.02
  done
  grep -q "resumed from $dir/model.ckpt-$last at step $last\$" "$work/run.log" ||
    { cat "$work/run.log"; fail "kill $i: did not resume from model.ckpt-$last (the latest the index named)"; }
  if [ $((i % 2)) -eq 0 ]; then
    # Every other kill hunts a write in flight: the moment a temporary file appears.
    deadline=$((SECONDS + 30))
    until compgen -G "$dir/*.tmp" >/dev/null; do
      [ $SECONDS -lt $deadline ] || fail "kill $i: no checkpoint write seen in 30 s"
    done
  else
    sleep "0.$(printf '%03d' $((RANDOM % 1000)))"
  fi
  kill -9 $pid
  wait $pid 2>/dev/null || true
  pid=
  "$helper" check "$dir" >"$work/check" || { cat "$work/check"; fail "kill $i: a file under its final name does not load"; }
  now=$(sed -n 's/^latest //p' "$work/check")
  [ "$now" -ge "$last" ] || fail "kill $i: the latest checkpoint went back from step $last to $now"
  if grep -q '^tmp ' "$work/check"; then in_write=$((in_write + 1)); fi
  if grep -q '^orphan ' "$work/check"; then orphans=$((orphans + 1)); fi
  echo "kill $i after step $(grep -o 'step [0-9]*,' "$work/run.log" | tail -1 | tr -dc 0-9): latest $now;" \
    "$(grep '^tmp ' "$work/check" | tr '\n' ' ')"
  "$tower" export --checkpoint_dir "$dir" --out "$work/latest.safetensors" >/dev/null ||
    fail "kill $i: tower export cannot load the latest checkpoint (step $now)"
  last=$now
done
echo "$n_kills kills in $((SECONDS - start)) s: $in_write inside a checkpoint write (a .tmp left), $orphans left an unlisted checkpoint"
[ "$in_write" -ge $((n_kills / 4)) ] || fail "only $in_write of $n_kills kills landed inside a checkpoint write"

# The end: a clean run finishes, writes its checkpoint, cleans up, and eval reads it.
"$tower" train "${common[@]}" --max_steps $((last + 3)) --save_every 1 --resume >"$work/last.log" 2>&1 ||
  { cat "$work/last.log"; fail "the run after the last kill failed"; }
"$helper" check "$dir" >"$work/check" || { cat "$work/check"; fail "after the last run"; }
[ "$(sed -n 's/^latest //p' "$work/check")" = $((last + 3)) ] || fail "the last run did not end at step $((last + 3))"
if grep -q '^tmp ' "$work/check"; then cat "$work/check"; fail "temporary files left after a clean save"; fi
if grep -q '^orphan ' "$work/check"; then cat "$work/check"; fail "checkpoints the index does not list survived a clean save"; fi
n_ckpts=$(find "$dir" -maxdepth 1 -name 'model.ckpt-*' | wc -l)
[ "$n_ckpts" -le 2 ] || { ls "$dir"; fail "$n_ckpts checkpoints in the train dir after a clean save, --keep_checkpoints 2"; }
"$tower" eval --checkpoint_dir "$dir" --data "$work/data-*.tfrecord" --eval_dir none >"$work/eval.log" ||
  fail "eval of the last checkpoint"
grep -q "precision @ 1 = " "$work/eval.log" || fail "eval printed no precision"
echo "ok: $n_kills kill -9s, every checkpoint under its final name loads, --resume continued from the latest each time"
