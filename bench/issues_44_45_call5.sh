#!/usr/bin/env bash
# The short form of issues_44_45_call4.sh for a call with little device time left (~150 s): the
# GPU tests of this round's kernels, one MoE LoRA run beside one transformers + PEFT run, and
# parity of the small Qwen3.5 grouped-head case (f32 and bf16) and qwen3-small, with the opt-in
# kernels written without a GPU on (LEANTRAIN_MOE_GEMM_PAIR, LEANTRAIN_NORM_HEADS_CUDA).
#   BUILD=build-gpu OUT=/tmp/out bash bench/issues_44_45_call5.sh
set -u
BUILD=${BUILD:-build-gpu}; OUT=${OUT:-/tmp/call5}
export BUILD
mkdir -p "$OUT"
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
stragglers() { pkill -9 -f "$BUILD/leantrain" 2>/dev/null; pkill -9 -f "bench/peers/" 2>/dev/null; sleep 1; }
nvidia-smi --query-gpu=name --format=csv,noheader
NEW="LEANTRAIN_MOE_GEMM_PAIR=1 LEANTRAIN_NORM_HEADS_CUDA=1"  # the opt-in kernels under test
env $NEW timeout 40 "./$BUILD/leantrain_tests" --gtest_brief=1 \
  --gtest_filter='NormHeads*:MoeCuda.*:Ops/OpsBackends.*norm_heads*:LoraLinearOp*' > "$OUT/unit.txt" 2>&1
stragglers; el "unit"; grep -E "FAILED|PASSED|tests ran" "$OUT/unit.txt" | head -8
(env $NEW OUT=$OUT/moe ROUNDS=1 PEER=0 MOE_EXTRA="--attention-kernel auto" timeout 60 bash bench/moe_lora.sh) > "$OUT/moe.log" 2>&1
stragglers; el "moe"; grep -h '"side": "leantrain"' "$OUT/moe/moe-lora.jsonl" | cut -c1-200
(cd bench/peers && timeout 45 python3 moe_lora_torch.py --warmup 2 --steps 6 2>&1 | tail -1) | cut -c1-260
stragglers; el "peer"
env $NEW timeout $(( ${DEADLINE_S:-150} - ($(date +%s) - t0) )) python3 bench/peers/parity.py --bench "$BUILD/leantrain_bench" \
  --out "$OUT/parity" --only qwen3_5-small,qwen3-small > "$OUT/parity.log" 2>&1
stragglers; el "parity"; grep -E '"case"' "$OUT/parity.log" | cut -c1-200 | head -6; tail -3 "$OUT/parity.log" | cut -c1-200
