#!/usr/bin/env bash
# One GPU call for issues 44-46 when device time is short: the short form of the MoE / Qwen3.5
# checks (bench/issues_44_45_call5.sh: GPU tests with the opt-in kernels on, one MoE LoRA round
# beside transformers + PEFT, parity of the small Qwen3.5 and Qwen3 cases), then the channels-last
# ResNets (bench/resnet_nhwc_call.sh). Run on the GPU machine from the repo root:
#   BUILD=build-gpu OUT=/tmp/out bash bench/issues_44_45_46_call.sh
set -u
BUILD=${BUILD:-build-gpu}; OUT=${OUT:-/tmp/call}
export BUILD
mkdir -p "$OUT"
DEADLINE_S=${MOE_S:-150} OUT=$OUT/moe-qwen bash bench/issues_44_45_call5.sh 2>&1 | tee "$OUT/moe-qwen.txt"
DEADLINE_S=${RESNET_S:-390} OUT=$OUT/resnet bash bench/resnet_nhwc_call.sh 2>&1 | tee "$OUT/resnet.txt"
# Few files come back from the device: one archive beside the two transcripts.
(cd "$OUT" && tar czf all.tgz moe-qwen resnet && rm -rf moe-qwen resnet)
