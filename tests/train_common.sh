# train_common.sh — sourced by the training tests: a temporary directory and
# Fashion-MNIST converted to TFRecords in it (skip, exit 77, without the
# Debian package dataset-fashion-mnist; a failure instead under
# TOWER_TEST_REQUIRE_GPU=1).  TOWER_FASHION_MNIST_DIR names another folder
# holding the four .gz files (the GPU check's carried copy).
set -euo pipefail
tower=$1
src=${TOWER_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
if [ ! -f "$src/train-images-idx3-ubyte.gz" ]; then
  source "$(dirname "${BASH_SOURCE[0]}")/gpu_skip.sh"
  gpu_skip "$src is missing (Debian package dataset-fashion-mnist, or set TOWER_FASHION_MNIST_DIR)"
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
convert_fashion_mnist() {
  "$tower" convert --from idx --images "$src/train-images-idx3-ubyte.gz" --labels "$src/train-labels-idx1-ubyte.gz" \
    --out "$work/train" --num_shards 2 >/dev/null
  "$tower" convert --from idx --images "$src/t10k-images-idx3-ubyte.gz" --labels "$src/t10k-labels-idx1-ubyte.gz" \
    --out "$work/test" --num_shards 1 >/dev/null
}
fail() { echo "FAIL: $*"; exit 1; }
