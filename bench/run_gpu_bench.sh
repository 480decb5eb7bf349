#!/bin/sh
# run_gpu_bench.sh — GPU towers beside PyTorch on the same GPU, and the
# variable placement modes on GPU towers (not a test).
#
# Where it sits: bench/; builds bench_gpu and tower when they are missing
# (Release, CUDA on, in build_dir), runs bench_gpu (1, 2, 4 towers of 128 on
# one GPU, each model) and bench/pytorch_gpu.py (the same networks at the
# same global batch), and prints one table with both and the step breakdown
# of Tower's.  Then the modes matrix: `tower bench --device gpu` over
# ps_cpu, replicated_host, ps_gpu and replicated_nccl (when built with NCCL)
# x 1, 2, 4 towers of 128 on GPU 0 x both models, median of 3 interleaved
# runs, with its CSV, SVG chart and one Chrome trace per configuration in
# build_dir/gpu_modes* (docs/modes.md says how to read them).  Last, for
# each model in GPU_BENCH_PER_LAYER, `bench_gpu --per_layer`: where one GPU
# step of 128 goes, node by node (docs/gpu.md, "Per-layer profile"), with
# its CSV in build_dir/per_layer_<model>.csv.
# Needs a GPU; PyTorch with CUDA is optional (its column shows "-" without).
#
# Environment: each part has its own switch, so any part can run alone:
#   GPU_BENCH_PEER=0      skip the bench_gpu / PyTorch table (mnist and cifar10 only);
#   GPU_BENCH_OVERLAP=0   in that table, skip bench_gpu's second run with TOWER_GPU_OVERLAP=1 (docs/gpu.md;
#                         the first runs with TOWER_GPU_OVERLAP=0, the plain copies);
#   GPU_BENCH_MODELS      the modes matrix's networks (default mnist,cifar10; any
#                         of tower bench --models); set but empty (GPU_BENCH_MODELS=)
#                         skips the matrix;
#   GPU_BENCH_NETS        networks run one tower of 128 in tower bench (ps_cpu, ps_gpu) and in
#                         PyTorch (bench/peer_nets.py --device cuda) on the same GPU, with a table
#                         of the ratios (default empty: none), e.g. "resnet20,vgg11,mobilenet_v2,resnet50";
#                         GPU_BENCH_NETS_STEPS (10) steps a run;
#   GPU_BENCH_PER_LAYER   models for the per-layer tables, space- or comma-separated
#                         (default empty: none), e.g. "resnet20 resnet50";
#   GPU_BENCH_TOWERS (1,2,4), GPU_BENCH_STEPS (20), GPU_BENCH_REPEAT (3): the matrix;
#   GPU_BENCH_PREDICT=1   the matrix with --predict: the cost model fitted to these runs, and its
#                         parameter server against ring table up to 8 towers (docs/modes.md);
#   GPU_BENCH_PER_LAYER_STEPS (10), GPU_BENCH_PER_LAYER_WARMUP (3): the tables.
# Only the tables: GPU_BENCH_PEER=0 GPU_BENCH_MODELS= GPU_BENCH_PER_LAYER="resnet50" bench/run_gpu_bench.sh build-gpu
#
# usage: bench/run_gpu_bench.sh [build_dir] [extra bench_gpu/pytorch_gpu flags, e.g. --tf32]
set -eu
cd "$(dirname "$0")/.."
BUILD=${1:-build-gpu-bench}
[ $# -gt 0 ] && shift
if [ ! -x "$BUILD/bench/bench_gpu" ] || [ ! -x "$BUILD/cmd/tower" ]; then
    cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DTOWER_CUDA=ON -DTOWER_BENCH=ON >"$BUILD.configure.log" 2>&1 ||
        { cat "$BUILD.configure.log"; exit 1; }
    cmake --build "$BUILD" -j"$(nproc)" --target bench_gpu tower ||
        { echo "run_gpu_bench.sh: cannot build bench_gpu and tower (does bench/CMakeLists.txt include gpu.cmake when TOWER_HAVE_CUDA?)" >&2; exit 1; }
fi
OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores; $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
# A Python with a CUDA-enabled PyTorch for the peer columns, or none.
PY=""
for p in python3 /usr/bin/python3; do
    if "$p" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then PY=$p; break; fi
done
MODELS=${GPU_BENCH_MODELS-mnist,cifar10}
TOWERS=${GPU_BENCH_TOWERS:-1,2,4}
STEPS=${GPU_BENCH_STEPS:-20}
REPEAT=${GPU_BENCH_REPEAT:-3}
if [ "${GPU_BENCH_PEER:-1}" != 0 ]; then
TOWER_GPU_OVERLAP=0 "$BUILD/bench/bench_gpu" "$@" | tee -a "$OUT"
if [ "${GPU_BENCH_OVERLAP:-1}" != 0 ]; then
    echo "# again with TOWER_GPU_OVERLAP=1 (the copies on a second stream, chunk by chunk)"
    TOWER_GPU_OVERLAP=1 "$BUILD/bench/bench_gpu" "$@" | sed 's/^RESULT framework=tower /RESULT framework=tower_overlap /' |
        tee -a "$OUT"
fi
if [ -n "$PY" ]; then
    "$PY" bench/pytorch_gpu.py "$@" | tee -a "$OUT"
else
    echo "# PyTorch with CUDA not found: no PyTorch column"
fi
python3 - "$OUT" <<'PYEOF'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    if not line.startswith("RESULT"):
        continue
    kv = dict(f.split("=", 1) for f in line.split()[1:])
    rows[(kv["framework"], kv["model"], int(kv["towers"]))] = kv
print("\n| model | towers x batch (global) | Tower img/s (min-max) | PyTorch img/s, same global batch | Tower / PyTorch | "
      "Tower step: copy in / compute / copy out / wake-up (thread) / ps (ms) | variables H2D alone (ms) | "
      "overlapped copies: img/s, / PyTorch, copy in / compute / copy out (ms) |")
print("|---|---|---|---|---|---|---|---|")
for (fw, model, towers), t in sorted(rows.items(), key=lambda r: (r[0][1] != "mnist", r[0][2])):
    if fw != "tower":
        continue
    p = rows.get(("pytorch", model, towers))
    B = int(t["batch"])
    ratio = "%.2fx" % (float(t["img_s"]) / float(p["img_s"])) if p else "-"
    ov = rows.get(("tower_overlap", model, towers))
    ovs = "-"
    if ov:
        ovs = "%.0f, %s, %s / %s / %s" % (float(ov["img_s"]), "%.2fx" % (float(ov["img_s"]) / float(p["img_s"])) if p
                                          else "-", ov["copy_in_ms"], ov["compute_ms"], ov["copy_out_ms"])
    print("| %s | %d x %d (%d) | %.0f (%.0f-%.0f) | %s | %s | %s / %s / %s / %s (%s) / %s | %s | %s |" % (
        model, towers, B, towers * B, float(t["img_s"]), float(t["img_s_min"]), float(t["img_s_max"]),
        "%.0f (%.0f-%.0f)" % (float(p["img_s"]), float(p["img_s_min"]), float(p["img_s_max"])) if p else "-",
        ratio, t["copy_in_ms"], t["compute_ms"], t["copy_out_ms"], t["wake_ms"], t.get("wake_thread_ms", "-"), t["ps_ms"],
        t["h2d_vars_ms"], ovs))
PYEOF

fi

# ---- the variable placement modes on GPU towers (docs/modes.md) ----
if [ -n "$MODELS" ]; then
MODES=ps_cpu,replicated_host,ps_gpu,replicated_nccl
if ! "$BUILD/cmd/tower" bench --device gpu --models mnist --modes replicated_nccl --towers 1 --batch_size 2 --steps 1 \
       --warmup 0 --csv "" --svg "" >"$BUILD/gpu_modes_probe.log" 2>&1; then
    echo "# replicated_nccl left out: $(tail -1 "$BUILD/gpu_modes_probe.log")"
    MODES=ps_cpu,replicated_host,ps_gpu
fi
echo
echo "# tower bench --device gpu, models $MODELS, modes $MODES, towers $TOWERS of 128 on GPU 0"
"$BUILD/cmd/tower" bench --device gpu --models "$MODELS" --modes "$MODES" --towers "$TOWERS" --batch_size 128 \
    --steps "$STEPS" --warmup 5 --repeat "$REPEAT" --csv "$BUILD/gpu_modes.csv" --svg "$BUILD/gpu_modes.svg" \
    --trace "$BUILD/gpu_modes_trace.json" ${GPU_BENCH_PREDICT:+--predict}
echo "# modes table: $BUILD/gpu_modes.csv, chart: $BUILD/gpu_modes.svg, traces: $BUILD/gpu_modes_trace-<model>-<mode>-<towers>.json"
# Several towers on one GPU share it: the fair reference for N towers of 128 is one tower of N x 128 on
# the same GPU (the same work per step), not N times one tower of 128.
GLOBAL=""
for t in $(echo "$TOWERS" | tr ',' ' '); do
    [ "$t" -gt 1 ] || continue
    "$BUILD/cmd/tower" bench --device gpu --models "$MODELS" --modes ps_cpu,ps_gpu --towers 1 \
        --batch_size $((t * 128)) --steps "$STEPS" --warmup 5 --repeat "$REPEAT" --csv "$BUILD/gpu_modes_global_$t.csv" \
        --svg "" >/dev/null && GLOBAL="$GLOBAL $BUILD/gpu_modes_global_$t.csv"
done
# shellcheck disable=SC2086
python3 - "$BUILD/gpu_modes.csv" $GLOBAL <<'PYEOF'
import csv, sys
ref = {}  # (model, mode, global batch) -> one tower's images/sec
for path in sys.argv[2:]:
    for row in csv.DictReader(open(path)):
        ref[(row["model"], row["mode"], int(row["global_batch"]))] = float(row["images_per_sec"])
print("\n| model | mode | towers x 128 on one GPU: img/s | one tower of the same global batch: img/s | ratio |")
print("|---|---|---|---|---|")
for row in csv.DictReader(open(sys.argv[1])):
    t = int(row["towers"])
    key = (row["model"], row["mode"], int(row["global_batch"]))
    if t > 1 and key in ref:
        v = float(row["images_per_sec"])
        print("| %s | %s | %d: %.0f | %.0f | %.2f |" % (row["model"], row["mode"], t, v, ref[key], v / ref[key]))
PYEOF
fi

FAILED=""
# ---- the other networks beside PyTorch: one tower of 128, ps_cpu and ps_gpu (issue 12's bar) ----
NETS=$(echo "${GPU_BENCH_NETS:-}" | tr ',' ' ')
if [ -n "$NETS" ]; then
NETS_OUT=$(mktemp)
for m in $NETS; do
    case $m in resnet50) size=224 ;; *) size=32 ;; esac
    echo
    echo "# $m ${size}x${size}, batch 128, one tower: tower bench --device gpu (ps_cpu, ps_gpu) and PyTorch on the same GPU"
    "$BUILD/cmd/tower" bench --device gpu --models "$m" --modes ps_cpu,ps_gpu --towers 1 --batch_size 128 \
        --steps "${GPU_BENCH_NETS_STEPS:-10}" --warmup 3 --repeat 3 --csv "$BUILD/gpu_nets_$m.csv" --svg "" ||
        FAILED="$FAILED tower-bench-$m"
    awk -F, -v m="$m" 'NR > 1 { printf "NETS model=%s framework=tower_%s img_s=%s\n", m, $2, $10 }' \
        "$BUILD/gpu_nets_$m.csv" >>"$NETS_OUT" 2>/dev/null
    if [ -n "$PY" ]; then
        "$PY" bench/peer_nets.py --framework torch --device cuda --model "$m" --size "$size" --batch 128 \
            --reps "${GPU_BENCH_NETS_STEPS:-10}" --warmup 5 | tee "$BUILD/gpu_nets_$m.torch.log" ||
            FAILED="$FAILED pytorch-$m"
        sed -n 's/^RESULT framework=torch model=\([^ ]*\) .* img_s=\([^ ]*\) .*/NETS model=\1 framework=pytorch img_s=\2/p' \
            "$BUILD/gpu_nets_$m.torch.log" >>"$NETS_OUT"
    fi
