#!/usr/bin/env bash
# Issue 45's Qwen3-30B-A3B QLoRA run alone on the GPU (moe_lora.sh QLORA=1: NF4 base and experts,
# LoRA r 16 on every linear incl. the experts, B1 x T2048, checkpointed layers, 8-bit AdamW, real
# text): its 50 steps, plan against measured, the loss; then, in the time the call has left, the
# kernel tables of the MoE LoRA step and the Qwen3.5-2B LoRA step after this session's changes
# (with the opt-in kernels named in KNOBS), and Gemma-3-1B at T 8192. Kills stragglers between.
#   BUILD=build-gpu COMMIT=abc1234 OUT=/tmp/out QLORA_DATA=fortunes.jsonl bash bench/issues_44_45_qlora_call.sh
set -u
BUILD=${BUILD:-build-gpu}; OUT=${OUT:-/tmp/qlora-call}; COMMIT=${COMMIT:-$(git rev-parse --short HEAD)}
export BUILD COMMIT
mkdir -p "$OUT"
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
before() { [ $(( $(date +%s) - t0 + $1 )) -lt "${DEADLINE_S:-560}" ]; }
stragglers() { pkill -9 -f "$BUILD/leantrain" 2>/dev/null; sleep 1; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
(OUT=$OUT/qlora ROUNDS=0 QLORA=1 timeout "${QLORA_S:-420}" bash bench/moe_lora.sh) > "$OUT/qlora.log" 2>&1
stragglers; el "qlora done"
tail -4 "$OUT/qlora.log"
cp "$OUT/qlora/qlora-run.log" "$OUT/qlora-run.log" 2>/dev/null
# KNOBS: the opt-in kernels to profile with, e.g. "LEANTRAIN_ATTN_MMA_D256=1 LEANTRAIN_GDN_STAGE_ROWS=1".
if before 90; then
  env ${KNOBS:-} timeout 80 bash bench/profile_train_kernels.sh "$OUT/prof" --config bench/configs/qwen3-30b-a3b-4layers.json \
    --data synthetic --batch 2 --seq-len 2048 --precision bf16-true --lora-rank 16 --lora-alpha 32 --checkpoint blocks \
    --optimizer adamw --steps 2 --eval-batches 0 > "$OUT/prof-moe.md" 2>&1
  stragglers; rm -rf "$OUT/prof"; el "moe profile done"
fi
if before 100; then
  env ${KNOBS:-} timeout 90 bash bench/profile_train_kernels.sh "$OUT/prof" --model qwen3.5-2b --data synthetic --batch 1 \
    --seq-len 4096 --precision bf16-true --lora-rank 16 --lora-alpha 32 --checkpoint blocks --steps 2 --eval-batches 0 \
    > "$OUT/prof-qwen35.md" 2>&1
  stragglers; rm -rf "$OUT/prof"; el "qwen35 profile done"
fi
if before 70; then
  (OUT=$OUT/gemma3 timeout 60 bash bench/gpu_session.sh gemma3_long) > "$OUT/gemma3-long.log" 2>&1
  stragglers; el "gemma3 long done"; tail -3 "$OUT/gemma3-long.log"
fi
(cd "$OUT" && keep=$(ls -d qlora gemma3 qlora.log gemma3-long.log 2>/dev/null); [ -n "$keep" ] && tar czf raw.tgz $keep && rm -rf $keep)
el "all done"
