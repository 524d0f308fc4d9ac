#!/usr/bin/env bash
# Issues 44 and 45 on the GPU in one 10-minute device call (device time is scarce: one call has
# to carry both). Phase 1 runs three checks side by side, none of them timed: the GPU unit tests of
# Qwen3.5, MoE, NF4 and cuDNN attention; parity with transformers (Qwen3.5, Qwen3-MoE, Mixtral);
# the Qwen3-30B-A3B QLoRA run (plan against measured peak, the loss over 50 steps on real text;
# its peak is its own process's, untouched by the others). Phase 2 runs the timed side-by-side
# benches alone on the GPU, one after another: Qwen3.5 LoRA against transformers + PEFT (our
# attention kernels, then cuDNN's), MoE LoRA against transformers + PEFT, Gemma-3-1B at T 8192.
#   BUILD=build-gpu COMMIT=abc1234 OUT=/tmp/out QLORA_DATA=fortunes.jsonl bash bench/issues_44_45_gpu.sh
set -u
BUILD=${BUILD:-build-gpu}; OUT=${OUT:-/tmp/issues-44-45}; COMMIT=${COMMIT:-$(git rev-parse --short HEAD)}
export BUILD COMMIT OUT
mkdir -p "$OUT"
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
el "phase 1"
(OUT=$OUT/moe-qlora ROUNDS=0 QLORA=1 timeout "${QLORA_S:-280}" bash bench/moe_lora.sh > "$OUT/qlora.log" 2>&1; el "qlora done" >> "$OUT/qlora.log") &
(timeout "${UNIT_S:-270}" "./$BUILD/leantrain_tests" --gtest_brief=1 \
  --gtest_filter='Moe*:DpoMoe.*:QuantNf4*:PackedDocuments.*:Ops/OpsBackends.*gated_delta*:Ops/OpsBackends.*causal_conv1d*:Ops/OpsBackends.*rms_norm_gated*:Ops/OpsBackends.*rotary_packed*:Ops/OpsBackends.*embedding_padding*:Ops/OpsBackends.*nf4*:GatedDelta*:CausalConv1d*:RmsNormGated*:PartialRotary*:Qwen35*:CudnnAttention.*' \
  > "$OUT/unit.txt" 2>&1; el "unit done" >> "$OUT/unit.txt") &
(timeout "${PARITY_S:-280}" python3 bench/peers/parity.py --bench "$BUILD/leantrain_bench" --out "$OUT" --commit "$COMMIT" \
  --only qwen3_5-small,qwen3_5-small-untied-t130,qwen3-moe-small,qwen3-moe-small-plain,mixtral-small,qwen3_5-2b \
  > "$OUT/parity.log" 2>&1; el "parity done" >> "$OUT/parity.log") &
timeout 60 bash bench/gpu_session.sh padding_idx > "$OUT/padding_idx.log" 2>&1
wait
el "phase 2"
OUT1=$OUT
(OUT=$OUT1/qwen35 ROUNDS=1 timeout "${QWEN_S:-130}" bash bench/qwen35_lora.sh throughput) > "$OUT/qwen35.log" 2>&1
el "qwen35 (ours + peer) done"
(OUT=$OUT1/qwen35-cudnn ROUNDS=1 PEER=0 QWEN35_EXTRA="--attention-kernel auto" timeout "${QWEN_AUTO_S:-60}" \
  bash bench/qwen35_lora.sh throughput) > "$OUT/qwen35-cudnn.log" 2>&1
el "qwen35 auto done"
(OUT=$OUT1/moe-lora ROUNDS=1 QLORA=0 timeout "${MOE_S:-150}" bash bench/moe_lora.sh) > "$OUT/moe-lora.log" 2>&1
el "moe bench done"
timeout "${GEMMA_S:-60}" bash bench/gpu_session.sh gemma3_long > "$OUT/gemma3-long.log" 2>&1
el "gemma3 long done"
