#!/bin/sh
# run_gpu_bench.sh — GPU towers beside PyTorch on the same GPU (not a test).
#
# Where it sits: bench/; builds bench_gpu when it is missing (Release, CUDA
# on, in build_dir), runs it (1, 2, 4 towers of 128 on one GPU, each model)
# and bench/pytorch_gpu.py (the same networks at the same global batch),
# and prints one table with both and the step breakdown of Tower's.
# Needs a GPU; PyTorch with CUDA is optional (its column shows "-" without).
#
# usage: bench/run_gpu_bench.sh [build_dir] [extra bench_gpu/pytorch_gpu flags, e.g. --tf32]
set -eu
cd "$(dirname "$0")/.."
BUILD=${1:-build-gpu-bench}
[ $# -gt 0 ] && shift
if [ ! -x "$BUILD/bench/bench_gpu" ]; then
    cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DTOWER_CUDA=ON -DTOWER_BENCH=ON >"$BUILD.configure.log" 2>&1 ||
        { cat "$BUILD.configure.log"; exit 1; }
    cmake --build "$BUILD" -j"$(nproc)" --target bench_gpu ||
        { echo "run_gpu_bench.sh: cannot build bench_gpu (does bench/CMakeLists.txt include gpu.cmake when TOWER_HAVE_CUDA?)" >&2; exit 1; }
fi
OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores; $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
"$BUILD/bench/bench_gpu" "$@" | tee -a "$OUT"
PY=""
for p in python3 /usr/bin/python3; do
    if "$p" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then PY=$p; break; fi
done
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
      "Tower step: copy in / compute / copy out / wake-up / ps (ms) | variables H2D alone (ms) |")
print("|---|---|---|---|---|---|---|")
for (fw, model, towers), t in sorted(rows.items(), key=lambda r: (r[0][1] != "mnist", r[0][2])):
    if fw != "tower":
        continue
    p = rows.get(("pytorch", model, towers))
    B = int(t["batch"])
    ratio = "%.2fx" % (float(t["img_s"]) / float(p["img_s"])) if p else "-"
    print("| %s | %d x %d (%d) | %.0f (%.0f-%.0f) | %s | %s | %s / %s / %s / %s / %s | %s |" % (
        model, towers, B, towers * B, float(t["img_s"]), float(t["img_s_min"]), float(t["img_s_max"]),
        "%.0f (%.0f-%.0f)" % (float(p["img_s"]), float(p["img_s_min"]), float(p["img_s_max"])) if p else "-",
        ratio, t["copy_in_ms"], t["compute_ms"], t["copy_out_ms"], t["wake_ms"], t["ps_ms"], t["h2d_vars_ms"]))
PYEOF
