#!/usr/bin/env bash
# Where ddp's step time goes next to one GPU's (issue #13): GPT-2 124M B16 x T1024 per GPU,
# bf16-mixed, LEANTRAIN_STEP_TRACE=1 (phases serialised: each boundary synchronises), then the
# same runs untraced for tokens/s, and torchrun DDP + torch.compile in the same call.
# Usage (GPU machine): BUILD=gpu-carry OUT=dir bash bench/ddp_phases.sh
set -u
BUILD=${BUILD:-build}; OUT=${OUT:-/tmp/ddp-phases}; N=${DIST_GPUS:-2}
mkdir -p "$OUT"; export NCCL_NVLS_ENABLE=0
T="--model gpt2-124m --data synthetic --seq-len 1024 --precision bf16-mixed --steps 30 --log-every 10 --eval-batches 1 --device cuda"
tps() { python3 -c "import json,sys; print(round(json.load(open(sys.argv[1]))['steady_items_per_s']))" "$1" 2>/dev/null || echo -1; }
LEANTRAIN_STEP_TRACE=1 timeout 120 "./$BUILD/leantrain" train $T --batch 16 2>&1 | grep "step trace" | tail -1 | sed 's/^/1 GPU: /'
LEANTRAIN_STEP_TRACE=1 timeout 150 "./$BUILD/leantrain" train $T --batch $((16 * N)) --devices $N --strategy ddp 2>&1 | grep "step trace" | tail -2 | sed "s/^/ddp $N GPUs: /"
for round in 1 2; do
  timeout 120 "./$BUILD/leantrain" train $T --batch 16 --metrics-json "$OUT/one.json" > /dev/null 2>&1
  timeout 150 "./$BUILD/leantrain" train $T --batch $((16 * N)) --devices $N --strategy ddp --metrics-json "$OUT/ddp.json" > "$OUT/ddp.log" 2>&1 || tail -2 "$OUT/ddp.log"
  one=$(tps "$OUT/one.json"); d=$(tps "$OUT/ddp.json")
  echo "round $round: 1 GPU $one tok/s; ddp $d per rank, $((N * d)) total = $(python3 -c "print(round($N * $d / $one, 4))")x"
done
timeout 300 torchrun --standalone --nproc_per_node $N bench/peers/dist_torch.py --model gpt2 --mode ddp --compile 2>&1 | grep '^{'
