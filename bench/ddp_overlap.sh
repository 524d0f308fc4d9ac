#!/usr/bin/env bash
# How ddp's gradient reductions share the GPU with backward (issue #13's 1.9x line): GPT-2 124M,
# B16 x T1024 per GPU, bf16-mixed, 20 steps, steady tokens/s. Each setting runs ddp on $N GPUs
# and is divided by the 1-GPU run measured just before it, so drift in clocks cancels.
#   LEANTRAIN_COMM_PRIORITY=1  the communication stream at the device's highest priority
#   LEANTRAIN_NCCL_MAX_CTAS=n  NCCL's kernels capped at n blocks
# Then torchrun DDP + torch.compile on the same GPUs, in the same call.
# Usage (GPU machine): BIN=path/to/leantrain OUT=dir [SETTINGS="default A=1,B=2 ..."] bash bench/ddp_overlap.sh
set -u
BIN=${BIN:-build/leantrain}; OUT=${OUT:-/tmp/ddp-overlap}; N=${DIST_GPUS:-2}
mkdir -p "$OUT"; export NCCL_NVLS_ENABLE=0
T="--model gpt2-124m --data synthetic --seq-len 1024 --precision bf16-mixed --steps 20 --log-every 10 --eval-batches 1 --device cuda"
tps() { python3 -c "import json,sys; print(round(json.load(open(sys.argv[1]))['steady_items_per_s']))" "$1" 2>/dev/null || echo -1; }
SETTINGS=${SETTINGS:-"default LEANTRAIN_COMM_PRIORITY=1 default LEANTRAIN_COMM_PRIORITY=1"}
for setting in $SETTINGS; do
  e=${setting//,/ }; [ "$e" = default ] && e=""
  timeout 120 "$BIN" train $T --batch 16 --metrics-json "$OUT/one.json" > "$OUT/one.log" 2>&1; one=$(tps "$OUT/one.json")
  env $e timeout 150 "$BIN" train $T --batch $((16 * N)) --devices $N --strategy ddp --metrics-json "$OUT/ddp.json" > "$OUT/ddp-$setting.log" 2>&1
  d=$(tps "$OUT/ddp.json")
  echo "ddp $setting: 1 GPU $one tok/s; ddp $d per rank, $((N * d)) total = $(python3 -c "print(round($N * $d / max($one, 1), 4))")x"
done
[ -n "${NO_PEER:-}" ] || timeout 300 torchrun --standalone --nproc_per_node $N bench/peers/dist_torch.py --model gpt2 --mode ddp --compile 2>&1 | grep '^{'
