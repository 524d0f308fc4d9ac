#!/usr/bin/env bash
# Issue 46 goal 3, one GPU call: ResNets with channels-last (NHWC) activations, the default
# since this round. Runs the GPU tests of the NHWC ops against the CPU, then bench/resnet.sh
# (leantrain NHWC beside torchvision eager, channels_last + autocast), resnet50 with NCHW
# activations (a config.json with "channels_last": false: the before), cuDNN's chosen
# algorithms per convolution (LEANTRAIN_CUDNN_LOG), and the ResNet rows of plan vs measured.
#   BUILD=build-gpu OUT=/tmp/nhwc bash bench/resnet_nhwc_call.sh
set -u
BUILD=${BUILD:-build-gpu}; OUT=${OUT:-/tmp/nhwc}
export BUILD
mkdir -p "$OUT"
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
left() { [ $(( $(date +%s) - t0 + $1 )) -lt "${DEADLINE_S:-560}" ]; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
timeout 120 "./$BUILD/leantrain_tests" --gtest_brief=1 \
  --gtest_filter='Ops/OpsBackends.*conv2d*:Ops/OpsBackends.*batch_norm*:Ops/OpsBackends.*max_pool*:ConvOps*:ResNet*' \
  > "$OUT/unit.txt" 2>&1
el "unit"; grep -E "FAILED|PASSED|tests ran" "$OUT/unit.txt" | head -12
(NO_COMPILE=1 OUT=$OUT/resnet timeout 330 bash bench/resnet.sh) > "$OUT/resnet.log" 2>&1
el "resnet.sh"; cut -c1-240 "$OUT/resnet/resnet.jsonl" 2>/dev/null | grep -v '^$'
python3 - "$OUT/r50-nchw.json" <<'PY'
import json, sys
json.dump({"model_type": "resnet", "layer_type": "bottleneck", "depths": [3, 4, 6, 3], "embedding_size": 64,
           "hidden_sizes": [256, 512, 1024, 2048], "num_channels": 3, "num_labels": 1000, "image_size": 224,
           "channels_last": False}, open(sys.argv[1], "w"))
PY
R50="--batch 32 --precision bf16-mixed --optimizer sgd --momentum 0.9 --lr 0.01 --data synthetic --device cuda --steps 8 --eval-batches 1 --log-every 8"
for layout in nchw nhwc; do
  if [ $layout = nchw ]; then model="--config $OUT/r50-nchw.json"; else model="--model resnet50"; fi
  # shellcheck disable=SC2086
  LEANTRAIN_CUDNN_LOG=1 timeout 120 "./$BUILD/leantrain" train $model $R50 --metrics "$OUT/r50-$layout.metrics.jsonl" \
    --metrics-json "$OUT/r50-$layout.json" > "$OUT/r50-$layout.log" 2>&1
  python3 - "$layout" "$OUT/r50-$layout.metrics.jsonl" "$OUT/r50-$layout.json" "$OUT/r50-$layout.log" <<'PY'
import json, sys
layout, metrics, summary, log = sys.argv[1:]
try:
    secs = [json.loads(l)["seconds"] for l in open(metrics) if '"loss"' in l]
    peak = json.load(open(summary))["peak_allocated_bytes"]
    algos = [l for l in open(log) if l.startswith("cudnn ")]
    tc = sum(1 for l in algos if " math 1 " in l or " math 2 " in l)
    print(json.dumps({"layout": layout, "img_per_s": round((len(secs) - 1) * 32 / sum(secs[1:]), 1),
                      "peak_allocated": peak, "cudnn_choices": len(algos), "tensor_op_choices": tc}))
except Exception as e:
    print(json.dumps({"layout": layout, "error": repr(e) + " " + open(log).read()[-600:]}))
PY
done | tee "$OUT/r50-layouts.jsonl"
el "layouts"
grep -h "^cudnn " "$OUT/r50-nhwc.log" | sort | uniq -c | sort -rn | head -12
if left 150; then
  (LT=$BUILD/leantrain ROWS=resnet OUT=$OUT/pvm timeout $(( ${DEADLINE_S:-560} - ($(date +%s) - t0) - 10 )) \
    bash bench/plan_vs_measured.sh) > "$OUT/pvm.log" 2>&1
  el "plan vs measured"; cat "$OUT"/pvm/*.md 2>/dev/null | tail -6
fi
(cd "$OUT" && tar czf raw.tgz resnet r50-* pvm pvm.log resnet.log 2>/dev/null && rm -rf resnet r50-*.log r50-*.metrics.jsonl)
el "all done"
