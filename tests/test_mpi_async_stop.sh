#!/usr/bin/env bash
# test_mpi_async_stop.sh TOWER FAULT_HELPER — a stop by signal under the
# asynchronous parameter servers (--sync_replicas false) with --save_every 0,
# where the ranks never meet before the end: the request travels with the
# pushes and every worker stops after the same worker step
# (train/mode_ps_async.c, trainer_ranks_stop).
#   - SIGINT to every rank's process, 2 ranks: the job ends within 10 s;
#     rank 0 says "stop requested by SIGINT after step N", finishes at step
#     N, and model.ckpt-N is the index's latest and loads.  Not SIGINT to
#     mpirun: Open MPI 4.1 forwards it as SIGTERM and sends SIGKILL 1 s later
#     (odls_base_sigkill_timeout), before an asynchronous job's last steps and
#     save on a loaded machine (docs/hosts.md);
#   - SIGTERM to rank 2 alone of 3 (not a parameter server: --ps_ranks 2),
#     --max_staleness 0: rank 0 says "stop requested by another rank after
#     step N" with N a multiple of 3 (every worker made the same steps), the
#     job ends within 10 s, model.ckpt-N loads;
#   - the same to rank 1 of 2 at the default --max_staleness 16;
#   - no process of the job is left.
# Skips (77) without mpirun or without MPI in the build.
set -euo pipefail
tower=$1 helper=$2
source "$(dirname "$0")/mpi_common.sh"
work=$(mktemp -d)
launcher=
trap '[ -n "$launcher" ] && kill -9 "$launcher" 2>/dev/null; rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
t0=$(date +%s)
"$helper" idx "$work/img" "$work/lab" 2000
"$tower" convert --from idx --images "$work/img" --labels "$work/lab" --out "$work/data" --num_shards 2 >/dev/null
common=(--model mnist --data "$work/data-*.tfrecord" --device cpu --num_towers 1 --batch_size 4 --min_after_dequeue 100
        --log_every 1 --summary_every 0 --histogram_every 0 --no_progress --optimizer momentum
        --variable_update parameter_server --sync_replicas false --save_every 0 --max_steps 100000000)

# stop_run NAME NP SIGNAL TARGET_RANK WANT_LINE [FLAGS...]: the job on NP ranks, SIGNAL after step 12 to every
# rank's process (TARGET_RANK "all") or to one rank's, and the stop's checks (mpi_common.sh's mpi_stop_job).
stop_run() {
  local name=$1 np=$2 sig=$3 target=$4 want=$5
  shift 5
  mpi_stop_job "$name" "$sig" "$target" "$want" "$np" "$helper" "step 1[2-9][0-9]*, loss\|step [2-9][0-9][0-9]*, loss" \
    "$np" "${common[@]}" "$@"
  echo "$name: SIG$sig to $( [ "$target" = all ] && echo "every rank" || echo "rank $target") after step 12: every rank" \
    "stopped at step $mpi_stop_step within $mpi_stop_sec s, model.ckpt-$mpi_stop_step loads"
}

stop_run int-all 2 INT all SIGINT
stop_run term-rank2 3 TERM 2 "another rank" --ps_ranks 2 --max_staleness 0
stop_run term-rank1 2 TERM 1 "another rank"
echo "asynchronous stop by signal: all checks passed ($(( $(date +%s) - t0 )) s)"
