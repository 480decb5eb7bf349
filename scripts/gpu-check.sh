#!/usr/bin/env bash
# gpu-check.sh — issue 12's checks on a lent GPU machine, one stage per
# device `run` call, each ending within the call's 10 minutes.
#
# Where it sits: scripts/; run from the repository root on the GPU machine
# (which has nvcc, cuDNN and NCCL in its Python's nvidia-* wheels, PyTorch,
# CMake and ninja, and can fetch nothing), with .gpu-carry/ made HERE by
# scripts/gpu-carry.sh and named in the call's `carry`.  Every stage first
# makes the dependencies available and builds (a call may land on a fresh
# machine; a warm one keeps the build):
#
#   deps      unpack .gpu-carry/debs/*.deb with dpkg -x into $PREFIX (never /),
#             find cuDNN and NCCL (the nvidia-* wheels, or CUDNN_ROOT /
#             NCCL_ROOT), configure Release with -DTOWER_CUDA=ON
#             -DTOWER_NCCL=ON against that prefix, and show where each
#             dependency was found (fails when one is not from the prefix or
#             the system); stops there.  Runs without a GPU (tested on the
#             CPU machine: TOWER_GPU_CHECK_NO_GPU_OK=1 makes "no GPU" exit 0).
#   build     deps + build everything.
#   tests     build + ctest -L gpu -LE gpu_modes (layers, models, tower
#             equivalence, PS kernels, a 300-step training run) under
#             TOWER_TEST_REQUIRE_GPU=1 (a skip is a failure).          ~3-5 min
#   modes     build + ctest -L gpu_modes: test_gpu_modes, test_gpu_modes_cli
#             (every mode against ps_cpu; 1, 2, 4 towers on the GPU).  ~4-8 min
#   train     build + the README's first command on GPU towers (convert,
#             train 1876 steps, eval; the 0.88 mark) and the same with
#             --deterministic twice, compared bitwise.                  ~3-6 min
#   memcheck  build + compute-sanitizer --tool memcheck on a short run (3 steps,
#             2 towers) of every mode, then of mobilenet_v2, resnet20 and vgg11
#             (tower bench, synthetic data, ps_cpu).                   ~1-4 min
#   racecheck the same with --tool racecheck (slower).                 ~4-9 min
#   sanitize  memcheck then racecheck in one call (only if each proved quick).
#   bench     build + bench/run_gpu_bench.sh: Tower beside PyTorch on the same
#             GPU, then `tower bench` over every mode x 1, 2, 4 towers, then the
#             per-layer tables of GPU_BENCH_PER_LAYER (default none; e.g.
#             GPU_BENCH_PER_LAYER="resnet20 resnet50").                ~6-9 min
#   profile   builds bench_gpu and tower only, then where a GPU step's time
#             goes, node by node: bench/run_gpu_bench.sh's per-layer tables
#             (bench_gpu --per_layer, batch 128, each conv's cuDNN algorithms)
#             for TOWER_GPU_CHECK_PROFILE_MODELS (default resnet20 resnet50
#             mobilenet_v2 vgg11), the resnet20 and resnet50 tables again with
#             TOWER_CUDNN_FIND=1 (cuDNN's measured algorithms), mobilenet_v2's
#             with TOWER_DEPTHWISE_CUDNN=1 (cuDNN's grouped convolution), `tower bench`
#             (ps_cpu, 1 tower of 128) on
#             resnet20 and resnet50 for the trainer's forward / backward
#             beside them, and `tower train --model resnet20
#             --log_device_placement` for 3 steps on the carried Fashion-MNIST
#             (28x28x1: the trainer's cuDNN algorithms line).          ~3-4 min
#
# Logs and CSVs go to $OUT (the device tool brings back at most 8 files, 2
# folders down): $OUT/<stage>.log (everything, also printed) and
# $OUT/<stage>-files.tar.gz (CSVs, traces, per-test logs).
#
# Environment: OUT (default ./gpu-check-out), PREFIX (default /tmp/tower-deps),
# BUILD (default build-gpu), CARRY (default .gpu-carry), CUDNN_ROOT, NCCL_ROOT
# (override the wheel search), TOWER_CUDA_ARCHS (CMAKE_CUDA_ARCHITECTURES;
# default the project's 80-real;90-real;90-virtual), TOWER_GPU_CHECK_NO_GPU_OK=1
# (exit 0 at "no GPU": the CPU machine's test of everything before).
#
# usage: bash scripts/gpu-check.sh deps|build|tests|modes|train|memcheck|racecheck|sanitize|bench|profile
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
STAGE=${1:-}
case $STAGE in
  deps|build|tests|modes|train|memcheck|racecheck|sanitize|bench|profile) ;;
  *) echo "usage: bash scripts/gpu-check.sh deps|build|tests|modes|train|memcheck|racecheck|sanitize|bench|profile" >&2; exit 2 ;;
