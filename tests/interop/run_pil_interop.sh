#!/bin/sh
# run_pil_interop.sh TEST_IMAGEFOLDER — the `interop` ctest of the image
# folders' pixels against PIL's (tests/interop/pil_interop.py): finds a
# Python with Pillow and NumPy (TOWER_PYTHON, else python3) and runs the
# script on test_imagefolder's `load` mode.  Exits 77 (skipped) when
# `import PIL` or `import numpy` fails.
set -e
here=$(cd "$(dirname "$0")" && pwd)
py=${TOWER_PYTHON:-python3}
for mod in PIL numpy; do
  if ! "$py" -c "import $mod" >/dev/null 2>&1; then
    echo "skipped: '$py' cannot import $mod (pip install pillow numpy, or set TOWER_PYTHON)"
    exit 77
  fi
done
exec "$py" "$here/pil_interop.py" "$1"
