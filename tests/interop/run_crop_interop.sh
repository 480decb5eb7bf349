#!/bin/sh
# run_crop_interop.sh TEST_IMAGEFOLDER — the `interop` ctest of the random
# crop of `tower train --resize_mode random_crop` against TensorFlow's
# sample_distorted_bounding_box and PIL's pixels
# (tests/interop/crop_interop.py): finds a Python with TensorFlow, Pillow and
# NumPy (TOWER_PYTHON, else python3) and runs the script on
# test_imagefolder's `boxes` and `crop` modes.  Exits 77 (skipped) when one
# of them does not import.
set -e
here=$(cd "$(dirname "$0")" && pwd)
py=${TOWER_PYTHON:-python3}
for mod in tensorflow PIL numpy; do
  if ! "$py" -c "import $mod" >/dev/null 2>&1; then
    echo "skipped: '$py' cannot import $mod (pip install tensorflow-cpu pillow numpy, or set TOWER_PYTHON)"
    exit 77
  fi
done
exec "$py" "$here/crop_interop.py" "$1"
