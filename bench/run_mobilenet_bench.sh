#!/bin/sh
# run_mobilenet_bench.sh — mobilenet_v2's CPU training step, Tower beside Keras (and PyTorch where a
# python with torch is found), side by side.
#
# Where it sits: bench/; runs bench/bench_model (Tower: forward + backward; its optimizer runs in ps/)
# and bench/peer_nets.py --model mobilenet_v2 (Keras: tf.keras.applications.MobileNetV2 in a tf.function; PyTorch: the
# same layout as a module) with --no_step, so all time forward + backward, as separate processes, N
# rounds, interleaved per configuration with the order alternating each round, so that every framework
# sees the same machine load.  Prints one line per run and a table of medians of the processes' medians
# (min-max of those medians) per input size.  Not a test.
#
# usage: bench/run_mobilenet_bench.sh [build_dir] [n_rounds] [threads] [reps] [sizes]
#   build_dir build (needs bench/bench_model), n_rounds 3, threads 2, reps 10, sizes "32 96";
#   batch 64, width 1.0.  Keras: TOWER_PYTHON (default ~/.cache/tower/interop-venv/bin/python, made by
#   scripts/test.sh); PyTorch: PEER_TORCH_PYTHON (default python3), skipped when it cannot import torch.
#   TOWER_BASE_BUILD: a second build (e.g. of the commit before a change) run the same way in the same
#   rounds, reported as tower_base, for before/after figures under the same load.
#   The header line prints OMP_WAIT_POLICY: on a loaded machine GNU OpenMP's default spinning makes
#   Tower's 2-thread step collapse (bench/RESULTS.md); export OMP_WAIT_POLICY=passive for all there.
set -eu
cd "$(dirname "$0")/.."
BUILD=${1:-build}
N=${2:-3}
T=${3:-2}
REPS=${4:-10}
SIZES=${5:-"32 96"}
KERAS_PY=${TOWER_PYTHON:-$HOME/.cache/tower/interop-venv/bin/python}
TORCH_PY=${PEER_TORCH_PYTHON:-python3}
BIN="$BUILD/bench/bench_model"
BASE_BIN=${TOWER_BASE_BUILD:+$TOWER_BASE_BUILD/bench/bench_model}
[ -x "$BIN" ] || { echo "run_mobilenet_bench.sh: $BIN not found (build the bench_model target)" >&2; exit 1; }
have_keras=0; have_torch=0
"$KERAS_PY" -c "import tensorflow" 2>/dev/null && have_keras=1
"$TORCH_PY" -c "import torch" 2>/dev/null && have_torch=1
OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT
[ -z "$BASE_BIN" ] || [ -x "$BASE_BIN" ] || { echo "run_mobilenet_bench.sh: $BASE_BIN not found" >&2; exit 1; }
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'); AVX-512: $(grep -q avx512f /proc/cpuinfo && echo yes || echo no)), load at start: $(cut -d' ' -f1-3 /proc/loadavg); OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-unset}; keras: $have_keras, torch: $have_torch"
round=1
while [ "$round" -le "$N" ]; do
    for size in $SIZES; do
        runs="$BIN --model mobilenet_v2 --size $size --batch 64 --threads $T --reps $REPS"
        [ -n "$BASE_BIN" ] && runs="$runs|$BASE_BIN --model mobilenet_v2 --size $size --batch 64 --threads $T --reps $REPS"
        [ "$have_keras" = 1 ] && runs="$runs|$KERAS_PY bench/peer_nets.py --model mobilenet_v2 --framework keras --no_step --size $size --batch 64 --threads $T --reps $REPS"
        [ "$have_torch" = 1 ] && runs="$runs|$TORCH_PY bench/peer_nets.py --model mobilenet_v2 --framework torch --no_step --size $size --batch 64 --threads $T --reps $REPS"
        # alternate the order each round
        if [ $((round % 2)) = 0 ]; then runs=$(echo "$runs" | tr '|' '\n' | tac | tr '\n' '|' | sed 's/|$//'); fi
        echo "$runs" | tr '|' '\n' | while read -r cmd; do
            line=$($cmd 2>/dev/null | grep '^RESULT' | tail -1)
            case "$cmd" in "$BASE_BIN "*) [ -n "$BASE_BIN" ] && line=$(echo "$line" | sed 's/framework=tower /framework=tower_base /');; esac
            echo "$line size=$size" | tee -a "$OUT"
        done
    done
    round=$((round + 1))
done
echo
echo "| input | framework | img/s median (min-max of $N process medians) | Tower / it |"
echo "|---|---|---|---|"
for size in $SIZES; do
    tower=$(grep "framework=tower " "$OUT" | grep "size=$size" | sed 's/.*img_s=\([0-9.]*\).*/\1/' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
    for fw in tower tower_base keras_nostep torch_nostep; do
        vals=$(grep "framework=$fw " "$OUT" | grep "size=$size" | sed 's/.*img_s=\([0-9.]*\).*/\1/' | sort -g)
        [ -n "$vals" ] || continue
        echo "$vals" | awk -v s="$size" -v fw="$fw" -v t="$tower" '{a[NR]=$1} END {m=a[int((NR+1)/2)];
            printf "| %sx%s | %s | %.1f (%.1f-%.1f) | %.2fx |\n", s, s, fw, m, a[1], a[NR], t / m}'
    done
done
