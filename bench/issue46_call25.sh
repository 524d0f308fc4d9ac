#!/usr/bin/env bash
# The tree as it stands on a GPU, one device call (binaries of BUILD):
#   1. GPU tests around the last stops' changes (gradient parts as the default, kept casts, the
#      rotary kernels' shared angle setup, fused steps, the LLaMA family, the norms and clipping);
#   2. TinyLlama-1.1B B4 x T1024 bf16-mixed AdamW, cuDNN attention: the default step and the
#      checkpointed config (--checkpoint blocks --fused-step), each with and without --keep-casts
#      (the flag, not the knob), the default step also with the norm taken by the update
#      (LEANTRAIN_NORM_IN_UPDATE=1, -niu rows), the checkpointed config also with its blocks'
#      unread tails dry (LEANTRAIN_RECOMPUTE_TAIL=1, -tail rows; -tail-os also with the updates on
#      the optimizer stream, LEANTRAIN_OPT_STREAM=1), two rounds, alternating; every
#      row's peaks beside its plan (tinyllama.jsonl);
#   3. GPT-2 124M beside llm.c's cuDNN build (LLMC), two rounds: leantrain_bench's lean default and
#      the fast config (--lean-saves 0 --loss-chunk 8192, eager head, kept casts), then
#      `leantrain train` on both for 40 steps, the fast one also with LEANTRAIN_NORM_IN_UPDATE=1;
#      GPT-2 with --checkpoint blocks, with and without the dry tail (fc2's product, the last add);
#   4. the CUPTI timeline of `leantrain train` GPT-2 (fast config) and of TinyLlama's default
#      step with --keep-casts, without and with the norm taken by the update, and the checkpointed
#      config with --keep-casts and the tails dry: where the steps' time goes now;
#   5. the randomized plan sweep, seed 8 (SWEEP_N configurations, default 30): the first sweep with
#      gradient parts as the default; seed 9 with LEANTRAIN_NORM_IN_UPDATE=1 LEANTRAIN_RECOMPUTE_TAIL=1.
# PART=1 runs 1-3, PART=2 runs 4-5 (call 24's parts took 40 s; both fit one call):
#   PART=1 BUILD=build-gpu LLMC=/tmp/train_gpt2cu OUT=$OUT/p1 bash bench/issue46_call25.sh
#   PART=2 BUILD=build-gpu OUT=$OUT/p2 bash bench/issue46_call25.sh
# The binaries travel xz-compressed (gpu-carry/{main,tests,bench,llmc}: 36 MB with llm.c's).
set -u
PART=${PART:-1}
CALL=call25-part$PART; CALL_OUT_DEFAULT=/tmp/$CALL; source bench/call_lib.sh
TL_FLAGS="--model tinyllama-1.1b --data synthetic --batch 4 --seq-len 1024 --precision bf16-mixed --attention-kernel cudnn"
NIU=LEANTRAIN_NORM_IN_UPDATE=1 TAIL=LEANTRAIN_RECOMPUTE_TAIL=1
if [ "$PART" = 1 ]; then
gpu_tests 'NormInUpdate*:ScalarReadback*:RecomputeTail*:CheckpointTrain*:GradientParts*:KeptCasts*:FusedStep*:Llama*:*Rope*:*MoeCuda*:*F32WeightGrads*:LinearCrossEntropy*:Qwen*:Gemma*:*Clip*:*GradNorm*:*Adam*'
for round in 1 2; do
  tinyllama_run mfu ""
  tinyllama_run mfu-niu "" $NIU
  tinyllama_run mfu-kc "--keep-casts"
  tinyllama_run mfu-kc-niu "--keep-casts" $NIU
  tinyllama_run ckpt "--checkpoint blocks --fused-step"
  tinyllama_run ckpt-tail "--checkpoint blocks --fused-step" $TAIL
  tinyllama_run ckpt-kc "--checkpoint blocks --fused-step --keep-casts"
  tinyllama_run ckpt-kc-tail "--checkpoint blocks --fused-step --keep-casts" $TAIL
  tinyllama_run ckpt-tail-os "--checkpoint blocks --fused-step" $TAIL LEANTRAIN_OPT_STREAM=1
  el "tinyllama round $round"
