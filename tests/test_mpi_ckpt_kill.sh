#!/usr/bin/env bash
# test_mpi_ckpt_kill.sh TOWER FAULT_HELPER [N_KILLS] — checkpoints of --variable_update parameter_server across
# MPI ranks (ps_mpi, --checkpoint_writers owners: each parameter-server rank writes its shard's file, rank 0
# the manifest and then the index) under kill -9 (docs/hosts.md; issue 17 asks for 20 kills):
#   - a clean 2-rank run writes model.ckpt-N as shards plus a manifest, and the index names it;
#   - N_KILLS times (20 by default, seed TOWER_FAULT_SEED), a 2-rank run with --save_every 1 --resume is killed
#     (kill -9 of rank 0 or rank 1 in turn; every other kill the moment a temporary file appears in the
#     train dir, so that many land inside a save): mpirun ends within 10 s; afterwards every checkpoint the
#     index names loads (FAULT_HELPER check: shards joined, CRCs checked), the latest never goes back, and the
#     next run resumes from exactly it.  Every fifth run is asynchronous (--sync_replicas false: rank 0
#     writes the whole checkpoint after the ranks meet), resuming from the sharded one and resumed from;
#     each run is killed within a few of its steps, so a round costs about the job's start (2-4 s here);
#   - at the end one process (no mpirun) resumes from the latest sharded checkpoint and `tower export` reads it.
# Skips (77) without mpirun or without MPI in the build.
set -euo pipefail
tower=$1 helper=$2 n_kills=${3:-20}
source "$(dirname "$0")/mpi_common.sh"
work=$(mktemp -d)
launcher=
trap '[ -n "$launcher" ] && kill -9 "$launcher" 2>/dev/null; rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
"$helper" idx "$work/img" "$work/lab" 2000
"$tower" convert --from idx --images "$work/img" --labels "$work/lab" --out "$work/data" --num_shards 2 >/dev/null
dir=$work/train
common=(--model mnist --data "$work/data-*.tfrecord" --train_dir "$dir" --device cpu --num_towers 1 --batch_size 4
        --min_after_dequeue 100 --keep_checkpoints 2 --log_every 1 --summary_every 0 --histogram_every 0 --no_progress
        --optimizer momentum)
"${mpi[@]}" -np 2 "$tower" train "${common[@]}" --max_steps 2 --save_every 1 >"$work/first.log" 2>&1 ||
  { cat "$work/first.log"; fail "the first run failed"; }
[ -f "$dir/model.ckpt-2.shards" ] && [ -f "$dir/model.ckpt-2.shard-00000-of-00002" ] &&
  [ -f "$dir/model.ckpt-2.shard-00001-of-00002" ] && [ ! -e "$dir/model.ckpt-2" ] ||
  { ls "$dir"; fail "the first run did not write model.ckpt-2 as 2 shards and a manifest"; }
"$helper" check "$dir" >"$work/check" || { cat "$work/check"; fail "checkpoints after a clean run"; }
last=$(sed -n 's/^latest //p' "$work/check")
[ "$last" = 2 ] || fail "the first run's latest checkpoint is step $last, not 2"
echo "a clean run: model.ckpt-2 in 2 shards and a manifest, the index names it, it loads"

RANDOM=${TOWER_FAULT_SEED:-$$}
echo "seed $RANDOM"
in_write=0
n_async=0
for i in $(seq 1 "$n_kills"); do
  rm -f "$dir"/*.tmp "$work/run.log"
  mode=()
  if [ $((i % 5)) = 0 ]; then mode=(--sync_replicas false); n_async=$((n_async + 1)); fi
  "${mpi[@]}" -np 2 "$tower" train "${common[@]}" "${mode[@]}" --max_steps 1000000 --save_every 1 --resume >"$work/run.log" 2>&1 &
  launcher=$!
  deadline=$((SECONDS + 120))
  until grep -qs "resumed from .* at step [0-9]*$" "$work/run.log"; do
    kill -0 $launcher 2>/dev/null || { cat "$work/run.log"; fail "kill $i: the run ended before it resumed"; }
    [ $SECONDS -lt $deadline ] || { cat "$work/run.log"; fail "kill $i: no 'resumed from' line in 120 s"; }
    sleep 0.02
  done
  grep -q "resumed from $dir/model.ckpt-$last at step $last\$" "$work/run.log" ||
    { cat "$work/run.log"; fail "kill $i: did not resume from model.ckpt-$last (the latest the index named)"; }
  want_rank=$((i % 2))
  victim=""
  for p in $(pgrep -P "$launcher" 2>/dev/null); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$want_rank" && victim=$p
  done
  [ -n "$victim" ] || fail "kill $i: could not find rank $want_rank's process"
  if [ $((i % 4)) -lt 2 ]; then
    deadline=$((SECONDS + 30))
    until compgen -G "$dir/*.tmp" >/dev/null; do
      [ $SECONDS -lt $deadline ] || fail "kill $i: no checkpoint write seen in 30 s"
    done
  else
    sleep "0.$(printf '%03d' $((RANDOM % 1000)))"
  fi
  kill -9 "$victim"
  for _ in $(seq 1 100); do kill -0 "$launcher" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$launcher" 2>/dev/null; then fail "kill $i: the job still runs 10 s after rank $want_rank was killed"; fi
  wait "$launcher" 2>/dev/null || true
  launcher=
  "$helper" check "$dir" >"$work/check" || { cat "$work/check"; fail "kill $i: a checkpoint does not load"; }
  now=$(sed -n 's/^latest //p' "$work/check")
  [ "$now" -ge "$last" ] || fail "kill $i: the latest checkpoint went back from step $last to $now"
  if grep -q '^tmp ' "$work/check"; then in_write=$((in_write + 1)); fi
  echo "kill $i (rank $want_rank${mode[*]:+, ${mode[*]}}): latest $now; $(grep '^tmp ' "$work/check" | tr '\n' ' ')"
  last=$now
done
# Half the kills wait for a temporary file, but a save can end before the kill lands (4 of 20 under load 10,
# 9 of 20 under 14): a tenth must land inside one, or the rounds did not test what they claim.
min_in_write=$(( n_kills / 10 > 1 ? n_kills / 10 : 1 ))
[ "$in_write" -ge "$min_in_write" ] || fail "only $in_write of $n_kills kills landed inside a checkpoint write (at least $min_in_write)"
echo "$n_kills kills ($n_async of asynchronous runs): $in_write inside a save (a .tmp left); every time the index named a checkpoint that loads"
"$tower" train "${common[@]/--num_towers/--num_towers}" --max_steps $((last + 2)) --save_every 1 --resume \
  >"$work/one.log" 2>&1 || { cat "$work/one.log"; fail "one process could not resume from the sharded checkpoint"; }
grep -q "resumed from $dir/model.ckpt-$last at step $last\$" "$work/one.log" || { cat "$work/one.log"; fail "one process: no resume line"; }
"$helper" check "$dir" >"$work/check" || { cat "$work/check"; fail "after the one-process run"; }
[ "$(sed -n 's/^latest //p' "$work/check")" = $((last + 2)) ] || fail "the one-process run did not end at step $((last + 2))"
"$tower" export --checkpoint_dir "$dir" --out "$work/latest.safetensors" >/dev/null || fail "tower export of the latest checkpoint"
echo "ok: one process resumed from the sharded model.ckpt-$last and ran to $((last + 2)); export reads it"
