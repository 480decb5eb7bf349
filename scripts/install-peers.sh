#!/usr/bin/env bash
# install-peers.sh — the peer frameworks for bench/ (never for tests): a virtual environment in
# ~/.cache/tower/peer-venv with PyTorch 2.x and TensorFlow 2.x (tensorflow-cpu) from PyPI, so that
# bench/run_*_bench.sh and bench/run_accuracy_compare.sh measure Tower side by side with both.
#
# Where it sits: scripts/; bench scripts read PEER_TORCH_PYTHON / TOWER_PYTHON, and this script
# prints the export lines that point them here.  It installs nothing system-wide and is not part
# of CI (PyTorch's wheels with their CUDA libraries are several GiB).  Idempotent: a venv that
# already imports both is left alone.  Fails with one line when PyPI is out of reach.
set -euo pipefail
venv="${XDG_CACHE_HOME:-$HOME/.cache}/tower/peer-venv"
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import torch, tensorflow" 2>/dev/null; then
  :
else
  echo "install-peers: preparing $venv (torch, tensorflow-cpu, numpy)"
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade pip
  "$venv/bin/python" -m pip install -q torch tensorflow-cpu numpy ||
    { echo "install-peers: could not install torch and tensorflow-cpu from PyPI into $venv" >&2; exit 1; }
fi
"$venv/bin/python" -c "import torch, tensorflow as tf; print('install-peers: torch', torch.__version__, '/ tensorflow', tf.__version__)"
echo "export PEER_TORCH_PYTHON=$venv/bin/python TOWER_PYTHON=$venv/bin/python"
