#!/usr/bin/env bash
# Issue #19 on N GPUs of one host (default 8, nvidia-h200-x8), side by side with PyTorch launched
# by torchrun on the same GPUs (bench/peers/dist_torch.py), in one device call:
#   gpt2   GPT-2 124M, 16 x 1024 tokens per GPU, bf16-mixed, AdamW: one GPU, then `ddp` on N (the
#          bar: total tokens/s >= 7.2x one GPU's on 8); every rank's peak against plan --rank r;
#          torchrun DDP + torch.compile and FSDP2.
#   llama  Llama-2-7B shape (bench/configs/llama2-7b.json), full AdamW fine-tune (f32 parameters
#          and moments), bf16-mixed, checkpointed blocks, `fsdp`, 1 x 4096 tokens per GPU: every
#          rank's plan first, then 10 steps; every rank's peak against its plan; torchrun FSDP2
#          (bf16 params, f32 reduce, checkpointed) on the same configuration; our f32 gather too.
# Usage: BUILD=g OUT=$OUT/x8 COMMIT=abc1234 [DIST_GPUS=8] bash bench/scale8.sh [gpt2] [llama]
# Prints one summary line per run; the logs and JSON are under $OUT.
set -u
BUILD=${BUILD:-build}
OUT=${OUT:-/tmp/scale8}
N=${DIST_GPUS:-8}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
parts=${*:-gpt2 llama}
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
echo "gpus: $N x $gpu, commit: ${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}, parts: $parts"

# field JSON KEY: one value of a --metrics-json file ("-" when missing).
field() { python3 -c "import json,sys; print(json.load(open(sys.argv[1])).get(sys.argv[2], '-'))" "$1" "$2" 2>/dev/null || echo -; }
# ranks_vs_plan RUN_JSON FLAGS...: every rank's measured peak allocated (rank 0's --metrics-json)
# against `plan FLAGS --rank r`.
ranks_vs_plan() {
  local j=$1; shift
  local planned=""
  for r in $(seq 0 $((N - 1))); do
    planned="$planned $(timeout 120 "./$BUILD/leantrain" plan "$@" --rank "$r" --json 2>/dev/null |
      python3 -c "import json,sys; print(json.load(sys.stdin)['peak_allocated_bytes'])" 2>/dev/null || echo -1)"
  done
  python3 - "$j" $planned <<'PY'
import json, sys
m = json.load(open(sys.argv[1])).get("rank_peak_allocated_bytes", []) if sys.argv[1] else []
p = [int(x) for x in sys.argv[2:]]
diff = [a - b for a, b in zip(m, p)]
print("  per rank measured", m, "\n  per rank plan    ", p, "\n  ->", "EQUAL" if m == p else "DIFFER %s" % diff,
      "largest %.3f GiB" % (max(m) / 2**30) if m else "")
PY
}

for part in $parts; do
  case $part in
    gpt2)
      T="--model gpt2-124m --data synthetic --seq-len 1024 --precision bf16-mixed --steps 30 --log-every 10 --eval-batches 1 --device cuda"
      timeout 120 "./$BUILD/leantrain" train $T --batch 16 --metrics-json "$OUT/g1.json" > "$OUT/g1.log" 2>&1
      one=$(field "$OUT/g1.json" steady_items_per_s)
      echo "GPT-2 1 GPU: exit $?, tokens/s $one, peak $(field "$OUT/g1.json" peak_allocated_bytes) B"
      timeout 200 "./$BUILD/leantrain" train $T --batch $((16 * N)) --devices "$N" --strategy ddp \
        --metrics-json "$OUT/gn.json" > "$OUT/gn.log" 2>&1
      echo "GPT-2 $N GPUs ddp: exit $?"; grep -i error "$OUT/gn.log" | head -2
      python3 - "$OUT/g1.json" "$OUT/gn.json" "$N" <<'PY'
import json, sys
try:
    one = json.load(open(sys.argv[1]))["steady_items_per_s"]
    j = json.load(open(sys.argv[2])); n = int(sys.argv[3])
    total = n * j["steady_items_per_s"]  # rank 0's rate x N: the ranks step together
    print(json.dumps({"system": "leantrain-ddp", "world": n, "tokens_per_s": round(total), "one_gpu_tokens_per_s": round(one),
                      "speedup_vs_1gpu": round(total / one, 3), "bar": 0.9 * n}))
