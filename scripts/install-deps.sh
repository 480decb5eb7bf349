#!/usr/bin/env bash
# install-deps.sh — install what Tower needs from Debian 12's packages.
# Runs as root, or through sudo; does nothing when everything is present.
# clang with its libFuzzer runtime and OpenMP, and valgrind, serve the robustness checks
# (scripts/fuzz.sh, the valgrind run in CI), not the trainer.  Open MPI (openmpi-bin: mpirun; libopenmpi-dev)
# serves training across hosts (cmake -DTOWER_MPI, docs/hosts.md).
set -euo pipefail
pkgs=(build-essential cmake pkg-config libprotobuf-c-dev protobuf-c-compiler libdnnl-dev
      zlib1g-dev libpng-dev libjpeg-dev dataset-fashion-mnist python3 python3-venv
      clang libclang-rt-14-dev libomp-dev valgrind openmpi-bin libopenmpi-dev)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
echo "install-deps: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
