#!/usr/bin/env bash
# --fused-step's updates beside the backward (LEANTRAIN_OPT_STREAM) and kept casts
# (LEANTRAIN_KEEP_CASTS), one device call:
#   1. GPU tests: FusedStep.* (the same bits and the planned peak beside the backward), the stream
#      and optimizer tests;
#   2. TinyLlama-1.1B B4 x T1024 bf16-mixed AdamW, cuDNN attention: the default step, --fused-step
#      in turn, beside the backward (modes 1 and 2, optimizer grid 8 or 0 blocks an SM), with kept
#      casts; then the checkpointed config (--checkpoint blocks --fused-step) likewise; each run's
#      peaks beside its plan's (the plan run with the same knobs);
#   3. GPT-2 124M B16 x T1024 (leantrain_bench, cuDNN attention) plain and fused + beside + kept
#      casts, lean saves on and off, beside llm.c's cuDNN build (LLMC=its train_gpt2cu), memory by
#      nvidia-smi for both; two rounds.
#   BUILD=build-gpu LLMC=gpu-carry/llmc/train_gpt2cu OUT=$OUT bash bench/issue46_call15.sh
set -u
CALL_OUT_DEFAULT=/tmp/call15; source bench/call_lib.sh
export NCCL_NVLS_ENABLE=0
if [ "${UNIT:-1}" = 1 ]; then
  timeout 200 "./$BUILD/leantrain_tests" --gtest_brief=1 \
    --gtest_filter='FusedStep.*:CrossStreamReuse.*:Optim*:AdamW*:*Optimizer*:ActivationOffload.Cuda*' > "$OUT/unit.txt" 2>&1
  el "unit"; grep -E "FAILED|PASSED|tests ran|Failure" "$OUT/unit.txt" | head -20
fi
F="--model tinyllama-1.1b --data synthetic --batch 4 --seq-len 1024 --precision bf16-mixed --attention-kernel cudnn"
S1="LEANTRAIN_OPT_STREAM=1"; S2="LEANTRAIN_OPT_STREAM=2"; G0="LEANTRAIN_OPT_STREAM_GRID=0"; K="LEANTRAIN_KEEP_CASTS=1"
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
  tl fused --fused-step
  tl side1 --fused-step $S1
  tl side2 --fused-step $S2
  tl side1-g0 --fused-step $S1 $G0
  tl side2-g0 --fused-step $S2 $G0
  tl keep-side1 --fused-step $S1 $K
  tl keep-side2 --fused-step $S2 $K
  tl keep-side2-g0 --fused-step $S2 $G0 $K
  tl keep-inturn --fused-step $K
  tl ckpt "--checkpoint blocks --fused-step"
  tl ckpt-side2 "--checkpoint blocks --fused-step" $S2
  tl ckpt-keep-side2 "--checkpoint blocks --fused-step" $S2 $K
  tl ckpt-keep-side1 "--checkpoint blocks --fused-step" $S1 $K
  el "tinyllama round $round"
done
smi_peak() {  # command...: runs it, prints the highest used-memory sample (MiB) seen while it ran
  local log=$OUT/smi.$$; : > "$log"
  ( while true; do nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits >> "$log"; sleep 0.2; done ) &
  local sp=$!
  "$@"
  kill $sp 2>/dev/null; wait $sp 2>/dev/null
  echo "smi_peak_mib $(sort -n "$log" | tail -1)"
}
if [ -n "${LLMC:-}" ]; then
  python3 bench/peers/llmc_shards.py "$OUT/shards" > /dev/null 2>&1 || echo "llm.c shards not written"
fi
G="--device cuda --model gpt2-124m --precision bf16-mixed --batch 16 --seq 1024 --warmup 5 --steps 20 --attention-kernel cudnn"
for round in 1 2; do
  for v in "keep|--lean-saves 0|" "keep-fused-side2-casts|--lean-saves 0 --fused-step 1|$S2 $K" \
           "keep-fused-side1-casts|--lean-saves 0 --fused-step 1|$S1 $K" "keep-fused-side2|--lean-saves 0 --fused-step 1|$S2" \
           "lean|--lean-saves 1|" "lean-fused-side2-casts|--lean-saves 1 --fused-step 1|$S2 $K"; do
    IFS='|' read -r label flags envs <<< "$v"
    smi_peak bash -c "env $envs timeout 120 ./$BUILD/leantrain_bench throughput $G $flags 2>/dev/null | tail -1 > $OUT/gpt2-$label-$round.json"
    echo "gpt2 $label round $round: $(python3 -c "import json;d=json.load(open('$OUT/gpt2-$label-$round.json'));print(d['ms_per_step'],'ms',d['tokens_per_s'],'tok/s alloc',d['peak_allocated'],'reserved',d['peak_reserved'])" 2>&1 | tail -1)"
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
tar -C "$OUT" -czf "$OUT/call15.tgz" --exclude=call15.tgz . 2>/dev/null
