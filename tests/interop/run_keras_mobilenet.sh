#!/bin/sh
# run_keras_mobilenet.sh HELPER — the `interop` ctest test_model_mobilenet_keras:
# finds a Python with TensorFlow and Keras (TOWER_PYTHON, else python3) and
# runs keras_mobilenet.py at 96x96 (alpha 0.35, batch 4: the last maps are
# 3x3, so the last batch norms see 36 rows; at 32x32 they see 4 and the
# gradients of a network at initialisation amplify rounding to about 1e-2
# on both sides); exits 77 (skipped) when `import tensorflow, keras` fails.
here=$(cd "$(dirname "$0")" && pwd)
py=${TOWER_PYTHON:-python3}
if ! "$py" -c "import tensorflow, keras" >/dev/null 2>&1; then
  echo "skipped: '$py' cannot import tensorflow and keras (pip install tensorflow-cpu, or set TOWER_PYTHON)"
  exit 77
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tower_keras_mobilenet_XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
rc=0
for size in 96; do
  echo "== mobilenet_v2 ${size}x${size}x3, alpha 0.35, batch 4"
  "$py" "$here/keras_mobilenet.py" "$1" "$tmp" "$size" 0.35 4 || rc=1
done
exit $rc