done
FAST="--lean-saves 0 --loss-chunk 8192"; E="LEANTRAIN_LOSS_CHUNK_EAGER=1 LEANTRAIN_KEEP_CASTS=1"
gpt2_beside_llmc "lean||" "fast|$FAST|$E"
for v in "lean||" "fast|--no-lean-saves --loss-chunk 8192 --keep-casts|LEANTRAIN_LOSS_CHUNK_EAGER=1" \
         "fast-niu|--no-lean-saves --loss-chunk 8192 --keep-casts|LEANTRAIN_LOSS_CHUNK_EAGER=1 $NIU"; do
  IFS='|' read -r label flags envs <<< "$v"
  smi_peak env $envs timeout 150 "./$BUILD/leantrain" train --model gpt2-124m --data synthetic --batch 16 --seq-len 1024 \
    --precision bf16-mixed --attention-kernel cudnn $flags --device cuda --steps 40 --eval-batches 0 --log-every 10 \
    --metrics-json "$OUT/train40-$label.json" > "$OUT/train40-$label.log" 2>&1
  echo "gpt2 train 40 steps $label: $(python3 -c "import json;d=json.load(open('$OUT/train40-$label.json'));print(round(d['steady_items_per_s']),'tok/s', round(16384e3/d['steady_items_per_s'],2),'ms, peak',d['peak_allocated_bytes'],d['peak_reserved_bytes'])" 2>&1 | tail -1)"
done
for v in "ckpt|" "ckpt-tail|$TAIL"; do  # GPT-2's checkpointed blocks: fc2's product and the last add dry
  IFS='|' read -r label envs <<< "$v"
  env $envs timeout 150 "./$BUILD/leantrain" train --model gpt2-124m --data synthetic --batch 16 --seq-len 1024 \
    --precision bf16-mixed --attention-kernel cudnn --checkpoint blocks --device cuda --steps 30 --eval-batches 0 \
    --log-every 10 --metrics-json "$OUT/gpt2-$label.json" > "$OUT/gpt2-$label.log" 2>&1
  echo "gpt2 checkpointed $label: $(python3 -c "import json;d=json.load(open('$OUT/gpt2-$label.json'));print(round(d['steady_items_per_s']),'tok/s, peak',d['peak_allocated_bytes'],d['peak_reserved_bytes'])" 2>&1 | tail -1)"
done
el "gpt2"
else
mkdir -p "$OUT/lib"
if bash bench/gpu_timeline/build.sh "$OUT/lib" > /dev/null; then
  for v in "gpt2-train|--model gpt2-124m --data synthetic --batch 16 --seq-len 1024 --precision bf16-mixed --attention-kernel cudnn --no-lean-saves --loss-chunk 8192 --keep-casts|LEANTRAIN_LOSS_CHUNK_EAGER=1|4" \
           "tl-kc|$TL_FLAGS --keep-casts||3" "tl-kc-niu|$TL_FLAGS --keep-casts|$NIU|3" \
           "tl-ckpt-kc-tail|$TL_FLAGS --checkpoint blocks --fused-step --keep-casts|$TAIL|3"; do
    IFS='|' read -r label flags envs skip <<< "$v"
    env $envs CUDA_INJECTION64_PATH=$OUT/lib/libgpu_timeline.so GPU_TIMELINE_OUT=$OUT/tl-$label.csv timeout 150 \
      "./$BUILD/leantrain" train $flags --device cuda --steps 10 --eval-batches 0 --log-every 5 > "$OUT/tl-$label.log" 2>&1
    python3 bench/gpu_timeline/gaps.py "$OUT/tl-$label.csv" --skip "$skip" > "$OUT/gaps-$label.md" 2>&1
    sed -n '/^mean/,/^largest/p' "$OUT/gaps-$label.md" | head -8; xz -T8 -f "$OUT/tl-$label.csv"
  done
fi
rm -rf "$OUT/lib"
el "timelines"
OUT=$OUT/sweep8 bash bench/plan_sweep.sh 8 "${SWEEP_N:-30}" | tail -3
env $NIU $TAIL OUT=$OUT/sweep9-knobs bash bench/plan_sweep.sh 9 "${SWEEP_N:-30}" | tail -3
el "sweep"
fi
tar -C "$OUT" -czf "$OUT/$CALL.tgz" --exclude="$CALL.tgz" . 2>/dev/null