done
python3 - "$NETS_OUT" <<'PYEOF'
import sys
r = {}
for line in open(sys.argv[1]):
    kv = dict(f.split("=", 1) for f in line.split()[1:])
    r.setdefault(kv["model"], {})[kv["framework"]] = float(kv["img_s"])
print("\n| model (batch 128, 1 tower) | Tower ps_cpu img/s | Tower ps_gpu img/s | PyTorch img/s | ps_cpu / PyTorch | ps_gpu / PyTorch |")
print("|---|---|---|---|---|---|")
for m, v in r.items():
    pt = v.get("pytorch")
    f = lambda k: "%.0f" % v[k] if k in v else "-"
    q = lambda k: "%.2fx" % (v[k] / pt) if k in v and pt else "-"
    print("| %s | %s | %s | %s | %s | %s |" % (m, f("tower_ps_cpu"), f("tower_ps_gpu"), f("pytorch"), q("tower_ps_cpu"),
                                              q("tower_ps_gpu")))
PYEOF
rm -f "$NETS_OUT"
fi

# ---- per-layer tables: one model's GPU step node by node (docs/gpu.md) ----
for m in $(echo "${GPU_BENCH_PER_LAYER:-}" | tr ',' ' '); do
    echo
    "$BUILD/bench/bench_gpu" --per_layer --model "$m" --batch 128 --steps "${GPU_BENCH_PER_LAYER_STEPS:-10}" \
        --warmup "${GPU_BENCH_PER_LAYER_WARMUP:-3}" --csv "$BUILD/per_layer_$m.csv" "$@" || FAILED="$FAILED $m"
done
if [ -n "$FAILED" ]; then
    echo "run_gpu_bench.sh: failed:$FAILED" >&2
    exit 1
fi
