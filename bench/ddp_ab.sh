#!/usr/bin/env bash
# Two builds side by side on GPT-2 124M, B16 x T1024 per GPU, bf16-mixed, 20 steps: 1 GPU and
# ddp over $N GPUs, alternating, $ROUNDS rounds; steady tokens/s (ddp: per rank).
# Usage (GPU machine): A=gpu-carry/leantrain-old B=gpu-carry/leantrain OUT=dir bash bench/ddp_ab.sh
set -u
OUT=${OUT:-/tmp/ddp-ab}; N=${DIST_GPUS:-2}; ROUNDS=${ROUNDS:-2}
mkdir -p "$OUT"; export NCCL_NVLS_ENABLE=0
T="--model gpt2-124m --data synthetic --seq-len 1024 --precision bf16-mixed --steps 20 --log-every 10 --eval-batches 1 --device cuda"
tps() { python3 -c "import json,sys; print(round(json.load(open(sys.argv[1]))['steady_items_per_s']))" "$1" 2>/dev/null || echo -1; }
for r in $(seq 1 "$ROUNDS"); do
  for which in A B; do
    bin=${!which}
    timeout 120 "$bin" train $T --batch 16 --metrics-json "$OUT/one.json" > /dev/null 2>&1; one=$(tps "$OUT/one.json")
    timeout 150 "$bin" train $T --batch $((16 * N)) --devices $N --strategy ddp --metrics-json "$OUT/ddp.json" > "$OUT/ddp-$which.log" 2>&1; d=$(tps "$OUT/ddp.json")
    echo "round $r $which ($bin): 1 GPU $one tok/s, ddp $d tok/s per rank = $((N * d)) total, $(python3 -c "print(round($N * $d / $one, 4))")x"
  done
done
