#!/usr/bin/env bash
# test_gpu_check_deps.sh SOURCE_DIR — scripts/gpu-check.sh up to where a GPU
# is needed, on this machine:
#   - an unknown stage is a usage error (exit 2); a missing carried folder
#     is one clear line and exit 1 (runs everywhere);
#   - with .gpu-carry/debs made by scripts/gpu-carry.sh (skips, 77,
#     without it, or without nvcc), the deps stage unpacks the .debs into a
#     fresh prefix and configures with CUDA and NCCL on, every carried
#     dependency (oneDNN, protoc-c, zlib, libpng, libjpeg, protobuf-c's
#     pkg-config) taken from the prefix, not from the machine (the script
#     itself fails otherwise), about 20 s.
set -uo pipefail
src=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
out=$(bash "$src/scripts/gpu-check.sh" nonsense 2>&1); rc=$?
[ $rc -eq 2 ] && echo "$out" | grep -q "usage:" || { echo "$out"; fail "unknown stage: exit $rc, expected 2 with a usage line"; }
echo "unknown stage: usage, exit 2: ok"
out=$(OUT=$work/o1 PREFIX=$work/p1 BUILD=$work/b1 CARRY=$work/none bash "$src/scripts/gpu-check.sh" deps 2>&1); rc=$?
[ $rc -eq 1 ] && echo "$out" | grep -q "FAILED: .*run scripts/gpu-carry.sh" ||
  { echo "$out"; fail "missing carry: exit $rc, expected 1 naming scripts/gpu-carry.sh"; }
[ -f "$work/o1/deps.log" ] || fail "no deps.log under OUT"
echo "missing carried folder: one line, exit 1, log under OUT: ok"
[ -d "$src/.gpu-carry/debs" ] || { echo "skipped the unpack and configure: no $src/.gpu-carry/debs (run scripts/gpu-carry.sh)"; exit 77; }
command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ] || { echo "skipped the configure: no nvcc"; exit 77; }
OUT=$work/o2 PREFIX=$work/p2 BUILD=$work/b2 CARRY=$src/.gpu-carry bash "$src/scripts/gpu-check.sh" deps >"$work/deps.out" 2>&1
rc=$?
[ $rc -eq 0 ] || { cat "$work/deps.out"; fail "gpu-check.sh deps exited $rc"; }
grep -q "configured; stage deps done" "$work/deps.out" || { cat "$work/deps.out"; fail "no 'stage deps done' line"; }
for v in DNNL_LIBRARY PROTOC_C ZLIB_LIBRARY_RELEASE PNG_LIBRARY_RELEASE JPEG_LIBRARY_RELEASE; do
  grep -E "^$v:[A-Z]+=$work/p2/" "$work/b2/CMakeCache.txt" >/dev/null || fail "$v is not from the prefix: $(grep -E "^$v:" "$work/b2/CMakeCache.txt")"
done
[ -x "$work/p2/usr/bin/protoc-c" ] || fail "protoc-c not unpacked into the prefix"
echo "deps stage: unpacked into the prefix, configured with CUDA and NCCL, every carried dependency from the prefix: ok"
