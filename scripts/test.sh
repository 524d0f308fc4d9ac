#!/usr/bin/env bash
# Quick start, step 2: build everything and run all tests (unit tests and the CLI's end-to-end
# scripts) with ctest. Installs missing Debian dependencies first.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh --tests
bash scripts/build.sh
cd build
ctest --output-on-failure -j "$(nproc)"
