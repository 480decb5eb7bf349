#!/usr/bin/env bash
# test_mpi_async_dedicated.sh TOWER HELPER FAULT — --ps_dedicated with the asynchronous parameter servers
# (--sync_replicas false, train/mode_ps_async.c): ranks 0 .. N-1 only serve (a server thread each, no towers,
# no input), ranks N .. R-1 are the W workers, over loopback.
#   - 1 server + 1 worker is bitwise ps_mpi with one worker (1 server + 1 worker, synchronous: every variable,
#     slot and the step, test_mpi_ps_helper compare), mnist, momentum and adam;
#   - resnet20 (--batch_norm tower) on 1 server + 2 workers x 1 tower (momentum) and 2 servers + 2 workers x 2
#     towers (adam), 3 steps a worker: the checkpoint's moving statistics all moved from their initial values,
#     finite (the servers expect the workers' T towers' shares: a push of another size ends the job);
#   - `tower train`, 1 server + 2 workers and 2 servers + 2 workers, --max_staleness 2: the run ends at
#     --max_steps (a multiple of W), "done at step N" and the index's latest checkpoint is N (test_fault_helper
#     check: each checkpoint holds the global_step it is named for; none bad or partial),
#     saves at every --save_every, the log's global batch is W x T x batch and its staleness lines never
#     exceed the bound (W - 1)(2S + 1) = 5, and rank 0 (a server) logs the workers' losses (the first above 0.1,
#     not a server's 0);
#   - the epoch's end (--num_epochs 1 on 320 records, batch 8, 2 workers: 40 steps a worker) ends every rank,
#     the server-only ones told by the workers: "done at step 80";
#   - --resume: dedicated 1 + 2 into co-located 2 ranks, and co-located 2 ranks into dedicated 2 + 2;
#   - a stop by signal with rank 0 a server: SIGINT to every rank of 1 + 2, SIGTERM to the server rank 0 alone
#     of 1 + 2 (owner 0 fixes the stop itself), and SIGTERM to the server-only rank 1 alone of 2 + 2 (it tells
#     owner 0): every rank ends within 10 s, rank 0 finishes at the stop's step (a multiple of W), whose
#     checkpoint is the latest and loads;
#   - kill -9 of the server-only rank 1 (of 2 + 2) ends the job, non-zero, within 10 s.
# Skips (77) without mpirun or without MPI in the build.
set -euo pipefail
tower=$1 helper=$2 fault=$3
source "$(dirname "$0")/mpi_common.sh"
work=$(mktemp -d)
launcher=
trap '[ -n "$launcher" ] && kill -9 "$launcher" 2>/dev/null; rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
t0=$(date +%s)

# One worker: its gradient applied at once, what synchronous ps_mpi's one worker gets.
for opt in momentum adam; do
  mkdir -p "$work/h-sync-$opt" "$work/h-async-$opt"
  TEST_MPI_PS_DEDICATED=1 "${mpi[@]}" -x TEST_MPI_PS_DEDICATED -np 2 "$helper" train mnist "$opt" 1 3 \
    "$work/h-sync-$opt" ps_mpi 1 >"$work/h.log" 2>&1 || { cat "$work/h.log"; fail "helper ps_mpi 1 + 1 ($opt) failed"; }
  TEST_MPI_PS_DEDICATED=1 "${mpi[@]}" -x TEST_MPI_PS_DEDICATED -np 2 "$helper" train mnist "$opt" 1 3 \
    "$work/h-async-$opt" ps_mpi_async 1 >"$work/h.log" 2>&1 || { cat "$work/h.log"; fail "helper ps_mpi_async 1 + 1 ($opt) failed"; }
  grep -q "mode ps_mpi_async, 2 rank(s) x 0 tower(s), 3 steps" "$work/h.log" || { cat "$work/h.log"; fail "rank 0 is not a server-only rank"; }
  "$helper" compare "$work/h-sync-$opt/model.ckpt-3" "$work/h-async-$opt/model.ckpt-3" 0 >/dev/null ||
    fail "1 server + 1 worker, $opt: ps_mpi_async differs from ps_mpi"
done
echo "1 server + 1 worker: ps_mpi_async bitwise ps_mpi's one worker (mnist, momentum and adam)"

# Batch norm: the server-only rank applies the workers' towers' shares.
for case in "3 1 1 momentum" "4 2 2 adam"; do # R N_SERVERS TOWERS_A_WORKER OPTIMIZER
  set -- $case
  dir="$work/bn-$1-$2-$3"
  mkdir -p "$dir"
  TEST_MPI_PS_DEDICATED=1 "${mpi[@]}" -x TEST_MPI_PS_DEDICATED -np "$1" "$helper" train resnet20 "$4" "$3" 6 "$dir" \
    ps_mpi_async "$2" >"$work/bn.log" 2>&1 || { cat "$work/bn.log"; fail "resnet20, $2 server(s) + 2 workers x $3 failed"; }
  "$helper" moving "$dir/model.ckpt-6" >"$work/moving.log" ||
    { cat "$work/moving.log"; fail "resnet20, $2 server(s) + 2 workers x $3: the moving statistics did not move"; }
  echo "resnet20, $2 server(s) + 2 workers x $3 tower(s), $4 (3 steps a worker): $(cat "$work/moving.log")"
