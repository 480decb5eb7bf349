#!/usr/bin/env bash
# run_ranks_bench.sh [TOWER] [OUT_DIR] — the ranks dimension of `tower bench`
# (issue 17): `mpirun -np R tower bench --modes ps_mpi,replicated_mpi,ps_mpi_async` at
# R = 1, 2, 4 ranks on loopback (one machine), every rank with --towers CPU
# towers, then one table of every run's rows: the job's images/sec, rank 0's
# phases, the MPI parts timed alone and the cost model's network time from
# the ping-pong measured in the same run; the asynchronous rows (ps_mpi_async,
# --sync_replicas false) their staleness too (mean/max updates).
# Environment: MODELS (default mnist,resnet20), MODES (ps_mpi,replicated_mpi,ps_mpi_async), TOWERS (1), BATCH (16),
# STEPS (5), WARMUP (1), RANKS ("1 2 4"), PS_DEDICATED (N: tower bench --ps_dedicated N, the
# parameter-server rows with the first N ranks as servers only, at every R > N; default none); MPIRUN (default mpirun: the
# launcher, which bench/run_netns_bench.sh sets to start the ranks in network
# namespaces joined by rate-limited links).  Ranks on one host share its cores:
# the figures show what the exchange costs, not what more hosts would add.
# Not a test: it asserts nothing (tests/test_bench_ranks.sh checks the rows).
set -euo pipefail
tower=${1:-build/cmd/tower}
out=${2:-bench_ranks_out}
mkdir -p "$out"
command -v mpirun >/dev/null || { echo "run_ranks_bench.sh: mpirun is missing (apt-get install openmpi-bin)"; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=${OMPI_MCA_btl:-self,vader,tcp}
for r in ${RANKS:-1 2 4}; do
  dedicated=()
  [ -n "${PS_DEDICATED:-}" ] && [ "$r" -gt "${PS_DEDICATED}" ] && dedicated=(--ps_dedicated "$PS_DEDICATED")
  echo "== mpirun -np $r tower bench ${dedicated[*]} ($(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg))"
  ${MPIRUN:-mpirun} --oversubscribe --bind-to none -np "$r" "$tower" bench --device cpu --models "${MODELS:-mnist,resnet20}" \
    --modes "${MODES:-ps_mpi,replicated_mpi,ps_mpi_async}" --towers "${TOWERS:-1}" --batch_size "${BATCH:-16}" --steps "${STEPS:-5}" \
    --warmup "${WARMUP:-1}" "${dedicated[@]}" --csv "$out/ranks_$r.csv" --svg "" | tee "$out/ranks_$r.log" | sed -n '/^ranks: /,/^(img/p' | head -2
done
python3 - "$out" ${RANKS:-1 2 4} <<'PY'
import csv, sys
out, ranks = sys.argv[1], sys.argv[2:]
print(f"\n{'model':9}{'mode':16}{'ranks':>6}{'srv':>4}{'towers':>7}{'batch':>6}{'img/s':>9}{'step ms':>9}{'fwd+bwd':>9}"
      f"{'reduce':>8}{'apply':>8}{'loc avg':>9}{'push':>7}{'pull':>7}{'gather':>8}{'net model':>10}{'stale':>11}")
def f(v): return f"{float(v):.2f}" if v else "-"
def srv(row): return row.get("ps_dedicated_ranks") if row.get("ps_dedicated_ranks", "0") not in ("", "0") else "-"
def stale(row): return f"{float(row['staleness_mean']):.2f}/{float(row['staleness_max']):.0f}" if row["staleness_mean"] else "-"
for r in ranks:
    for row in csv.DictReader(open(f"{out}/ranks_{r}.csv")):
        print(f"{row['model']:9}{row['mode']:16}{row['ranks']:>6}{srv(row):>4}{row['towers']:>7}{row['global_batch']:>6}"
              f"{float(row['images_per_sec']):9.1f}{float(row['step_ms_median']):9.1f}{float(row['compute_ms']):9.2f}"
              f"{float(row['reduce_ms']):8.2f}{float(row['apply_ms']):8.2f}{f(row['local_avg_ms']):>9}{f(row['push_ms']):>7}"
              f"{f(row['pull_ms']):>7}{f(row['allgather_ms']):>8}{f(row['network_predicted_ms']):>10}"
              f"{stale(row):>11}")
print("(img/s: the job's; phases: rank 0's medians in ms; loc avg, push, pull, gather: timed alone after each configuration; "
      "net model: the cost model's network ms from the ping-pong; stale: ps_mpi_async's staleness, mean/max updates; "
      "srv: server-only ranks (PS_DEDICATED), whose rows give the first worker's phases)")
PY
