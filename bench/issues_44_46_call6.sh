#!/usr/bin/env bash
# Issues 44 and 46, one GPU call: cuDNN's backend API for the convolutions checked and timed
# (bench/conv_graph_call.sh: GPU tests with LEANTRAIN_CUDNN_CONV_GRAPH=1, resnet50/152 B32 legacy
# vs graph vs torchvision), the cuDNN attention tests (the descriptor helpers moved in de67526),
# one Qwen3.5-2B LoRA throughput run (B1 x T4096) and where its step's kernel time goes
# (bench/profile_train_kernels.sh, one step under Nsight Compute).
#   BUILD=build-gpu OUT=/tmp/call6 bash bench/issues_44_46_call6.sh
set -u
BUILD=${BUILD:-build-gpu}; OUT=${OUT:-/tmp/call6}
export BUILD
mkdir -p "$OUT"
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
OUT=$OUT/cg bash bench/conv_graph_call.sh > "$OUT/conv-graph.txt" 2>&1
el "conv graph"; cat "$OUT/conv-graph.txt" | cut -c1-600
timeout 120 "./$BUILD/leantrain_tests" --gtest_brief=1 --gtest_filter='CudnnAttention*:*Cudnn*' > "$OUT/cudnn-attn.txt" 2>&1
el "cudnn attention tests"; grep -E "FAILED|PASSED|tests ran" "$OUT/cudnn-attn.txt" | head -8
OUT=$OUT/qwen35 PEER=0 ROUNDS=1 timeout 150 bash bench/qwen35_lora.sh throughput 2>&1 | cut -c1-400
el "qwen3.5 throughput"
timeout "${PROF_S:-200}" bash bench/profile_train_kernels.sh "$OUT/prof-qwen35" --model qwen3.5-2b --data synthetic \
  --batch 1 --seq-len 4096 --precision bf16-true --lora-rank 16 --lora-alpha 32 --checkpoint blocks --steps 1 \
  --eval-batches 0 > "$OUT/prof-qwen35.md" 2>&1
el "qwen3.5 profile"; head -40 "$OUT/prof-qwen35.md"
rm -rf "$OUT/prof-qwen35"
(cd "$OUT" && tar czf all.tgz cg qwen35 && rm -rf cg qwen35)
