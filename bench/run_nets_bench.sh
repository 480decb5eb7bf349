#!/bin/sh
# run_nets_bench.sh — the CPU training step of the networks of the table beside PyTorch and Keras,
# side by side (resnet20 and vgg11 by default, or mobilenet_v2).
#
# Where it sits: bench/; runs bench/bench_model (Tower: forward + backward; its optimizer runs in
# ps/) and the peers' step with --no_step (forward + backward: bench/peer_nets.py) as separate processes, N rounds, interleaved per
# configuration with the order reversed every other round, so that every framework sees the same
# machine load.  Prints one line per process and a table of the medians of the processes' medians
# (min-max of those medians).  Not a test.
#
# usage: bench/run_nets_bench.sh [build_dir] [n_rounds] [threads] [reps] [models] [size]
#   build_dir build, n_rounds 3, threads 2, reps 10, models "resnet20 vgg11", size 32 (0: each
#   network's own: mnist 28, cifar10 24, the others 32); batch 64, or BATCH in the environment.
#   The peers' python: PEER_PYTHON (default: scripts/install-peers.sh's ~/.cache/tower/peer-venv);
#   a framework it cannot import is left out.
set -eu
cd "$(dirname "$0")/.."
BUILD=${1:-build}
N=${2:-3}
T=${3:-2}
REPS=${4:-10}
MODELS=${5:-"resnet20 vgg11"}
SIZE=${6:-32}
BATCH=${BATCH:-64}
own_size() { # the input side for a network: SIZE, or with SIZE 0 the network's own
    if [ "$SIZE" != 0 ]; then echo "$SIZE"; else case $1 in mnist) echo 28 ;; cifar10) echo 24 ;; *) echo 32 ;; esac; fi
}
PY=${PEER_PYTHON:-${XDG_CACHE_HOME:-$HOME/.cache}/tower/peer-venv/bin/python}
BIN="$BUILD/bench/bench_model"
[ -x "$BIN" ] || { echo "run_nets_bench.sh: $BIN not found (build the bench_model target)" >&2; exit 1; }
fws=""
"$PY" -c "import tensorflow" 2>/dev/null && fws="$fws keras"
"$PY" -c "import torch" 2>/dev/null && fws="$fws torch"
OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'); AVX2: $(grep -q ' avx2' /proc/cpuinfo && echo yes || echo no), AVX-512: $(grep -q avx512f /proc/cpuinfo && echo yes || echo no)), load at start: $(cut -d' ' -f1-3 /proc/loadavg); peers:${fws:- none}"
round=1
while [ "$round" -le "$N" ]; do
    for model in $MODELS; do
        S=$(own_size "$model")
        runs="$BIN --model $model --size $S --batch $BATCH --threads $T --reps $REPS"
        for fw in $fws; do
            runs="$runs|$PY bench/peer_nets.py --model $model --framework $fw --no_step --size $S --batch $BATCH --threads $T --reps $REPS"
        done
        if [ $((round % 2)) = 0 ]; then runs=$(echo "$runs" | tr '|' '\n' | tac | tr '\n' '|' | sed 's/|$//'); fi
        echo "$runs" | tr '|' '\n' | while read -r cmd; do
            line=$($cmd 2>/dev/null | grep '^RESULT' | tail -1)
            echo "$line" | sed "s/model=[^ ]*/model=$model/" | tee -a "$OUT"
        done
    done
    round=$((round + 1))
done
echo "# load at end: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| network, batch $BATCH | framework (forward + backward) | img/s median (min-max of $N process medians) | Tower / it |"
echo "|---|---|---|---|"
for model in $MODELS; do
    med() { grep "framework=$1 " "$OUT" | grep "model=$model " | sed 's/.*img_s=\([0-9.]*\).*/\1/' | sort -g; }
    tower=$(med tower | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
    for fw in tower keras_nostep torch_nostep; do
        vals=$(med "$fw")
        [ -n "$vals" ] || continue
        echo "$vals" | awk -v m="$model" -v s="$(own_size "$model")" -v fw="$fw" -v t="$tower" '{a[NR]=$1} END {x=a[int((NR+1)/2)];
            printf "| %s %sx%s | %s | %.1f (%.1f-%.1f) | %.2fx |\n", m, s, s, fw, x, a[1], a[NR], t / x}'
    done
done