esac
OUT=${OUT:-$ROOT/gpu-check-out}
PREFIX=${PREFIX:-/tmp/tower-deps}
BUILD=${BUILD:-build-gpu}
CARRY=${CARRY:-.gpu-carry}
mkdir -p "$OUT"
WORK=$(mktemp -d /tmp/gpu-check-XXXXXX)     # logs, CSVs, traces: becomes $OUT/<stage>-files.tar.gz
SCRATCH=$(mktemp -d /tmp/gpu-scratch-XXXXXX) # data and checkpoints: too big to come back
LOG=$OUT/$STAGE.log
exec > >(tee -a "$LOG") 2>&1
TEE_PID=$!
T0=$(date +%s)

say() { echo "gpu-check [$STAGE] $(( $(date +%s) - T0 ))s: $*"; }
pack() { tar -C "$WORK" -czf "$OUT/$STAGE-files.tar.gz" . 2>/dev/null; }
die() { say "FAILED: $*"; exit 1; }
# At exit: the tarball, then let tee write the log's last lines before the call returns.
finish() { pack; exec 1>&- 2>&-; wait "$TEE_PID" 2>/dev/null; }
trap finish EXIT

# The device's copy of the tree may carry an older .git than its files: say when they differ.
rev=$(git rev-parse --short HEAD 2>/dev/null || echo '?')
[ -n "$(git status --porcelain --untracked-files=no 2>/dev/null | head -1)" ] && rev="$rev + uncommitted changes"
say "start $(date -u '+%Y-%m-%d %H:%M:%S UTC') on $(hostname), $(nproc) cores; commit $rev"

