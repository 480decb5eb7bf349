#!/usr/bin/env bash
# test.sh — the README's second command: install what is missing, build,
# and run the whole ctest suite.  GPU tests skip (exit 77) without a GPU;
# interop tests use TensorFlow, TensorBoard, safetensors and Pillow from PyPI in a
# virtual environment kept in ~/.cache/tower, and skip where PyPI is out of reach.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh "$@"
venv="${XDG_CACHE_HOME:-$HOME/.cache}/tower/interop-venv"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import tensorflow, tensorboard, safetensors, PIL" 2>/dev/null; then
  echo "test: preparing the interop environment (tensorflow-cpu, tensorboard, safetensors, pillow) in $venv"
  { python3 -m venv "$venv" && "$venv/bin/python" -m pip install -q --upgrade pip &&
    "$venv/bin/python" -m pip install -q tensorflow-cpu tensorboard safetensors numpy pillow; } ||
    echo "test: could not prepare the interop environment; interop tests will be skipped"
fi
[ -x "$venv/bin/python" ] && export TOWER_PYTHON="$venv/bin/python"
cd build
ctest --output-on-failure -j"$(nproc)"
