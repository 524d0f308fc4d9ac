#!/usr/bin/env bash
# BigBird on the GPU machine (issue 17), one call: the block-sparse CUDA unit tests, parity with
# transformers (full attention in training mode; block-sparse in eval mode, small and base), then
# seed 002's BigBird-RoBERTa-base recipe side by side with PyTorch (bench/encoders.sh, ONLY=bigbird).
# Expects the binaries in $BIN (relative to the repo root: leantrain, leantrain_bench, leantrain_tests)
# and writes to $OUT.
set -u
BIN=${BIN:-build}
OUT=${OUT:-/tmp/leantrain-bigbird}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
echo "== unit tests (CUDA)"
"$BIN/leantrain_tests" --gtest_filter='BlockSparse*:BlockOps.*' 2>&1 | tail -6 | tee "$OUT/unit.txt"
echo "== parity"
timeout 300 python3 bench/peers/parity.py --bench "$BIN/leantrain_bench" --out "$OUT" \
  --only bigbird-full-small,bigbird-sparse-small,bigbird-base-sparse 2>&1 | grep -v Warning | tee "$OUT/parity.txt"
echo "== encoders (BigBird recipe)"
BUILD="$BIN" OUT="$OUT/encoders" ONLY="${ONLY:-bigbird}" NO_COMPILE="${NO_COMPILE:-1}" bash bench/encoders.sh
cp "$OUT/encoders/encoders.jsonl" "$OUT/" 2>/dev/null
