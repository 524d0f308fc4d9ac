#!/usr/bin/env bash
# How long the GPU sits idle in a step, one device call: the CUPTI timeline (bench/gpu_timeline:
# every kernel's start and end in the stream, host synchronisations) of
#   1. TinyLlama-1.1B B4 x T1024 bf16-mixed (cuDNN attention): the default step (also with OLD's
#      leantrain, the binary before this stop's kernels), the checkpointed config (--checkpoint
#      blocks --fused-step), the default step with kept casts;
#   2. GPT-2 124M B16 x T1024 (leantrain_bench, cuDNN attention, --lean-saves 0): plain, and the
#      eager chunked head with kept casts;
#   3. llm.c's cuDNN build (LLMC) on the same GPT-2 step, as the peer;
# each cut into steps by bench/gpu_timeline/gaps.py (span, busy, idle, the largest gaps, kernels
# in the stream). Each run is timed untraced first, to show what the tracing costs.
#   BUILD=build-gpu OLD=build-old LLMC=gpu-carry/llmc/train_gpt2cu OUT=$OUT bash bench/issue46_call21.sh
set -u
CALL_OUT_DEFAULT=/tmp/call21; source bench/call_lib.sh
mkdir -p "$OUT/lib"
bash bench/gpu_timeline/build.sh "$OUT/lib" || { echo "no timeline library"; exit 1; }
LIB=$OUT/lib/libgpu_timeline.so
traced() { local csv=$1; shift; env CUDA_INJECTION64_PATH=$LIB GPU_TIMELINE_OUT=$csv "$@"; }
TL="--model tinyllama-1.1b --data synthetic --batch 4 --seq-len 1024 --precision bf16-mixed --attention-kernel cudnn"
for v in "mfu||" "mfu-old||" "ckpt|--checkpoint blocks --fused-step|" "mfu-keep||LEANTRAIN_KEEP_CASTS=1"; do
  IFS='|' read -r label flags envs <<< "$v"
  bin=$BUILD; [[ $label == *-old ]] && bin=${OLD:-$BUILD}
  for tr in plain traced; do
    cmd=(env $envs timeout 150 "./$bin/leantrain" train $TL $flags --device cuda --steps 8 --eval-batches 0 --log-every 4
         --metrics-json "$OUT/tl-$label-$tr.json")
    if [ $tr = traced ]; then traced "$OUT/tl-$label.csv" "${cmd[@]}" > "$OUT/tl-$label-$tr.log" 2>&1
    else "${cmd[@]}" > "$OUT/tl-$label-$tr.log" 2>&1; fi
    echo "tinyllama $label $tr: $(python3 -c "import json;d=json.load(open('$OUT/tl-$label-$tr.json'));print(round(4096e3/d['steady_items_per_s'],2),'ms')" 2>&1 | tail -1)"
  done
  python3 bench/gpu_timeline/gaps.py "$OUT/tl-$label.csv" --skip 3 > "$OUT/gaps-tl-$label.md" 2>&1
  sed -n '1,/^largest/p' "$OUT/gaps-tl-$label.md" | tail -9
  xz -T8 -f "$OUT/tl-$label.csv"
  el "tinyllama $label"
done
B="throughput --device cuda --model gpt2-124m --precision bf16-mixed --batch 16 --seq 1024 --attention-kernel cudnn --lean-saves 0"
for v in "plain||" "eager-casts|--loss-chunk 8192|LEANTRAIN_LOSS_CHUNK_EAGER=1 LEANTRAIN_KEEP_CASTS=1"; do
  IFS='|' read -r label flags envs <<< "$v"
  env $envs timeout 120 "./$BUILD/leantrain_bench" $B $flags --warmup 5 --steps 20 2>/dev/null | tail -1 > "$OUT/gpt2-$label-plain.json"
  traced "$OUT/gpt2-$label.csv" env $envs timeout 120 "./$BUILD/leantrain_bench" $B $flags --warmup 3 --steps 8 2>"$OUT/gpt2-$label.err" | tail -1 > "$OUT/gpt2-$label-traced.json"
  for tr in plain traced; do echo "gpt2 $label $tr: $(python3 -c "import json;print(json.load(open('$OUT/gpt2-$label-$tr.json'))['ms_per_step'],'ms')" 2>&1 | tail -1)"; done
  python3 bench/gpu_timeline/gaps.py "$OUT/gpt2-$label.csv" --every 2 --skip 4 > "$OUT/gaps-gpt2-$label.md" 2>&1
  sed -n '1,/^largest/p' "$OUT/gaps-gpt2-$label.md" | tail -9
  xz -T8 -f "$OUT/gpt2-$label.csv"
  el "gpt2 $label"
done
if [ -n "${LLMC:-}" ]; then
  llmc_shards
  L="-i $OUT/shards/train_*.bin -j $OUT/shards/val_*.bin -e d12 -b 16 -t 1024 -d 16384 -v 1000 -s 0 -h 0 -o $OUT/llmc-log"
  LD_LIBRARY_PATH="$(llmc_libs)" timeout 150 $LLMC $L -x 30 > "$OUT/llmc-plain.txt" 2>&1
  LD_LIBRARY_PATH="$(llmc_libs)" traced "$OUT/llmc.csv" timeout 150 $LLMC $L -x 12 > "$OUT/llmc-traced.txt" 2>&1
  grep -E "step +(12|30)/" "$OUT/llmc-plain.txt" "$OUT/llmc-traced.txt" | cut -c1-160
  python3 bench/gpu_timeline/gaps.py "$OUT/llmc.csv" --marker encoder_forward --skip 5 > "$OUT/gaps-llmc.md" 2>&1
  sed -n '1,/^largest/p' "$OUT/gaps-llmc.md" | tail -9
  xz -T8 -f "$OUT/llmc.csv"
  rm -rf "$OUT/shards" "$OUT/llmc-log"
  el "llm.c"
fi
rm -rf "$OUT/lib"
tar -C "$OUT" -czf "$OUT/call21.tgz" --exclude=call21.tgz . 2>/dev/null
