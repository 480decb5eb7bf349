#!/bin/sh
# run_optim_interop.sh HELPER — the `interop` ctest of the optimizer table:
# finds a Python with TensorFlow (TOWER_PYTHON, else python3) and runs
# optim_interop.py; exits 77 (skipped) when `import tensorflow` fails.
here=$(cd "$(dirname "$0")" && pwd)
py=${TOWER_PYTHON:-python3}
if ! "$py" -c "import tensorflow" >/dev/null 2>&1; then
  echo "skipped: '$py' cannot import tensorflow (pip install tensorflow-cpu, or set TOWER_PYTHON)"
  exit 77
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tower_optim_interop_XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
TF_CPP_MIN_LOG_LEVEL=2 "$py" "$here/optim_interop.py" "$1" "$tmp"
