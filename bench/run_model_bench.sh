#!/bin/sh
# run_model_bench.sh — Tower's CPU models beside PyTorch, side by side.
#
# Where it sits: bench/; runs bench/bench_model (forward+backward, model/)
# and bench/pytorch_model.py (forward+backward+SGD step, and forward+backward
# alone) as separate processes, N rounds, interleaved per configuration with
# the order alternating each round, so that both see the same machine load.
# Prints one table: per model and batch, the median over the N processes of
# each process's median img/s, the min-max of those process medians, and the
# ratio of the medians.  Not a test.
#
# usage: bench/run_model_bench.sh [build_dir] [n_rounds] [threads] [reps]
#   build_dir defaults to build (needs bench/bench_model built there),
#   n_rounds 3, threads 2, reps (timed steps per process) 20.
set -eu
cd "$(dirname "$0")/.."
BUILD=${1:-build}
N=${2:-3}
T=${3:-2}
REPS=${4:-20}
PY=/usr/bin/python3
BIN="$BUILD/bench/bench_model"
if [ ! -x "$BIN" ]; then
    echo "run_model_bench.sh: $BIN not found (build the bench_model target first)" >&2
    exit 1
fi
if ! "$PY" -c "import torch" 2>/dev/null; then
    echo "run_model_bench.sh: $PY cannot import torch (install python3-torch)" >&2
    exit 1
fi
OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
round=1
while [ "$round" -le "$N" ]; do
    for model in mnist cifar10; do
        for batch in 64 128; do
            ours="$BIN --model $model --batch $batch --threads $T --reps $REPS"
            torch="$PY bench/pytorch_model.py --model $model --batch $batch --threads $T --reps $REPS"
            torch_ns="$torch --no_step"
            if [ $((round % 2)) -eq 1 ]; then order="ours torch torch_ns"; else order="torch_ns torch ours"; fi
            for which in $order; do
                eval "cmd=\$$which"
                $cmd | grep '^RESULT' >>"$OUT"
            done
        done
    done
    round=$((round + 1))
done
echo "# load at end: $(cut -d' ' -f1-3 /proc/loadavg)"
"$PY" - "$OUT" "$T" <<'EOF'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    kv = dict(f.split("=", 1) for f in line.split()[1:])
    rows.setdefault((kv["model"], int(kv["batch"]), kv["framework"]), []).append(float(kv["img_s"]))
def cell(v):
    return "%.0f (%.0f-%.0f)" % (statistics.median(v), min(v), max(v)) if v else "-"
print("\nimg/s at %s threads: median of the per-process medians (min-max of those), %d processes each"
      % (sys.argv[2], max(len(v) for v in rows.values())))
print("| model | batch | Tower fwd+bwd | PyTorch fwd+bwd+step | PyTorch fwd+bwd | Tower / PyTorch (step) | Tower / PyTorch (fwd+bwd) |")
print("|---|---|---|---|---|---|---|")
for model in ("mnist", "cifar10"):
    for batch in (64, 128):
        t = rows.get((model, batch, "tower"), [])
        p = rows.get((model, batch, "pytorch"), [])
        q = rows.get((model, batch, "pytorch_nostep"), [])
        r1 = "%.2fx" % (statistics.median(t) / statistics.median(p)) if t and p else "-"
        r2 = "%.2fx" % (statistics.median(t) / statistics.median(q)) if t and q else "-"
        print("| %s | %d | %s | %s | %s | %s | %s |" % (model, batch, cell(t), cell(p), cell(q), r1, r2))
EOF
