#!/bin/sh
# run_keras_nets.sh HELPER — the `interop` ctest test_model_nets_keras:
# finds a Python with TensorFlow and Keras (TOWER_PYTHON, else python3) and
# runs keras_nets.py for each network on a small input, so that it runs in
# about a minute on 2 cores: vgg16 at 32x32 (Keras's 4096-wide head), vgg11
# at 32x32 with a 64-wide head, resnet20 at 32x32 and resnet50 at 64x64
# (batch 4: conv5's maps are 2x2, so its batch norms see 16 rows; at 32x32
# they would see 4, where rounding is amplified on both sides); exits 77
# (skipped) when `import tensorflow, keras` fails.
here=$(cd "$(dirname "$0")" && pwd)
py=${TOWER_PYTHON:-python3}
if ! "$py" -c "import tensorflow, keras" >/dev/null 2>&1; then
  echo "skipped: '$py' cannot import tensorflow and keras (pip install tensorflow-cpu, or set TOWER_PYTHON)"
  exit 77
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tower_keras_nets_XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
rc=0
for run in "vgg16 32 4 0" "vgg11 32 4 64" "resnet20 32 4 0" "resnet50 64 4 0"; do
  set -- "$1" $run
  echo "== $2 ${3}x${3}x3, batch $4, 10 classes"
  "$py" "$here/keras_nets.py" "$1" "$tmp" "$2" "$3" "$4" "$5" || rc=1
done
exit $rc