except Exception as e:
    print("no ratio:", e)
PY
      ranks_vs_plan "$OUT/gn.json" $T --batch $((16 * N)) --devices "$N" --strategy ddp
      # The same with every bucket on NCCL (no copy-engine all-reduce): which reduces faster on N GPUs.
      LEANTRAIN_PEER_REDUCE=0 timeout 200 "./$BUILD/leantrain" train $T --batch $((16 * N)) --devices "$N" --strategy ddp \
        --metrics-json "$OUT/gn-nccl.json" > "$OUT/gn-nccl.log" 2>&1
      echo "GPT-2 $N GPUs ddp, NCCL only: exit $?, total tokens/s $(python3 -c "import json,sys; print(round(int(sys.argv[2]) * json.load(open(sys.argv[1]))['steady_items_per_s']))" "$OUT/gn-nccl.json" "$N" 2>/dev/null)"
      timeout 300 torchrun --standalone --nproc_per_node "$N" bench/peers/dist_torch.py --model gpt2 --mode ddp --compile 2>&1 |
        grep '^{' | tee -a "$OUT/peers.jsonl"
      timeout 200 torchrun --standalone --nproc_per_node "$N" bench/peers/dist_torch.py --model gpt2 --mode fsdp2 2>&1 |
        grep '^{' | tee -a "$OUT/peers.jsonl"
      ;;
    llama)
      L="--config bench/configs/llama2-7b.json --data synthetic --seq-len 4096 --precision bf16-mixed --checkpoint blocks --batch $N --log-every 5 --eval-batches 1 --device cuda --devices $N --strategy fsdp"
      # The plan first: what every rank will hold, before anything is launched.
      timeout 120 "./$BUILD/leantrain" plan $L --steps 10 > "$OUT/l7-plan.txt" 2>&1
      sed -n '1,12p' "$OUT/l7-plan.txt"
      timeout 400 "./$BUILD/leantrain" train $L --steps 10 --metrics-json "$OUT/l7.json" > "$OUT/l7.log" 2>&1
      echo "Llama-2-7B shape $N GPUs fsdp: exit $?"; grep -i error "$OUT/l7.log" | head -2
      python3 - "$OUT/l7.json" "$N" <<'PY'
import json, sys
try:
    j = json.load(open(sys.argv[1])); n = int(sys.argv[2])
    print(json.dumps({"system": "leantrain-fsdp", "model": "llama2-7b", "world": n, "batch_per_gpu": 1, "seq": 4096,
                      "tokens_per_s": round(n * j["steady_items_per_s"]),
                      "peak_allocated_largest_rank": max(j["rank_peak_allocated_bytes"])}))
except Exception as e:
    print("no figures:", e)
PY
      ranks_vs_plan "$OUT/l7.json" $L --steps 10
      # The same with the blocks gathered as the f32 parameters (the gather before 99ca698).
      timeout 400 "./$BUILD/leantrain" train $L --steps 10 --fsdp-gather f32 --metrics-json "$OUT/l7-f32.json" > "$OUT/l7-f32.log" 2>&1
      echo "Llama-2-7B shape, f32 gather: exit $?, total tokens/s $(python3 -c "import json,sys; print(round(int(sys.argv[2]) * json.load(open(sys.argv[1]))['steady_items_per_s']))" "$OUT/l7-f32.json" "$N" 2>/dev/null)"
      ranks_vs_plan "$OUT/l7-f32.json" $L --steps 10 --fsdp-gather f32
      timeout 400 torchrun --standalone --nproc_per_node "$N" bench/peers/dist_torch.py --model llama2-7b --mode fsdp2 \
        --batch 1 --seq 4096 --checkpoint --steps 8 --warmup 2 2>&1 | grep -E '^\{|Error|error' | tail -3 | tee -a "$OUT/peers.jsonl"
      ;;
    *) echo "unknown part $part (gpt2, llama)"; exit 2 ;;
  esac
done
