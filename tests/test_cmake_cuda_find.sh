#!/usr/bin/env bash
# test_cmake_cuda_find.sh SOURCE_DIR NVCC — the CUDA part of CMakeLists.txt
# and ps/cuda.cmake, configured (not built) against a fake cuDNN and NCCL
# laid out as the nvidia-* pip wheels are (include/cudnn.h + lib/libcudnn.so.9
# only, include/nccl.h + lib/libnccl.so.2 only, no unversioned .so):
#   - -DTOWER_CUDA=ON -DTOWER_NCCL=ON -DCUDNN_ROOT/-DNCCL_ROOT=<fake> find
#     exactly the fake's versioned libraries (before any other cuDNN/NCCL on
#     the machine), and the CUDA runtime is the shared one;
#   - -DTOWER_NCCL=ON with -DTOWER_CUDA=OFF is a configure error.
# Needs nvcc (skips, 77, without).  About 20 s: two configures.
set -euo pipefail
src=$1
nvcc=${2:-/usr/local/cuda/bin/nvcc}
[ -x "$nvcc" ] || { echo "skipped: no nvcc at $nvcc"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
fake=$work/wheels
mkdir -p "$fake/cudnn/include" "$fake/cudnn/lib" "$fake/nccl/include" "$fake/nccl/lib"
: >"$fake/cudnn/include/cudnn.h"
: >"$fake/cudnn/lib/libcudnn.so.9"
: >"$fake/nccl/include/nccl.h"
: >"$fake/nccl/lib/libnccl.so.2"
cmake -S "$src" -B "$work/b" -DCMAKE_BUILD_TYPE=Release -DTOWER_CUDA=ON -DTOWER_NCCL=ON -DTOWER_BENCH=OFF \
  -DCMAKE_CUDA_COMPILER="$nvcc" -DCMAKE_CUDA_ARCHITECTURES=90-real \
  -DCUDNN_ROOT="$fake/cudnn" -DNCCL_ROOT="$fake/nccl" >"$work/configure.log" 2>&1 ||
  { cat "$work/configure.log"; fail "configure against the wheel-like cuDNN/NCCL failed"; }
cache() { grep -E "^$1:[A-Z]+=" "$work/b/CMakeCache.txt" | head -1 | cut -d= -f2-; }
[ "$(cache CUDNN_LIBRARY)" = "$fake/cudnn/lib/libcudnn.so.9" ] || fail "CUDNN_LIBRARY is '$(cache CUDNN_LIBRARY)', not the fake's libcudnn.so.9"
[ "$(cache NCCL_LIBRARY)" = "$fake/nccl/lib/libnccl.so.2" ] || fail "NCCL_LIBRARY is '$(cache NCCL_LIBRARY)', not the fake's libnccl.so.2"
[ "$(cache CUDNN_INCLUDE_DIR)" = "$fake/cudnn/include" ] || fail "CUDNN_INCLUDE_DIR is '$(cache CUDNN_INCLUDE_DIR)'"
grep -q "Tower: NCCL ON" "$work/configure.log" || fail "NCCL not on"
echo "versioned names found: $(cache CUDNN_LIBRARY), $(cache NCCL_LIBRARY): ok"
# The CUDA runtime: shared only (no cudart_static on any link line).
grep -rq "cudart_static" "$work/b" --include=*.make --include=build.ninja --include=link.txt --include=*.rsp &&
  fail "cudart_static is on a link line (CMAKE_CUDA_RUNTIME_LIBRARY should be Shared)"
echo "no cudart_static on any link line: ok"
grep -rq -- "-lineinfo" "$work/b" --include=flags.make --include=build.ninja ||
  fail "-lineinfo is not among the CUDA flags"
echo "-lineinfo in the CUDA flags: ok"
if cmake -S "$src" -B "$work/c" -DTOWER_CUDA=OFF -DTOWER_NCCL=ON -DTOWER_BENCH=OFF >"$work/c.log" 2>&1; then
  fail "-DTOWER_NCCL=ON with -DTOWER_CUDA=OFF configured without an error"
fi
grep -q "TOWER_NCCL=ON needs the CUDA backend" "$work/c.log" || { cat "$work/c.log"; fail "no clear message for NCCL without CUDA"; }
echo "-DTOWER_NCCL=ON without CUDA: a configure error: ok"