# ---- 1. the carried Debian packages, unpacked into $PREFIX ----
[ -d "$CARRY/debs" ] || die "$CARRY/debs is missing: run scripts/gpu-carry.sh on the CPU machine and name $CARRY in the call's carry"
mkdir -p "$PREFIX"
# dpkg -x, or where there is no dpkg the same by hand (a .deb is an ar
# archive whose data.tar.* member holds the files).
unpack_deb() {
  if command -v dpkg >/dev/null 2>&1; then dpkg -x "$1" "$2"; return; fi
  python3 - "$1" "$2" <<'PYEOF'
import io, sys, tarfile
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"!<arch>\n", "not an ar archive"
off = 8
while off + 60 <= len(data):
    name, size = data[off:off + 16].decode().strip().rstrip("/"), int(data[off + 48:off + 58])
    body = data[off + 60:off + 60 + size]
    if name.startswith("data.tar"):
        if name.endswith(".zst"):
            sys.exit("data.tar.zst needs dpkg or zstd")
        tarfile.open(fileobj=io.BytesIO(body)).extractall(sys.argv[2])
        break
    off += 60 + size + (size & 1)
PYEOF
}
for deb in "$CARRY"/debs/*.deb; do
  unpack_deb "$deb" "$PREFIX" || die "unpacking $deb into $PREFIX failed"
done
ARCH_LIB=$PREFIX/usr/lib/x86_64-linux-gnu
# The .pc files say prefix=/usr: point them at $PREFIX/usr.
for pc in "$ARCH_LIB"/pkgconfig/*.pc "$PREFIX"/usr/share/pkgconfig/*.pc; do
  [ -f "$pc" ] && sed -i "s|^prefix=/usr\$|prefix=$PREFIX/usr|" "$pc"
done
export PATH=$PREFIX/usr/bin:$PATH
export LD_LIBRARY_PATH=$ARCH_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PKG_CONFIG_PATH=$ARCH_LIB/pkgconfig:$PREFIX/usr/share/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
export CMAKE_PREFIX_PATH=$PREFIX/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}
PKG_CONFIG=$(command -v pkg-config || command -v pkgconf) || die "no pkg-config or pkgconf, not even the carried one"
protoc-c --version >/dev/null 2>&1 || die "protoc-c does not run: $(protoc-c --version 2>&1 | head -1)"
say "unpacked $(ls "$CARRY"/debs/*.deb | wc -l) packages into $PREFIX; protoc-c $(protoc-c --version 2>&1 | head -1)"

# ---- 2. CUDA, cuDNN and NCCL ----
export PATH=$PATH:/usr/local/cuda/bin
NVCC=$(command -v nvcc) || die "nvcc not found (PATH and /usr/local/cuda/bin)"
say "nvcc: $NVCC, $("$NVCC" --version | tail -1)"
# The directory holding include/<header> and lib/<library>, searched under the
# roots given (the nvidia-* wheels: site-packages/nvidia/<name>/{include,lib}).
find_root() { # header lib-glob roots...
  local header=$1 glob=$2; shift 2
  local h d
  for d in "$@"; do
    [ -d "$d" ] || continue
    while IFS= read -r h; do
      local r; r=$(dirname "$(dirname "$h")")
      # (one ls per folder: ls of two paths fails when either is missing)
      if ls "$r"/lib/$glob >/dev/null 2>&1 || ls "$r"/lib64/$glob >/dev/null 2>&1; then echo "$r"; return 0; fi
    done < <(find -L "$d" -maxdepth 5 -name "$header" -path '*/include/*' 2>/dev/null)
  done
  return 1
}
SITES=()
for py in python3 /usr/bin/python3; do
  s=$("$py" -c 'import nvidia, os; print("\n".join(os.path.abspath(p) for p in nvidia.__path__))' 2>/dev/null) && SITES+=($s)
done
CUDNN_ROOT=${CUDNN_ROOT:-$(find_root cudnn.h 'libcudnn.so*' "${SITES[@]}" /usr/local/cuda /usr)} ||
  die "cuDNN not found (cudnn.h + libcudnn.so* under the nvidia-* wheels ${SITES[*]:-none}, /usr/local/cuda, /usr); set CUDNN_ROOT"
NCCL_ROOT=${NCCL_ROOT:-$(find_root nccl.h 'libnccl.so*' "${SITES[@]}" /usr/local/cuda /usr)} ||
  die "NCCL not found (nccl.h + libnccl.so* under the nvidia-* wheels ${SITES[*]:-none}, /usr/local/cuda, /usr); set NCCL_ROOT"
say "cuDNN: $CUDNN_ROOT ($(ls "$CUDNN_ROOT"/lib*/libcudnn.so* 2>/dev/null | head -1 | xargs -r basename))"
say "NCCL:  $NCCL_ROOT ($(ls "$NCCL_ROOT"/lib*/libnccl.so* 2>/dev/null | head -1 | xargs -r basename))"
for r in "$CUDNN_ROOT" "$NCCL_ROOT"; do
  for l in "$r/lib" "$r/lib64"; do [ -d "$l" ] && LD_LIBRARY_PATH=$l:$LD_LIBRARY_PATH; done
done
export LD_LIBRARY_PATH

