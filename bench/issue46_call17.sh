#!/usr/bin/env bash
# Kept casts written by the optimizer (LEANTRAIN_KEEP_CASTS: AdamW's kernel writes each updated
# parameter's bf16 copy, the forward casts no weight) and the head's gradients made in the forward
# (LEANTRAIN_LOSS_CHUNK_EAGER with --loss-chunk N), one device call:
#   1. GPU tests: KeptCasts.*, FusedStep.*, LinearCrossEntropy*, optimizer and stream tests;
#   2. TinyLlama-1.1B B4 x T1024 bf16-mixed AdamW, cuDNN attention: the default step with and
#      without kept casts, --fused-step beside the backward with them, the checkpointed config with
#      and without; two rounds; each run's peaks beside its plan's;
#   3. `leantrain train` GPT-2 124M with kept casts and the eager chunked head: peaks beside the plan;
#   4. GPT-2 124M B16 x T1024 (leantrain_bench, cuDNN attention) plain, kept casts, eager chunks of
#      8192 rows, both, lean saves; beside llm.c's cuDNN build (LLMC), nvidia-smi memory; two rounds.
#   QUICK=1 runs fewer variants (the device time left was short).
#   BUILD=build-gpu LLMC=gpu-carry/llmc/train_gpt2cu OUT=$OUT bash bench/issue46_call17.sh
set -u
CALL_OUT_DEFAULT=/tmp/call17; source bench/call_lib.sh
export NCCL_NVLS_ENABLE=0
timeout 200 "./$BUILD/leantrain_tests" --gtest_brief=1 \
  --gtest_filter='KeptCasts.*:FusedStep.*:LinearCrossEntropy*:CrossStreamReuse.*:Optim*:AdamW*:*Optimizer*' > "$OUT/unit.txt" 2>&1
el "unit"; grep -E "FAILED|PASSED|tests ran|Failure" "$OUT/unit.txt" | head -20
K="LEANTRAIN_KEEP_CASTS=1"; S1="LEANTRAIN_OPT_STREAM=1"; E="LEANTRAIN_LOSS_CHUNK_EAGER=1"
F="--model tinyllama-1.1b --data synthetic --batch 4 --seq-len 1024 --precision bf16-mixed --attention-kernel cudnn"
tl() {  # label flags env...
  local label=$1 flags=$2; shift 2
  [ -f "$OUT/plan-$label.json" ] || env "$@" timeout 120 "./$BUILD/leantrain" plan $F $flags --json > "$OUT/plan-$label.json" 2>"$OUT/plan-$label.err"
  env "$@" timeout 150 "./$BUILD/leantrain" train $F $flags --device cuda --steps 15 --eval-batches 0 --log-every 5 \
    --metrics-json "$OUT/tl-$label-$round.json" > "$OUT/tl-$label-$round.log" 2>&1 ||
    { echo "tinyllama $label failed: $(tail -1 "$OUT/tl-$label-$round.log")"; return; }
  python3 bench/tinyllama_row.py "$OUT/plan-$label.json" "$OUT/tl-$label-$round.json" "$label" "$round" | tee -a "$OUT/tinyllama.jsonl"
}
for round in 1 2; do
  tl mfu ""
  tl mfu-keep "" $K
  [ "${QUICK:-0}" = 1 ] || tl fused-keep-side1 --fused-step $K $S1
  tl ckpt "--checkpoint blocks --fused-step"
  [ "${QUICK:-0}" = 1 ] || tl ckpt-keep "--checkpoint blocks --fused-step" $K
  tl ckpt-keep-side1 "--checkpoint blocks --fused-step" $K $S1
  el "tinyllama round $round"
done
T="--model gpt2-124m --data synthetic --batch 16 --seq-len 1024 --precision bf16-mixed --no-lean-saves --attention-kernel cudnn --loss-chunk 8192"
env $E $K timeout 120 "./$BUILD/leantrain" plan $T --json > "$OUT/plan-gpt2.json" 2> "$OUT/plan-gpt2.err"
env $E $K timeout 150 "./$BUILD/leantrain" train $T --device cuda --steps 12 --eval-batches 1 --log-every 6 \
  --metrics-json "$OUT/train-gpt2.json" > "$OUT/train-gpt2.log" 2>&1 || echo "train failed: $(tail -1 "$OUT/train-gpt2.log")"
