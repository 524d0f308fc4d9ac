#!/usr/bin/env bash
# ResNet speed probe (issue 46), one GPU call: the GPU tests of the channels-last kernels, then
# resnet50 and resnet152 (bf16-mixed, SGD) side by side with torchvision eager channels_last +
# autocast at B8 (where both are launch-bound: the step time is mostly host time), B32 (the
# issue's batch) and B64, 30 steps each (img/s from steps 2..30). leantrain runs with
# LEANTRAIN_CUDNN_LOG=1, which prints the host time of its convolution calls at exit.
#   BUILD=build-gpu OUT=/tmp/rs bash bench/resnet_speed_call.sh
set -u
BUILD=${BUILD:-build-gpu}; OUT=${OUT:-/tmp/resnet-speed}
mkdir -p "$OUT"
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
left() { [ $(( $(date +%s) - t0 + $1 )) -lt "${DEADLINE_S:-400}" ]; }
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 100 "./$BUILD/leantrain_tests" --gtest_brief=1 \
  --gtest_filter='Ops/OpsBackends.*conv2d*:Ops/OpsBackends.*batch_norm*:Ops/OpsBackends.*max_pool*:ConvOps*:ResNet*' \
  > "$OUT/unit.txt" 2>&1
el "unit"; grep -E "FAILED|PASSED|tests ran" "$OUT/unit.txt" | head -8
lt_run() {  # model batch
  local tag="$1-b$2"
  LEANTRAIN_CUDNN_LOG=1 timeout 120 "./$BUILD/leantrain" train --model "$1" --batch "$2" --precision bf16-mixed \
    --optimizer sgd --momentum 0.9 --lr 0.01 --data synthetic --device cuda --steps 30 --eval-batches 1 --log-every 30 \
    --metrics "$OUT/$tag.metrics.jsonl" --metrics-json "$OUT/$tag.json" > "$OUT/$tag.log" 2>&1
  python3 - "$tag" "$2" "$OUT/$tag.metrics.jsonl" "$OUT/$tag.json" "$OUT/$tag.log" <<'PY'
import json, sys
tag, batch, metrics, summary, log = sys.argv[1:]
try:
    secs = [json.loads(l)["seconds"] for l in open(metrics) if '"loss"' in l]
    host = [l.strip() for l in open(log) if l.startswith("cudnn host time")]
    print(json.dumps({"system": "leantrain", "run": tag, "img_per_s": round((len(secs) - 1) * int(batch) / sum(secs[1:]), 1),
                      "ms_per_step": round(1000 * sum(secs[1:]) / (len(secs) - 1), 2),
                      "peak_allocated": json.load(open(summary))["peak_allocated_bytes"], "cudnn_host": host}))
except Exception as e:
    print(json.dumps({"system": "leantrain", "run": tag, "error": repr(e) + " " + open(log).read()[-500:]}))
PY
}
for model in resnet50 resnet152; do
  for b in 8 32 64; do
    left 60 || break
    lt_run $model $b
    timeout 120 python3 bench/peers/resnet_torch.py --model $model --batch $b --precision bf16-mixed --optimizer sgd \
      --warmup 3 --steps 30 --tag "$model-b$b" 2>/dev/null | tail -1
  done
done | tee "$OUT/speed.jsonl" | cut -c1-330
el "speed"
