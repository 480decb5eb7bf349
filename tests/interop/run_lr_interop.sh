#!/bin/sh
# run_lr_interop.sh TOWER HELPER — the `interop` ctest of the learning-rate
# schedules: finds a Python with TensorFlow (TOWER_PYTHON, else python3),
# makes a small TFRecord set with HELPER (test_fault_helper idx) and runs
# lr_interop.py, which trains with TOWER under each schedule and compares
# the learning rate of every step, read back from the events file, with
# TensorFlow's and Keras's own schedules.  Exits 77 (skipped) when `import
# tensorflow` fails.
set -e
here=$(cd "$(dirname "$0")" && pwd)
py=${TOWER_PYTHON:-python3}
if ! "$py" -c "import tensorflow" >/dev/null 2>&1; then
  echo "skipped: '$py' cannot import tensorflow (pip install tensorflow-cpu, or set TOWER_PYTHON)"
  exit 77
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/tower_lr_interop_XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
"$2" idx "$work/img" "$work/lab" 640
"$1" convert --from idx --images "$work/img" --labels "$work/lab" --out "$work/data" --num_shards 1 >/dev/null
TF_CPP_MIN_LOG_LEVEL=2 "$py" "$here/lr_interop.py" "$1" "$work/data-00000-of-00001.tfrecord" 640 "$work"
