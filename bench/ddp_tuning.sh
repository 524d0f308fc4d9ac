#!/usr/bin/env bash
# ddp's knobs against the 1-GPU run (issue #13's 1.9x line): GPT-2 124M, B16 x T1024 per GPU,
# bf16-mixed, 20 steps; steady tokens/s of rank 0 for each setting (the ranks run in lockstep).
# Usage (GPU machine): BUILD=gpu-carry OUT=dir bash bench/ddp_tuning.sh
set -u
BUILD=${BUILD:-build}; OUT=${OUT:-/tmp/ddp-tuning}; N=${DIST_GPUS:-2}
mkdir -p "$OUT"; export NCCL_NVLS_ENABLE=0
T="--model gpt2-124m --data synthetic --seq-len 1024 --precision bf16-mixed --steps 20 --log-every 10 --eval-batches 1 --device cuda"
tps() { python3 -c "import json,sys; print(round(json.load(open(sys.argv[1]))['steady_items_per_s']))" "$1" 2>/dev/null || echo -1; }
timeout 120 "./$BUILD/leantrain" train $T --batch 16 --metrics-json "$OUT/one.json" > /dev/null 2>&1
one=$(tps "$OUT/one.json"); echo "1 GPU: $one tok/s"
for setting in "" "LEANTRAIN_NCCL_MAX_CTAS=4" "LEANTRAIN_NCCL_MAX_CTAS=8" "LEANTRAIN_NCCL_MAX_CTAS=16" \
               "--buckets-in-flight=4" "--bucket-mb=50" ${DDP_SETTINGS:-}; do
  f="$OUT/ddp-${setting:-default}.json"
  env_part=""; flag_part=""  # a LEANTRAIN_* knob goes to the environment, a --flag to the command line
  case "$setting" in --*) flag_part="${setting/=/ }" ;; *) env_part=$setting ;; esac
  env $env_part timeout 150 "./$BUILD/leantrain" train $T --batch $((16 * N)) --devices $N --strategy ddp $flag_part --metrics-json "$f" > /dev/null 2>&1
  t=$(tps "$f"); echo "ddp ${setting:-default}: $t tok/s per rank, $(python3 -c "print(round($N * $t / $one, 3))")x of 1 GPU"
done
