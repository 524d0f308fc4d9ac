#!/usr/bin/env bash
# cuDNN's backend API for the convolutions (LEANTRAIN_CUDNN_CONV_GRAPH=1, conv_graph.h) against
# the legacy API, one short GPU call: the channels-last op and model tests against the CPU with
# the graph path on, then resnet50 and resnet152 (B32, bf16-mixed, SGD, 30 steps) with the
# legacy path, the graph path and torchvision eager (channels_last + autocast) side by side;
# LEANTRAIN_CUDNN_LOG=1 prints the convolutions' host time a call.
#   BUILD=build-gpu OUT=/tmp/cg bash bench/conv_graph_call.sh
set -u
BUILD=${BUILD:-build-gpu}; OUT=${OUT:-/tmp/conv-graph}
mkdir -p "$OUT"
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
nvidia-smi --query-gpu=name --format=csv,noheader
LEANTRAIN_CUDNN_CONV_GRAPH=1 timeout 60 "./$BUILD/leantrain_tests" --gtest_brief=1 \
  --gtest_filter='Ops/OpsBackends.*conv2d*:ConvOps*:ResNet*' > "$OUT/unit.txt" 2>&1
el "unit (graph on)"; grep -E "FAILED|PASSED|tests ran" "$OUT/unit.txt" | head -8
run() {  # tag model graph(0|1)
  LEANTRAIN_CUDNN_CONV_GRAPH=$3 LEANTRAIN_CUDNN_LOG=1 timeout 90 "./$BUILD/leantrain" train --model "$2" --batch 32 \
    --precision bf16-mixed --optimizer sgd --momentum 0.9 --lr 0.01 --data synthetic --device cuda --steps 30 \
    --eval-batches 1 --log-every 30 --metrics "$OUT/$1.metrics.jsonl" --metrics-json "$OUT/$1.json" > "$OUT/$1.log" 2>&1
  python3 - "$1" "$OUT/$1.metrics.jsonl" "$OUT/$1.json" "$OUT/$1.log" <<'PY'
import json, sys
tag, metrics, summary, log = sys.argv[1:]
try:
    secs = [json.loads(l)["seconds"] for l in open(metrics) if '"loss"' in l]
    lines = open(log).read().splitlines()
    print(json.dumps({"run": tag, "img_per_s": round((len(secs) - 1) * 32 / sum(secs[1:]), 1),
                      "ms_per_step": round(1000 * sum(secs[1:]) / (len(secs) - 1), 2),
                      "peak_allocated": json.load(open(summary))["peak_allocated_bytes"],
                      "losses": [round(json.loads(l)["loss"], 4) for l in open(metrics) if '"loss"' in l][-3:],
                      "host": [l for l in lines if l.startswith("cudnn host time")],
                      "graph_plans": sum(1 for l in lines if "plan built" in l),
                      "graph_none": sum(1 for l in lines if "no plan" in l)}))
except Exception as e:
    print(json.dumps({"run": tag, "error": repr(e) + " " + open(log).read()[-600:]}))
PY
}
for m in resnet50 resnet152; do
  run "$m-legacy" $m 0
  run "$m-graph" $m 1
  timeout 90 python3 bench/peers/resnet_torch.py --model $m --batch 32 --precision bf16-mixed --optimizer sgd \
    --warmup 3 --steps 30 --tag "$m-b32" 2>/dev/null | tail -1
done | tee "$OUT/runs.jsonl" | cut -c1-400
el "runs"
grep -h "no plan" "$OUT"/*-graph.log | head -3 | cut -c1-300