done

"$fault" idx "$work/img" "$work/lab" 2000
"$tower" convert --from idx --images "$work/img" --labels "$work/lab" --out "$work/data" --num_shards 2 >/dev/null
"$fault" idx "$work/img320" "$work/lab320" 320
"$tower" convert --from idx --images "$work/img320" --labels "$work/lab320" --out "$work/small" --num_shards 1 >/dev/null
common=(--model mnist --device cpu --num_towers 1 --batch_size 4 --min_after_dequeue 100 --no_progress --summary_every 0
        --histogram_every 0 --optimizer momentum --variable_update parameter_server --sync_replicas false)

# The run to its end: R N_SERVERS.
for case in "3 1" "4 2"; do
  set -- $case
  w=$(( $1 - $2 )) dir="$work/run-$1-$2" log="$work/run-$1-$2.log"
  "${mpi[@]}" -np "$1" "$tower" train "${common[@]}" --data "$work/data-*.tfrecord" --ps_dedicated --ps_ranks "$2" \
    --max_staleness 2 --max_steps 48 --save_every 16 --log_every 8 --log_device_placement --train_dir "$dir" >"$log" 2>&1 ||
    { cat "$log"; fail "$2 server(s) + $w workers failed"; }
  grep -q "done at step 48;" "$log" || { cat "$log"; fail "$2 + $w: not done at step 48"; }
  grep -q "global batch 8 = 2 worker rank(s) x 1 tower(s); mode ps_mpi_async" "$log" || { cat "$log"; fail "$2 + $w: no global batch line"; }
  grep -q "rank 0 is a server" "$log" || { cat "$log"; fail "$2 + $w: the log does not say rank 0 is a server"; }
  "$fault" check "$dir" >"$work/check" || { cat "$work/check"; fail "$2 + $w: a checkpoint does not load"; }
  [ "$(sed -n 's/^latest //p' "$work/check")" = 48 ] || { cat "$work/check"; fail "$2 + $w: the latest checkpoint is not 48"; }
  if grep -q "^tmp \|^orphan \|^bad " "$work/check"; then cat "$work/check"; fail "$2 + $w: a bad or partial checkpoint"; fi
  for s in 16 32 48; do [ -f "$dir/model.ckpt-$s.index" ] || [ -f "$dir/model.ckpt-$s" ] || { ls "$dir"; fail "$2 + $w: no checkpoint $s"; }; done
  n_lines=$(grep -c "staleness mean" "$log" || true)
  [ "$n_lines" -ge 5 ] || { cat "$log"; fail "$2 + $w: $n_lines staleness lines"; }
  grep "staleness mean" "$log" | sed 's/.*max \([0-9]*\) over.*(bound \([0-9]*\))/\1 \2/' | while read -r max bound; do
    [ "$bound" = 5 ] && [ "$max" -le 5 ] || fail "$2 + $w: staleness max $max, bound $bound (want at most 5 = (2 - 1)(2 x 2 + 1))"
  done
  # The memory bound counts the mode's own buffers: rank 0 (a server of a shard) holds at least the packed
  # block, the server's copy and the save gather, and the pushes out and pulls in (M floats each).
  vars_mib=$(sed -n 's/.*variables: [0-9]* floats (\([0-9.]*\) MiB).*/\1/p' "$log" | head -1)
  buf_mib=$(sed -n "s/.*ps_mpi_async's buffers \([0-9.]*\) .*/\1/p" "$log" | head -1)
  awk -v b="${buf_mib:-0}" -v v="${vars_mib:-1}" 'BEGIN { exit !(b >= 5 * v) }' ||
    { grep "memory bound" "$log"; fail "$2 + $w: the memory bound's ps_mpi_async buffers '$buf_mib' MiB, < 5 x the model's $vars_mib"; }
  first=$(grep -m1 -o 'step [0-9]*, loss = [0-9.]*' "$log" | sed 's/.*= //')
  awk -v l="${first:-0}" 'BEGIN { exit !(l > 0.1) }' || { cat "$log"; fail "$2 + $w: rank 0's first loss is '$first', not the workers'"; }
  echo "$2 server(s) + $w workers: done at step 48, checkpoints 16, 32, 48 (latest 48 loads);" \
    "$(grep "staleness mean" "$log" | tail -1 | sed 's/^[^:]*:[^:]*:[^:]*: //')"
done

