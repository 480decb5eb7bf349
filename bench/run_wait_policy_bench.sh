#!/usr/bin/env bash
# run_wait_policy_bench.sh BUILD ROUNDS [COMPETING] [TOWER] — GNU OpenMP's wait policy, A/B:
# the runtime's default (OMP_WAIT_POLICY and GOMP_SPINCOUNT unset: spin up to 300000 times before
# sleeping) against OMP_WAIT_POLICY=passive (sleep at once), single runs interleaved, the order of
# the two alternating every round.  Two workloads, each a separate process per run:
#   bench_model --model mobilenet_v2 --size 32 --batch 64 --threads 2 --reps 5 --warmup 1
#     (one forward+backward per step on 2 OpenMP threads; img/s median of the 5 steps)
#   TOWER bench --models mobilenet_v2 --modes ps_cpu --towers 1 --batch_size 64 --steps 15 --warmup 2
#     (the trainer's step, 1 tower of 2 threads and the server's loops; img/s of the run)
# COMPETING (default 0): that many `yes >/dev/null` run alongside, as a competing load.
# TOWER (default BUILD/cmd/tower): a tower binary.  Since Tower sets OMP_WAIT_POLICY=passive itself
# when neither variable is set (cmd/main.c), the default arm means the runtime's default only for a
# binary built before that change (or bench_model, which does not set it).
# Prints one line per run: round, arm, workload, img/s, the 1-minute load average before the run.
# Indicative only: the machine is shared, and its load moves between runs.
set -euo pipefail
build=$1 rounds=$2 competing=${3:-0} tower=${4:-$1/cmd/tower}
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done' EXIT
for _ in $(seq 1 "$competing"); do yes >/dev/null & pids+=($!); done
work=$(mktemp -d)
run() { # arm workload
    local env_args=(env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT)
    [ "$1" = passive ] && env_args+=(OMP_WAIT_POLICY=passive)
    local load ips
    load=$(cut -d' ' -f1 /proc/loadavg)
    if [ "$2" = bench_model ]; then
        ips=$("${env_args[@]}" "$build/bench/bench_model" --model mobilenet_v2 --size 32 --batch 64 --threads 2 \
              --reps 5 --warmup 1 | sed -n 's/^RESULT.* img_s=\([0-9.]*\).*/\1/p')
    else
        ips=$(cd "$work" && "${env_args[@]}" "$tower" bench --models mobilenet_v2 --modes ps_cpu --towers 1 \
              --batch_size 64 --steps 15 --warmup 2 --csv "" --svg "" | awk '$1 == "mobilenet_v2" && $2 == "ps_cpu" {print $5}')
    fi
    echo "round $r  $1  $2  img/s $ips  load $load"
}
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, competing yes: $competing, load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$rounds"); do
    if [ $((r % 2)) = 1 ]; then arms="default passive"; else arms="passive default"; fi
    for w in bench_model tower_bench; do
        for a in $arms; do run "$a" "$w"; done
    done
done
rm -rf "$work"