python3 - "$OUT/plan-gpt2.json" "$OUT/train-gpt2.json" <<'PY'
import json, sys
p, r = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
print("train gpt2 eager chunk 8192 + kept casts:", round(r["steady_items_per_s"]), "tok/s; peak allocated", r["peak_allocated_bytes"],
      "plan", p["peak_allocated_bytes"], "reserved", r["peak_reserved_bytes"], "plan", p["peak_reserved_bytes"],
      "equal" if (r["peak_allocated_bytes"], r["peak_reserved_bytes"]) == (p["peak_allocated_bytes"], p["peak_reserved_bytes"]) else "DIFFER")
PY
el "gpt2 train vs plan"
smi_peak() {  # command...: runs it, prints the highest used-memory sample (MiB) seen while it ran
  local log=$OUT/smi.$$; : > "$log"
  ( while true; do nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits >> "$log"; sleep 0.2; done ) &
  local sp=$!
  "$@"
  kill $sp 2>/dev/null; wait $sp 2>/dev/null
  echo "smi_peak_mib $(sort -n "$log" | tail -1)"
}
[ -n "${LLMC:-}" ] && { python3 bench/peers/llmc_shards.py "$OUT/shards" > /dev/null 2>&1 || echo "llm.c shards not written"; }
G="--device cuda --model gpt2-124m --precision bf16-mixed --batch 16 --seq 1024 --warmup 5 --steps 20 --attention-kernel cudnn"
for round in 1 2; do
  V=("keep|--lean-saves 0|" "keep-casts|--lean-saves 0|$K" "keep-eager|--lean-saves 0 --loss-chunk 8192|$E"
     "keep-eager-casts|--lean-saves 0 --loss-chunk 8192|$E $K" "lean|--lean-saves 1|"
     "lean-eager-casts|--lean-saves 1 --loss-chunk 8192|$E $K")
  [ "${QUICK:-0}" = 1 ] && V=("keep|--lean-saves 0|" "keep-casts|--lean-saves 0|$K" "keep-eager-casts|--lean-saves 0 --loss-chunk 8192|$E $K"
     "lean-eager-casts|--lean-saves 1 --loss-chunk 8192|$E $K")
  for v in "${V[@]}"; do
    IFS='|' read -r label flags envs <<< "$v"
    smi_peak bash -c "env $envs timeout 120 ./$BUILD/leantrain_bench throughput $G $flags 2>/dev/null | tail -1 > $OUT/gpt2-$label-$round.json"
    echo "gpt2 $label round $round: $(python3 -c "import json;d=json.load(open('$OUT/gpt2-$label-$round.json'));print(d['ms_per_step'],'ms',d['tokens_per_s'],'tok/s loss',d['final_loss'],'alloc',d['peak_allocated'],'reserved',d['peak_reserved'])" 2>&1 | tail -1)"
  done
  if [ -n "${LLMC:-}" ]; then
    CDL=$(ls -d /opt/torch/.venv/lib/python3*/site-packages/nvidia/cudnn/lib 2>/dev/null | head -1)
    smi_peak env LD_LIBRARY_PATH="${CDL:-/usr/local/cuda/lib64}:/usr/local/cuda/lib64" bash -c "timeout 150 $LLMC -i '$OUT/shards/train_*.bin' -j '$OUT/shards/val_*.bin' -e d12 -b 16 -t 1024 \
      -d 16384 -x 40 -v 1000 -s 0 -h 0 -o $OUT/llmc-log > $OUT/llmc-$round.txt 2>&1"
    python3 - "$OUT/llmc-$round.txt" <<'PY'
import re, sys
ms = [float(m.group(2)) for m in (re.search(r"step\s+(\d+)/\d+.*?\|\s*([\d.]+)\s*ms", l) for l in open(sys.argv[1]))
      if m and 21 <= int(m.group(1)) <= 40]
print(f"llm.c: {len(ms)} steps averaged, {sum(ms)/len(ms):.2f} ms/step, {16*1024*len(ms)/sum(ms)*1e3:,.0f} tok/s"
      if ms else "llm.c: no step lines (see llmc-N.txt)")
PY
  fi
  el "gpt2 round $round"
done
rm -rf "$OUT/shards" "$OUT/llmc-log"
tar -C "$OUT" -czf "$OUT/call17.tgz" --exclude=call17.tgz . 2>/dev/null
