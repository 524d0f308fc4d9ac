#!/usr/bin/env bash
# Issues 44 and 45, second GPU call: what the first (issues_44_45_gpu.sh, binaries of 0797d07)
# left unrun, side by side in one call, none of it timed against a peer:
#   - parity with transformers for the cases the bf16 peer crash stopped (Qwen3-MoE, Mixtral,
#     Qwen3.5 small and 2B);
#   - Qwen35Model's GPU-vs-CPU packed-document test (its bound moved to 5e-4);
#   - the Qwen3-30B-A3B QLoRA run, 50 steps (plan against measured peak, the loss on real text);
#   - where a Qwen3.5-2B LoRA step and a 4-layer Qwen3-30B-A3B LoRA step spend their GPU time
#     (bench/profile_train_kernels.sh: Nsight Compute, each kernel replayed alone, summed by name);
#   - then alone on the GPU, timed: the MoE LoRA bench against transformers + PEFT (moe_lora.sh).
# The kernel tables run beside the other checks, so their absolute times are inflated by sharing
# the GPU; their shares say where the time goes.
#   BUILD=build-gpu COMMIT=abc1234 OUT=/tmp/out QLORA_DATA=fortunes.jsonl bash bench/issues_44_45_diagnose.sh
set -u
BUILD=${BUILD:-build-gpu}; OUT=${OUT:-/tmp/diagnose}; COMMIT=${COMMIT:-$(git rev-parse --short HEAD)}
export BUILD COMMIT
mkdir -p "$OUT"
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
(OUT=$OUT/qlora ROUNDS=0 QLORA=1 timeout "${QLORA_S:-520}" bash bench/moe_lora.sh > "$OUT/qlora.log" 2>&1
 el "qlora done" >> "$OUT/qlora.log"; cp "$OUT"/qlora/qlora-run.log "$OUT/qlora-run.log" 2>/dev/null) &
(timeout "${UNIT_S:-200}" "./$BUILD/leantrain_tests" --gtest_brief=1 --gtest_filter='Qwen35Model.Cuda*:PackedDocuments.*:Moe*:DpoMoe.*:QuantNf4*' \
  > "$OUT/unit.txt" 2>&1; el "unit done" >> "$OUT/unit.txt") &
(timeout "${PARITY_S:-420}" python3 bench/peers/parity.py --bench "$BUILD/leantrain_bench" --out "$OUT/parity" --commit "$COMMIT" \
  --only qwen3-moe-small,qwen3-moe-small-plain,mixtral-small,qwen3_5-small,qwen3_5-small-untied-t130,qwen3_5-2b \
  > "$OUT/parity.log" 2>&1; el "parity done" >> "$OUT/parity.log") &
(timeout "${PROF_S:-300}" bash bench/profile_train_kernels.sh "$OUT/prof-qwen35" --model qwen3.5-2b --data synthetic \
  --batch 1 --seq-len 4096 --precision bf16-true --lora-rank 16 --lora-alpha 32 --checkpoint blocks --steps 2 \
  --eval-batches 0 ${QWEN35_EXTRA:-} > "$OUT/prof-qwen35.md" 2>&1; el "qwen3.5 profile done" >> "$OUT/prof-qwen35.md"
 timeout "${PROF_MOE_S:-200}" bash bench/profile_train_kernels.sh "$OUT/prof-moe" --config bench/configs/qwen3-30b-a3b-4layers.json \
  --data synthetic --batch 2 --seq-len 2048 --precision bf16-true --lora-rank 16 --lora-alpha 32 --checkpoint blocks \
  --optimizer adamw --steps 2 --eval-batches 0 > "$OUT/prof-moe.md" 2>&1; el "moe profile done" >> "$OUT/prof-moe.md") &
wait
el "phase 1 done"
# Phase 2, alone on the GPU: the timed MoE LoRA bench, leantrain and transformers + PEFT.
(OUT=$OUT/moe-lora ROUNDS=1 QLORA=0 timeout "${MOE_S:-170}" bash bench/moe_lora.sh) > "$OUT/moe-lora.log" 2>&1
el "moe bench done"
rm -rf "$OUT/prof-qwen35" "$OUT/prof-moe"
# The device returns few files a call: the raw JSON of the QLoRA run and of parity travel as one archive.
(cd "$OUT" && tar czf raw.tgz qlora parity moe-lora 2>/dev/null && rm -rf qlora parity moe-lora)
