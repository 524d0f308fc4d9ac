#!/usr/bin/env bash
# The eager chunked head with the one-pass loss kernel (cross_entropy_fwd_bwd), one short device call:
# the GPU tests of linear_cross_entropy, `leantrain train` GPT-2 124M (eager chunks of 8192 rows, kept
# casts) beside its plan, and leantrain_bench GPT-2 plain and eager + kept casts beside llm.c's cuDNN
# build (LLMC), nvidia-smi memory for both, two rounds.
#   BUILD=build-gpu LLMC=gpu-carry/llmc/train_gpt2cu OUT=$OUT bash bench/issue46_call18.sh
set -u
CALL_OUT_DEFAULT=/tmp/call18; source bench/call_lib.sh
timeout 100 "./$BUILD/leantrain_tests" --gtest_brief=1 --gtest_filter='LinearCrossEntropy*:KeptCasts.*' > "$OUT/unit.txt" 2>&1
el "unit"; grep -E "FAILED|PASSED|tests ran|Failure" "$OUT/unit.txt" | head -10
E="LEANTRAIN_LOSS_CHUNK_EAGER=1"; K="LEANTRAIN_KEEP_CASTS=1"
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
smi_peak() {  # command...: runs it, prints the highest used-memory sample (MiB) seen while it ran
  local log=$OUT/smi.$$; : > "$log"
  ( while true; do nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits >> "$log"; sleep 0.2; done ) &
  local sp=$!
  "$@"
  kill $sp 2>/dev/null; wait $sp 2>/dev/null
  echo "smi_peak_mib $(sort -n "$log" | tail -1)"
}
python3 bench/peers/llmc_shards.py "$OUT/shards" > /dev/null 2>&1 || echo "llm.c shards not written"
G="--device cuda --model gpt2-124m --precision bf16-mixed --batch 16 --seq 1024 --warmup 5 --steps 20 --attention-kernel cudnn"
for round in 1 2; do
  for v in "keep|--lean-saves 0|" "keep-eager-casts|--lean-saves 0 --loss-chunk 8192|$E $K"; do
    IFS='|' read -r label flags envs <<< "$v"
    smi_peak bash -c "env $envs timeout 120 ./$BUILD/leantrain_bench throughput $G $flags 2>/dev/null | tail -1 > $OUT/gpt2-$label-$round.json"
    echo "gpt2 $label round $round: $(python3 -c "import json;d=json.load(open('$OUT/gpt2-$label-$round.json'));print(d['ms_per_step'],'ms',d['tokens_per_s'],'tok/s loss',d['final_loss'],'alloc',d['peak_allocated'],'reserved',d['peak_reserved'])" 2>&1 | tail -1)"
  done
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
  el "gpt2 round $round"
done
rm -rf "$OUT/shards" "$OUT/llmc-log"
tar -C "$OUT" -czf "$OUT/call18.tgz" --exclude=call18.tgz . 2>/dev/null
