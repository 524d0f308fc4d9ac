#!/usr/bin/env bash
# Configures and builds leantrain into build/ (Release; CUDA when nvcc is found, or set
# LEANTRAIN_CUDA=ON/OFF). Extra arguments are ninja targets. The MPI communicator is built
# whenever OpenMPI is installed (deps.sh installs it), CUDA or not: CMake leaves it off by default
# in CUDA builds only so that a binary carried to a GPU machine needs no libmpi.
# The unit tests' own code is compiled at -O1 with a precompiled header (CMakeLists.txt); the
# library, the CLI and the tools at -O3.
set -euo pipefail
cd "$(dirname "$0")/.."
# lld links in a fifth of the default linker's time (scripts/deps.sh --tests installs it).
LINKER=
command -v ld.lld >/dev/null && LINKER=lld
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DLEANTRAIN_CUDA="${LEANTRAIN_CUDA:-AUTO}" \
  -DLEANTRAIN_MPI=ON -DLEANTRAIN_LINKER="$LINKER" -DLEANTRAIN_UNITY="${LEANTRAIN_UNITY:-OFF}" \
  -DLEANTRAIN_CUDA_ARCH="${LEANTRAIN_CUDA_ARCH:-90}" >/dev/null
ninja -C build "$@"