# ---- 3. configure ----
GEN=()
command -v ninja >/dev/null 2>&1 && GEN=(-G Ninja)
if [ ! -f "$BUILD/CMakeCache.txt" ] || ! grep -q "^TOWER_PREFIX_USED:INTERNAL=$PREFIX\$" "$BUILD/CMakeCache.txt"; then
  rm -rf "$BUILD"
fi
ARCHS=()
[ -n "${TOWER_CUDA_ARCHS:-}" ] && ARCHS=(-DCMAKE_CUDA_ARCHITECTURES="$TOWER_CUDA_ARCHS")
# MPI stays off: the GPU machine has no Open MPI, and the GPU checks are of one process.
cmake -S . -B "$BUILD" "${GEN[@]}" "${ARCHS[@]}" -DCMAKE_BUILD_TYPE=Release -DTOWER_CUDA=ON -DTOWER_NCCL=ON -DTOWER_MPI=OFF \
  -DCUDNN_ROOT="$CUDNN_ROOT" -DNCCL_ROOT="$NCCL_ROOT" -DPKG_CONFIG_EXECUTABLE="$PKG_CONFIG" \
  -DTOWER_PREFIX_USED:INTERNAL="$PREFIX" >"$WORK/configure.log" 2>&1 ||
  { tail -40 "$WORK/configure.log"; die "cmake configure failed ($STAGE-files.tar.gz: configure.log)"; }
