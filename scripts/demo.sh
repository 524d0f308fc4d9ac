#!/usr/bin/env bash
# Quick start, step 1: install the Debian dependencies, build, and run the demo: a small ViT
# trained on Fashion-MNIST (on the GPU when there is one), ending with test accuracy and the
# memory breakdown. Arguments are passed to `leantrain train` (e.g. --epochs 1).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
bash scripts/build.sh leantrain
exec ./build/leantrain train "$@"