# The epoch's end: the workers tell the server-only rank.
"${mpi[@]}" -np 3 "$tower" train "${common[@]}" --data "$work/small-*.tfrecord" --batch_size 4 --ps_dedicated --ps_ranks 1 \
  --num_epochs 1 --log_every 20 --train_dir "$work/epoch" >"$work/epoch.log" 2>&1 || { cat "$work/epoch.log"; fail "--num_epochs 1 failed"; }
grep -q "done at step 80;" "$work/epoch.log" || { cat "$work/epoch.log"; fail "--num_epochs 1: not done at step 80"; }
echo "--num_epochs 1, 320 records, 2 workers of batch 4: every rank done at step 80"

# --resume across layouts: 2 towers in all.
"${mpi[@]}" -np 3 "$tower" train "${common[@]}" --data "$work/data-*.tfrecord" --ps_dedicated --ps_ranks 1 --max_steps 8 \
  --log_every 4 --train_dir "$work/resume" >"$work/resume1.log" 2>&1 || { cat "$work/resume1.log"; fail "resume: 1 + 2 failed"; }
"${mpi[@]}" -np 2 "$tower" train "${common[@]}" --data "$work/data-*.tfrecord" --max_steps 16 --log_every 4 --resume \
  --train_dir "$work/resume" >"$work/resume2.log" 2>&1 || { cat "$work/resume2.log"; fail "resume: into co-located 2 ranks failed"; }
grep -q "resumed from .*model.ckpt-8 at step 8" "$work/resume2.log" || { cat "$work/resume2.log"; fail "resume: no 'resumed' line (8)"; }
"${mpi[@]}" -np 4 "$tower" train "${common[@]}" --data "$work/data-*.tfrecord" --ps_dedicated --ps_ranks 2 --max_steps 24 \
  --log_every 4 --resume --train_dir "$work/resume" >"$work/resume3.log" 2>&1 || { cat "$work/resume3.log"; fail "resume: into 2 + 2 failed"; }
grep -q "resumed from .*model.ckpt-16 at step 16" "$work/resume3.log" || { cat "$work/resume3.log"; fail "resume: no 'resumed' line (16)"; }
grep -q "done at step 24;" "$work/resume3.log" || { cat "$work/resume3.log"; fail "resume: not done at step 24"; }
"$fault" check "$work/resume" >"$work/check" || { cat "$work/check"; fail "resume: a checkpoint does not load"; }
[ "$(sed -n 's/^latest //p' "$work/check")" = 24 ] || { cat "$work/check"; fail "resume: the latest checkpoint is not 24"; }
echo "--resume: 1 server + 2 workers (8) -> co-located 2 ranks (16) -> 2 servers + 2 workers (24): loads"

# stop_run NAME NP N_SERVERS SIGNAL TARGET WANT: a stop by SIGNAL after step 10 to every rank (TARGET all) or one
# (mpi_common.sh's mpi_stop_job).
stop_run() {
  local name=$1 np=$2 n=$3 sig=$4 target=$5 want=$6 w=$(( $2 - $3 ))
  mpi_stop_job "$name" "$sig" "$target" "$want" "$w" "$fault" "step [1-9][0-9][0-9]*, loss" "$np" "${common[@]}" \
    --data "$work/data-*.tfrecord" --ps_dedicated --ps_ranks "$n" --save_every 0 --log_every 1 --max_steps 100000000
  echo "$name: SIG$sig to $( [ "$target" = all ] && echo "every rank" || echo "rank $target") of $n server(s) + $w workers:" \
    "every rank stopped at step $mpi_stop_step within $mpi_stop_sec s, model.ckpt-$mpi_stop_step loads"
}
stop_run int-all 3 1 INT all SIGINT
stop_run term-server0 3 1 TERM 0 SIGTERM
stop_run term-server1 4 2 TERM 1 "another rank"

# kill -9 of the server-only rank 1: the job ends, non-zero, within 10 s.
"${mpi[@]}" -np 4 "$tower" train "${common[@]}" --data "$work/data-*.tfrecord" --ps_dedicated --ps_ranks 2 --max_steps 100000000 \
  --log_every 0 --train_dir "$work/killed" >"$work/kill.log" 2>&1 &
launcher=$!
victim=""
for _ in $(seq 1 300); do victim=$(mpi_rank_pid 1); [ -n "$victim" ] && break; sleep 0.1; done
[ -n "$victim" ] || fail "could not find rank 1's process"
sleep 4
kill -9 "$victim"
for _ in $(seq 1 100); do kill -0 "$launcher" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$launcher" 2>/dev/null; then fail "the job still runs 10 s after the server rank 1 was killed"; fi
rc=0
wait "$launcher" || rc=$?
launcher=
[ "$rc" != 0 ] || fail "the job exited 0 after the server rank 1 was killed"
echo "kill -9 of the server-only rank 1: the job ended with exit $rc"
echo "asynchronous dedicated parameter servers: all checks passed ($(( $(date +%s) - t0 )) s)"