grep -E "Tower:" "$WORK/configure.log"
# Where each dependency came from: the prefix, the system (/usr, /usr/local/cuda), or the wheels.
say "dependencies as configured:"
for v in DNNL_LIBRARY DNNL_INCLUDE_DIR PROTOC_C ZLIB_LIBRARY_RELEASE PNG_LIBRARY_RELEASE JPEG_LIBRARY_RELEASE \
         CUDNN_LIBRARY CUDNN_INCLUDE_DIR NCCL_LIBRARY NCCL_INCLUDE_DIR PKG_CONFIG_EXECUTABLE; do
  val=$(grep -E "^$v:[A-Z]+=" "$BUILD/CMakeCache.txt" | head -1 | cut -d= -f2-)
  printf '  %-24s %s\n' "$v" "${val:-(not set)}"
  case $v in
    CUDNN_*|NCCL_*) [ -n "$val" ] && [ "${val%-NOTFOUND}" = "$val" ] || die "$v not found" ;;
    PKG_CONFIG_EXECUTABLE) ;;
    # Everything carried must come from the prefix, not from whatever the machine has.
    *) case $val in "$PREFIX"/*) ;; *) die "$v is '$val', not under $PREFIX (the carried packages)" ;; esac ;;
  esac
done
pc_cflags=$("$PKG_CONFIG" --cflags --libs libprotobuf-c 2>&1)
printf '  %-24s %s\n' "protobuf-c (pkg-config)" "$pc_cflags"
case $pc_cflags in *"$PREFIX"/usr/include*) ;; *) die "pkg-config's libprotobuf-c is not the carried one: $pc_cflags" ;; esac
[ "$STAGE" = deps ] && { say "configured; stage deps done"; exit 0; }

# ---- 4. build ----
# (profile needs three programs only: the rest of the build would take most of its time)
TARGETS=()
[ "$STAGE" = profile ] && TARGETS=(--target bench_gpu bench_bn_cuda tower)
say "building in $BUILD${TARGETS[*]:+ (${TARGETS[*]:1})}"
cmake --build "$BUILD" -j"$(nproc)" "${TARGETS[@]}" >"$WORK/build.log" 2>&1 ||
  { grep -m20 -E "error|Error" "$WORK/build.log"; tail -20 "$WORK/build.log"; die "build failed ($STAGE-files.tar.gz: build.log)"; }
TOWER=$BUILD/cmd/tower
if [ "$STAGE" = profile ]; then say "built: bench_gpu, bench_bn_cuda, tower"
else say "built: $(ls "$BUILD"/tests/test_gpu_* 2>/dev/null | wc -l) GPU test binaries"; fi
if ldd "$TOWER" | grep -q "not found"; then ldd "$TOWER" | grep "not found"; die "tower has unresolved libraries"; fi
ldd "$TOWER" | grep -E "cudart|cudnn|nccl|cublas|dnnl|protobuf" | sed 's/^/  /'
grep -rlq cudart_static "$BUILD" --include=build.ninja --include=*.rsp --include=link.txt &&
  die "cudart_static is on a link line: the CUDA runtime must be the shared one only"

# ---- 5. the GPU ----
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q "^GPU"; then
  if [ "${TOWER_GPU_CHECK_NO_GPU_OK:-0}" = 1 ]; then
    say "no GPU on this machine (nvidia-smi lists none): built against the prefix; stage $STAGE needs a GPU from here on (TOWER_GPU_CHECK_NO_GPU_OK=1: exit 0)"
    exit 0
  fi
  die "no GPU on this machine (nvidia-smi lists none): stage $STAGE needs one"
fi
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | sed 's/^/gpu: /'
export TOWER_TEST_REQUIRE_GPU=1
case $CARRY in /*) export TOWER_FASHION_MNIST_DIR=$CARRY/fashion-mnist ;; *) export TOWER_FASHION_MNIST_DIR=$ROOT/$CARRY/fashion-mnist ;; esac
[ "$STAGE" = build ] && { say "stage build done"; exit 0; }

# Seconds left of the call's 10 minutes, with a margin; TOWER_GPU_CHECK_DEADLINE
# (epoch seconds) is the end shared by several stages run in one call.
left() {
  local l=$(( 570 - ($(date +%s) - T0) ))
  if [ -n "${TOWER_GPU_CHECK_DEADLINE:-}" ]; then
    local d=$(( TOWER_GPU_CHECK_DEADLINE - $(date +%s) ))
    [ "$d" -lt "$l" ] && l=$d
  fi
  echo "$l"
}
# At most $2 seconds, never past the deadline (timeout 0 would mean no limit).
upto() { local l; l=$(left); [ "$l" -lt "$1" ] && echo "$l" || echo "$1"; }
[ "$(left)" -gt 20 ] || die "no time left before stage $STAGE (TOWER_GPU_CHECK_DEADLINE)"
# GPU tests at once on the one GPU (each is small): TOWER_GPU_CHECK_JOBS, default 4.
JOBS=${TOWER_GPU_CHECK_JOBS:-4}
rc=0
case $STAGE in
tests)
  timeout "$(left)" ctest --test-dir "$BUILD" -j"$JOBS" -L gpu -LE gpu_modes --no-tests=error --output-on-failure --timeout 300 \
    --output-junit "$WORK/ctest-tests.xml" || rc=1
  cp "$BUILD"/Testing/Temporary/LastTest.log "$WORK/" 2>/dev/null
  ;;
modes)
  timeout "$(left)" ctest --test-dir "$BUILD" -j"$JOBS" -L gpu_modes --no-tests=error --output-on-failure --timeout 500 \
    --output-junit "$WORK/ctest-modes.xml" || rc=1
  cp "$BUILD"/Testing/Temporary/LastTest.log "$WORK/" 2>/dev/null
  ;;
train)
  data=$SCRATCH/fm
  mkdir -p "$data"
  src=$TOWER_FASHION_MNIST_DIR
  $TOWER convert --from idx --images "$src/train-images-idx3-ubyte.gz" --labels "$src/train-labels-idx1-ubyte.gz" \
    --out "$data/train" --num_shards 4 >/dev/null || die "convert train"
  $TOWER convert --from idx --images "$src/t10k-images-idx3-ubyte.gz" --labels "$src/t10k-labels-idx1-ubyte.gz" \
    --out "$data/test" --num_shards 1 >/dev/null || die "convert test"
  start=$(date +%s)
  # The README's first command (scripts/fashion-mnist.sh), --device gpu.
  timeout "$(upto 300)" $TOWER train --model mnist --data "$data/train-*.tfrecord" --train_dir "$SCRATCH/run" \
    --device gpu --num_towers 2 --batch_size 64 --optimizer momentum --nesterov \
    --learning_rate 0.05 --lr_decay_factor 0.1 --num_epochs_per_decay 3 \
    --max_steps 1876 --log_every 100 --save_every 500 --log_device_placement >"$WORK/train.log" 2>&1 ||
    { tail -20 "$WORK/train.log"; die "tower train --device gpu failed"; }
  grep -E "device|algo|step (1|100|1800),|done" "$WORK/train.log"
  result=$($TOWER eval --checkpoint_dir "$SCRATCH/run" --data "$data/test-*.tfrecord" --no_progress) || die "tower eval failed"
  p=$(echo "$result" | sed -n 's/.*precision @ 1 = //p')
  say "GPU towers, the README's command: precision @ 1 = $p after $(( $(date +%s) - start )) s (CPU towers, README.md: 0.910; the mark: 0.88)"
  awk -v p="$p" 'BEGIN { exit !(p >= 0.88) }' || rc=1
  # --deterministic: two runs of 200 steps must give the same checkpoint, bit for bit.
  for k in 1 2; do
    timeout "$(upto 120)" $TOWER train --model mnist --data "$data/train-*.tfrecord" --train_dir "$SCRATCH/det$k" --device gpu \
      --num_towers 2 --batch_size 64 --max_steps 200 --log_every 100 --deterministic --log_device_placement \
      --seed 7 >"$WORK/det$k.log" 2>&1 || { tail -5 "$WORK/det$k.log"; say "--deterministic run $k failed"; rc=1; }
  done
  grep -i "algo" "$WORK/det1.log" | head -12
  if [ -f "$SCRATCH/det1/model.ckpt-200" ] && cmp -s "$SCRATCH/det1/model.ckpt-200" "$SCRATCH/det2/model.ckpt-200"; then
    say "--deterministic: two runs of 200 steps give the same checkpoint bit for bit: ok"
  else
    say "--deterministic: the two checkpoints differ: FAIL"; rc=1
  fi
  ;;
memcheck|racecheck|sanitize)
  data=$SCRATCH/fm
  mkdir -p "$data"
  $TOWER convert --from idx --images "$TOWER_FASHION_MNIST_DIR/t10k-images-idx3-ubyte.gz" \
    --labels "$TOWER_FASHION_MNIST_DIR/t10k-labels-idx1-ubyte.gz" --out "$data/fm" --num_shards 1 >/dev/null || die "convert"
  CS=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null) || die "compute-sanitizer not found"
  tools=$STAGE
  [ "$STAGE" = sanitize ] && tools="memcheck racecheck"
  for tool in $tools; do
    for mode in ps_cpu replicated_host ps_gpu replicated_nccl; do
      case $mode in
        ps_cpu) mflags="--variable_update parameter_server --local_parameter_device cpu" ;;
        replicated_host) mflags="--variable_update replicated --all_reduce host" ;;
        ps_gpu) mflags="--variable_update parameter_server --local_parameter_device gpu" ;;
        replicated_nccl) mflags="--variable_update replicated --all_reduce nccl" ;;
      esac
      [ "$(left)" -gt 30 ] || { say "out of time before $tool $mode"; rc=1; break 2; }
      # NCCL's own start-up probes kernels with cudaFuncGetAttributes and gets
      # "no kernel image" for the architectures its wheel lacks (error 209,
      # handled inside NCCL; seen on an H100, 2026-11-26): API errors are not
      # reported for this mode.  Memory errors are; Tower's own CUDA calls
      # are all checked (base/cuda_check.h) and end the run on error.
      api=()
      [ "$mode" = replicated_nccl ] && api=(--report-api-errors no)
      # shellcheck disable=SC2086
      timeout "$(( $(left) < 150 ? $(left) : 150 ))" "$CS" --tool "$tool" "${api[@]}" --error-exitcode 99 \
        $TOWER train --device gpu --model mnist --data "$data/fm-*.tfrecord" --train_dir "$SCRATCH/san-$tool-$mode" \
        --num_towers 2 --batch_size 16 --max_steps 3 --log_every 1 --min_after_dequeue 100 $mflags \
        >"$WORK/sanitize-$tool-$mode.log" 2>&1
      r=$?
      say "compute-sanitizer --tool $tool, $mode, 2 towers, 3 steps: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$WORK/sanitize-$tool-$mode.log" | tail -1) (exit $r)"
      [ $r -eq 0 ] || { tail -15 "$WORK/sanitize-$tool-$mode.log"; rc=1; }
    done
    # The other networks' layers (batch norm, depthwise, pointwise, residual adds, odd SAME padding): tower
    # bench on synthetic data (no data set needed), 2 towers of 4, 2 steps, ps_cpu (the towers' own code).
    [ "$(left)" -gt 60 ] || { say "out of time before $tool on the other networks"; rc=1; break; }
    timeout "$(( $(left) < 200 ? $(left) : 200 ))" "$CS" --tool "$tool" --error-exitcode 99 \
      $TOWER bench --device gpu --models mobilenet_v2,resnet20,vgg11 --modes ps_cpu --towers 2 --batch_size 4 \
      --steps 2 --warmup 0 --csv "" --svg "" >"$WORK/sanitize-$tool-nets.log" 2>&1
    r=$?
    say "compute-sanitizer --tool $tool, mobilenet_v2, resnet20, vgg11 (tower bench, ps_cpu, 2 towers of 4, 2 steps): $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$WORK/sanitize-$tool-nets.log" | tail -1) (exit $r)"
    [ $r -eq 0 ] || { tail -15 "$WORK/sanitize-$tool-nets.log"; rc=1; }
  done
  ;;
bench)
  # The mnist/cifar10 table beside PyTorch, the modes matrix, then the other networks beside PyTorch.
  GPU_BENCH_NETS=${GPU_BENCH_NETS-resnet20,vgg11,mobilenet_v2,resnet50} \
    timeout "$(left)" sh bench/run_gpu_bench.sh "$BUILD" >"$WORK/bench.log" 2>&1 || rc=1
  cat "$WORK/bench.log"
  cp "$BUILD"/gpu_modes.csv "$BUILD"/gpu_modes.svg "$BUILD"/gpu_modes_global_* "$BUILD"/gpu_nets_* "$WORK/" 2>/dev/null
  cp "$BUILD"/gpu_modes_trace*.json "$WORK/" 2>/dev/null
  cp "$BUILD"/per_layer_*.csv "$WORK/" 2>/dev/null
  ;;
profile)
  # tables NAME SECONDS MODELS [VAR=VALUE ...]: run_gpu_bench.sh's per-layer tables of MODELS with the
  # variables given, into $WORK/profile-NAME.log and the CSVs into $WORK/NAME/.
  tables() {
    local name=$1 secs=$2 models=$3
    shift 3
    mkdir -p "$WORK/$name"
    rm -f "$BUILD"/per_layer_*.csv
    env "$@" GPU_BENCH_PEER=0 GPU_BENCH_MODELS='' GPU_BENCH_PER_LAYER="$models" \
      timeout "$(upto "$secs")" sh bench/run_gpu_bench.sh "$BUILD" >"$WORK/profile-$name.log" 2>&1 || rc=1
    echo "# per-layer tables: $models${*:+ with $*}"
    cat "$WORK/profile-$name.log"
    cp "$BUILD"/per_layer_*.csv "$WORK/$name/" 2>/dev/null
  }
  tables heuristics 240 "${TOWER_GPU_CHECK_PROFILE_MODELS:-resnet20 resnet50 mobilenet_v2 vgg11}" TOWER_CUDNN_FIND=0
  # The same two ResNets with cuDNN's measured algorithms (TOWER_CUDNN_FIND=1, docs/gpu.md): does the
  # heuristics' choice (ALGO_1 backward everywhere on 2026-11-26) explain the backward's time?
  if [ "$(left)" -gt 120 ]; then tables find 150 "resnet20 resnet50" TOWER_CUDNN_FIND=1
  else say "no time left for the TOWER_CUDNN_FIND=1 tables"; fi
  # mobilenet_v2's depthwise layers as cuDNN's grouped convolution against our kernels.
  if [ "$(left)" -gt 90 ]; then tables dwcudnn 90 mobilenet_v2 TOWER_DEPTHWISE_CUDNN=1
  else say "no time left for the TOWER_DEPTHWISE_CUDNN=1 table"; fi
  # The trainer's own forward / backward (TOWER_PHASE_*) beside the tables' steps.
  for m in resnet20 resnet50; do
    [ "$(left)" -gt 60 ] || { say "out of time before tower bench $m"; rc=1; break; }
    timeout "$(upto 90)" $TOWER bench --device gpu --models $m --modes ps_cpu --towers 1 --batch_size 128 --steps 5 \
      --warmup 2 --csv "" --svg "" >"$WORK/tower-bench-$m.log" 2>&1 || { say "tower bench $m failed"; rc=1; }
    cat "$WORK/tower-bench-$m.log"
  done
  # The trainer's cuDNN algorithms line (on 28x28x1 Fashion-MNIST, the one data set carried: the
  # tables above have the algorithms at each model's own input).
  if [ "$(left)" -gt 40 ]; then
    data=$SCRATCH/fm
    mkdir -p "$data"
    $TOWER convert --from idx --images "$TOWER_FASHION_MNIST_DIR/t10k-images-idx3-ubyte.gz" \
      --labels "$TOWER_FASHION_MNIST_DIR/t10k-labels-idx1-ubyte.gz" --out "$data/fm" --num_shards 1 >/dev/null ||
      die "convert"
    timeout "$(upto 60)" $TOWER train --model resnet20 --device gpu --data "$data/fm-*.tfrecord" \
      --train_dir "$SCRATCH/profile-train" --batch_size 128 --max_steps 3 --log_every 1 --min_after_dequeue 100 \
      --log_device_placement >"$WORK/train-resnet20.log" 2>&1 || { tail -5 "$WORK/train-resnet20.log"; rc=1; }
    grep -E "tower_0|step [0-9]" "$WORK/train-resnet20.log"
  fi
  # Issue 15: our batch-norm kernels against cuDNN's on the networks' batch-norm shapes.
  if [ "$(left)" -gt 40 ]; then
    timeout "$(upto 60)" "$BUILD"/bench/bench_bn_cuda 2>&1 | tee "$WORK/bench-bn.log"
    [ "${PIPESTATUS[0]}" -eq 0 ] || { say "bench_bn_cuda failed"; rc=1; }
  else say "no time left for bench_bn_cuda"; fi
  # Our small-map kernels (TOWER_BN_CUDA_FUSED=1, model/layers_cuda.h: one launch each way up to 2048 rows):
  # do mobilenet_v2's 1x1 to 4x4 maps gain?  (TOWER_BN_CUDA_CHUNKS=1024 was measured slower on 2026-11-27.)
  if [ "$(left)" -gt 40 ]; then
    TOWER_BN_CUDA_FUSED=1 timeout "$(upto 60)" "$BUILD"/bench/bench_bn_cuda 2>&1 |
      tee "$WORK/bench-bn-fused.log" | grep -E "^BNBENCH|total|FAIL"
    [ "${PIPESTATUS[0]}" -eq 0 ] || { say "bench_bn_cuda with TOWER_BN_CUDA_FUSED=1 failed"; rc=1; }
  else say "no time left for bench_bn_cuda with TOWER_BN_CUDA_FUSED=1"; fi
  ;;
esac
say "stage $STAGE: $([ $rc -eq 0 ] && echo ok || echo FAILED)"
exit $rc
