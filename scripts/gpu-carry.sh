#!/usr/bin/env bash
# gpu-carry.sh — run HERE (the CPU machine, with apt and network) before a
# GPU session: fills .gpu-carry/ (git-ignored) with what scripts/gpu-check.sh
# needs on the GPU machine, which can fetch nothing.
#
#   .gpu-carry/debs/*.deb        Debian packages the build needs beyond nvcc,
#                                CUDA, cuDNN, NCCL, CMake and a C compiler:
#                                protobuf-c (runtime, headers, protoc-c and its
#                                libprotoc/libprotobuf), oneDNN, libpng,
#                                libjpeg, zlib headers, pkgconf.  gpu-check.sh
#                                unpacks them with dpkg -x into a prefix, never /.
#   .gpu-carry/fashion-mnist/    the four Fashion-MNIST .gz files, for the GPU
#                                tests that train (TOWER_FASHION_MNIST_DIR).
#
# Then checks that the working tree plus .gpu-carry fits the device tool's
# 64 MiB, and prints the device `run` call (docs/gpu.md).  Re-running
# replaces .gpu-carry/.  Fails (non-zero, one line) when a package cannot be
# downloaded or the total is over the limit.
#
# usage: scripts/gpu-carry.sh [fashion-mnist source dir, default /usr/share/datasets/fashion-mnist]
set -euo pipefail
cd "$(dirname "$0")/.."
FM_SRC=${1:-/usr/share/datasets/fashion-mnist}
CARRY=.gpu-carry
LIMIT_MIB=64

# What the build needs (CMakeLists.txt, io/CMakeLists.txt, ps/CMakeLists.txt),
# with the run-time dependencies that a stock CUDA image may lack.
PKGS=(libprotobuf-c1 libprotobuf-c-dev protobuf-c-compiler libprotoc32 libprotobuf32
      libdnnl2 libdnnl-dev
      libpng16-16 libpng-dev libjpeg62-turbo libjpeg62-turbo-dev libjpeg-dev zlib1g-dev
      pkgconf pkgconf-bin libpkgconf3)

rm -rf "$CARRY"
mkdir -p "$CARRY/debs" "$CARRY/fashion-mnist"
(cd "$CARRY/debs" && apt-get download "${PKGS[@]}" >/dev/null) ||
    { echo "gpu-carry: apt-get download failed for one of: ${PKGS[*]}" >&2; exit 1; }
# apt names files with the epoch as "%3a": plain names travel and unpack the same.
for f in "$CARRY"/debs/*%3a*; do [ -e "$f" ] && mv "$f" "${f//%3a/_}"; done
for f in train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz; do
    [ -f "$FM_SRC/$f" ] || { echo "gpu-carry: $FM_SRC/$f is missing (Debian package dataset-fashion-mnist)" >&2; exit 1; }
    cp "$FM_SRC/$f" "$CARRY/fashion-mnist/"
done

# What travels: tracked + untracked-not-ignored files, and the carried folder.
tree_bytes=$( { git ls-files -z; git ls-files -z --others --exclude-standard; } | xargs -0 -r stat -c %s -- 2>/dev/null |
             awk '{ s += $1 } END { print s + 0 }')
carry_bytes=$(du -sb "$CARRY" | cut -f1)
total=$((tree_bytes + carry_bytes))
printf 'gpu-carry: working tree %.1f MiB + %s %.1f MiB = %.1f MiB (limit %d MiB)\n' \
    "$(echo "$tree_bytes / 1048576" | bc -l)" "$CARRY" "$(echo "$carry_bytes / 1048576" | bc -l)" \
    "$(echo "$total / 1048576" | bc -l)" "$LIMIT_MIB"
if [ "$total" -gt $((LIMIT_MIB * 1048576)) ]; then
    echo "gpu-carry: over the device tool's $LIMIT_MIB MiB: carry less" >&2
    exit 1
fi
echo "gpu-carry: ready.  Device calls, one stage each, each within 10 minutes (docs/gpu.md):"
for stage in tests modes train memcheck racecheck bench; do
    echo "  run(command=\"bash scripts/gpu-check.sh $stage\", carry=[\"$CARRY\"], timeout_s=600)"
done
