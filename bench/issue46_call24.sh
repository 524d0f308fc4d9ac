#!/usr/bin/env bash
# Gradient parts, kept casts over the stacked weights, and the norm queued before the loss read,
# one device call (binaries of BUILD beside OLD's leantrain, db2b651):
#   1. GPU tests around the changes (GradientParts.*, KeptCasts.*, FusedStep.*, the LLaMA-family,
#      MoE, F32 weight-gradient and fused-loss tests);
#   2. TinyLlama-1.1B B4 x T1024 bf16-mixed AdamW, cuDNN attention, the default step and the
#      checkpointed config (--checkpoint blocks --fused-step): OLD, then BUILD plain (the norm
#      queued early), with LEANTRAIN_GRADIENT_PARTS=1 (gp) and with it and LEANTRAIN_KEEP_CASTS=1
#      (gpkc); alternating, two rounds; every row's peaks beside its plan (tinyllama.jsonl);
#   3. the CUPTI timeline of BUILD's default step and checkpointed config with both knobs; both
#      knobs with the updates on their own stream (LEANTRAIN_OPT_STREAM=1) beside them without;
#   4. GPT-2 124M beside llm.c's cuDNN build (LLMC), two rounds: the lean default and the fast
#      config (--lean-saves 0 --loss-chunk 8192, eager head, kept casts; GPT-2 stacks no weights);
#   5. `leantrain train` GPT-2 with both knobs beside its plan, and 40 steps of it (lean and fast)
#      for its tokens/s; the plan sweep, seed 8, both knobs.
# PART=1 runs 1-2, PART=2 runs 3-5 (each well inside a call's 10 minutes).
#   PART=1 BUILD=build-gpu OLD=build-old OUT=$OUT bash bench/issue46_call24.sh
#   PART=2 BUILD=build-gpu LLMC=gpu-carry/llmc/train_gpt2cu OUT=$OUT bash bench/issue46_call24.sh
set -u
CALL=call24-part$PART; CALL_OUT_DEFAULT=/tmp/$CALL; source bench/call_lib.sh
GP=LEANTRAIN_GRADIENT_PARTS=1; KC=LEANTRAIN_KEEP_CASTS=1
TL_FLAGS="--model tinyllama-1.1b --data synthetic --batch 4 --seq-len 1024 --precision bf16-mixed --attention-kernel cudnn"
if [ "$PART" = 1 ]; then
gpu_tests 'GradientParts*:KeptCasts*:FusedStep*:Llama*:*MoeCuda*:*F32WeightGrads*:LinearCrossEntropy*:Qwen*:Gemma*:Clip*:*GradNorm*'
NEW=$BUILD
for round in 1 2; do
  for cfg in "mfu|" "ckpt|--checkpoint blocks --fused-step"; do
    IFS='|' read -r name flags <<< "$cfg"
    BUILD=$OLD tinyllama_run "$name-old" "$flags"
    BUILD=$NEW tinyllama_run "$name" "$flags"
    BUILD=$NEW tinyllama_run "$name-gp" "$flags" $GP
    BUILD=$NEW tinyllama_run "$name-gpkc" "$flags" $GP $KC
  done
  el "tinyllama round $round"
done
BUILD=$NEW
else
# GPT2_ONLY=1: only GPT-2 beside llm.c and `leantrain train` GPT-2 (what the device time left allowed).
if [ "${GPT2_ONLY:-0}" != 1 ]; then
mkdir -p "$OUT/lib"
if bash bench/gpu_timeline/build.sh "$OUT/lib" > /dev/null; then
  for cfg in "mfu|" "ckpt|--checkpoint blocks --fused-step"; do
    IFS='|' read -r name flags <<< "$cfg"
    env $GP $KC CUDA_INJECTION64_PATH=$OUT/lib/libgpu_timeline.so GPU_TIMELINE_OUT=$OUT/tl-$name.csv timeout 150 "./$BUILD/leantrain" \
      train $TL_FLAGS $flags --device cuda --steps 8 --eval-batches 0 --log-every 4 > "$OUT/tl-$name-traced.log" 2>&1
    python3 bench/gpu_timeline/gaps.py "$OUT/tl-$name.csv" --skip 3 > "$OUT/gaps-tl-$name.md" 2>&1
    sed -n '1,/^largest/p' "$OUT/gaps-tl-$name.md" | tail -8; xz -T8 -f "$OUT/tl-$name.csv"
  done
fi
rm -rf "$OUT/lib"
el "timeline"
# The updates on a stream of their own beside the backward (LEANTRAIN_OPT_STREAM=1), with both knobs:
# the checkpointed config, and the default step as --fused-step; two rounds beside the plain gpkc rows.
for round in 1 2; do
  tinyllama_run ckpt-gpkc "--checkpoint blocks --fused-step" $GP $KC
  tinyllama_run ckpt-gpkc-os1 "--checkpoint blocks --fused-step" $GP $KC LEANTRAIN_OPT_STREAM=1
  tinyllama_run mfu-gpkc "" $GP $KC
  tinyllama_run fused-gpkc-os1 "--fused-step" $GP $KC LEANTRAIN_OPT_STREAM=1
done
el "opt stream"
fi
FAST="--lean-saves 0 --loss-chunk 8192"; E="LEANTRAIN_LOSS_CHUNK_EAGER=1 $KC"
gpt2_beside_llmc "lean||" "fast|$FAST|$E"
[ "${GPT2_ONLY:-0}" != 1 ] && train_vs_plan gpt2 "$E $GP" --model gpt2-124m --data synthetic --batch 16 --seq-len 1024 --precision bf16-mixed --no-lean-saves \
  --attention-kernel cudnn --loss-chunk 8192
el "gpt2 train"
# `leantrain train` itself on the fast config, 40 steps (the loader's host-made batches, the norm and
# clip as llm.c does them), for its tokens/s beside leantrain_bench's.
for v in "lean||" "fast|--no-lean-saves --loss-chunk 8192|$E"; do
  IFS='|' read -r label flags envs <<< "$v"
  smi_peak env $envs timeout 150 "./$BUILD/leantrain" train --model gpt2-124m --data synthetic --batch 16 --seq-len 1024 \
    --precision bf16-mixed --attention-kernel cudnn $flags --device cuda --steps 40 --eval-batches 0 --log-every 10 \
    --metrics-json "$OUT/train40-$label.json" > "$OUT/train40-$label.log" 2>&1
  echo "gpt2 train 40 steps $label: $(python3 -c "import json;d=json.load(open('$OUT/train40-$label.json'));print(round(d['steady_items_per_s']),'tok/s', round(16384e3/d['steady_items_per_s'],2),'ms')" 2>&1 | tail -1)"
done
[ "${GPT2_ONLY:-0}" != 1 ] && env $GP $KC OUT=$OUT/sweep8 bash bench/plan_sweep.sh 8 "${SWEEP_N:-30}" | tail -3
el "sweep"
fi
tar -C "$OUT" -czf "$OUT/$CALL.tgz" --exclude="$CALL.tgz" . 2>/dev/null
