#!/bin/sh
# run_keras_layers.sh HELPER — the `interop` ctest test_layers_keras: finds
# a Python with TensorFlow and Keras (TOWER_PYTHON, else python3) and runs
# keras_layers.py; exits 77 (skipped) when `import tensorflow, keras` fails.
here=$(cd "$(dirname "$0")" && pwd)
py=${TOWER_PYTHON:-python3}
if ! "$py" -c "import tensorflow, keras" >/dev/null 2>&1; then
  echo "skipped: '$py' cannot import tensorflow and keras (pip install tensorflow-cpu, or set TOWER_PYTHON)"
  exit 77
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tower_keras_layers_XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
"$py" "$here/keras_layers.py" "$1" "$tmp"
