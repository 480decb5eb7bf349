#!/bin/sh
# run_tf_interop.sh HELPER [TOWER] — the `interop` ctest for io/: finds a
# Python with TensorFlow (TOWER_PYTHON, else python3) and runs
# tf_interop.py; exits 77 (skipped) when `import tensorflow` fails.
here=$(cd "$(dirname "$0")" && pwd)
py=${TOWER_PYTHON:-python3}
if ! "$py" -c "import tensorflow" >/dev/null 2>&1; then
  echo "skipped: '$py' cannot import tensorflow (pip install tensorflow-cpu, or set TOWER_PYTHON)"
  exit 77
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tower_tf_interop_XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
"$py" "$here/tf_interop.py" "$@" "$tmp"
