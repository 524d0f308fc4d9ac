#!/usr/bin/env bash
# Configures and builds leantrain into build/ (Release; CUDA when nvcc is found, or set
# LEANTRAIN_CUDA=ON/OFF). Extra arguments are ninja targets.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DLEANTRAIN_CUDA="${LEANTRAIN_CUDA:-AUTO}" >/dev/null
ninja -C build "$@"
