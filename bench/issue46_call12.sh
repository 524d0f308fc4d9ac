#!/usr/bin/env bash
# Issue 46's ResNets after the max-pool backward's window arithmetic went 32-bit (071409f), and again
# after the fused batch norm + ReLU, one device call:
#   1. the GPU tests of the image ops and ResNets against the CPU, and the fused norm's bits test;
#   2. resnet50 B32 bf16-mixed SGD under Nsight Compute (the kernel table: max-pool backward before
#      was 1.83 ms over 3 launches, issue46-call10-h100-d5d96ba);
#   3. resnet50 and resnet152 B32 bf16-mixed, SGD and AdamW, each beside torchvision eager
#      (channels_last + autocast), peaks beside the plan's.
#   BUILD=build-gpu OUT=$OUT bash bench/issue46_call12.sh
set -u
CALL_OUT_DEFAULT=/tmp/call12; source bench/call_lib.sh
timeout 120 "./$BUILD/leantrain_tests" --gtest_brief=1 \
  --gtest_filter='Ops/OpsBackends.*conv2d*:Ops/OpsBackends.*batch_norm*:Ops/OpsBackends.*max_pool*:ConvOps*:ResNet*:Pool*:BatchNormRelu.*' \
  > "$OUT/unit-conv.txt" 2>&1
el "unit image ops"; grep -E "FAILED|PASSED|tests ran" "$OUT/unit-conv.txt" | head -8
timeout 150 bash bench/profile_train_kernels.sh "$OUT/prof-r50" --model resnet50 --batch 32 --precision bf16-mixed \
  --optimizer sgd --momentum 0.9 --lr 0.01 --data synthetic --steps 3 --eval-batches 0 > "$OUT/prof-r50.md" 2>&1
el "resnet50 profile"; grep -E "kernel time|maxpool|bn_nhwc|unary" "$OUT/prof-r50.md" | head -12
rm -rf "$OUT/prof-r50/ncu.csv"
for m in resnet50 resnet152; do
  for opt in sgd adamw; do
    flags="--optimizer $opt --lr 1e-3"; [ $opt = sgd ] && flags="--optimizer sgd --lr 0.01 --momentum 0.9"
    F="--model $m --batch 32 --precision bf16-mixed $flags --data synthetic"
    timeout 60 "./$BUILD/leantrain" plan $F --steps 30 --eval-batches 1 --json > "$OUT/plan-$m-$opt.json" 2>/dev/null
    timeout 60 "./$BUILD/leantrain" train $F --device cuda --steps 30 --eval-batches 1 --log-every 30 \
      --metrics "$OUT/$m-$opt.jsonl" --metrics-json "$OUT/$m-$opt.json" > /dev/null 2>&1
    python3 - "$OUT/$m-$opt.jsonl" "$OUT/$m-$opt.json" "$OUT/plan-$m-$opt.json" "$m-b32-$opt" <<'PY'
import json, sys
s = [json.loads(l)["seconds"] for l in open(sys.argv[1]) if '"loss"' in l]
run, plan = json.load(open(sys.argv[2])), json.load(open(sys.argv[3]))
print(json.dumps({"system": "leantrain", "run": sys.argv[4], "img_per_s": round((len(s) - 1) * 32 / sum(s[1:]), 1),
                  "peak_allocated": run["peak_allocated_bytes"], "plan_peak_allocated": plan["peak_allocated_bytes"],
                  "peak_reserved": run["peak_reserved_bytes"], "plan_peak_reserved": plan["peak_reserved_bytes"]}))
PY
    timeout 90 python3 bench/peers/resnet_torch.py --model $m --batch 32 --precision bf16-mixed --optimizer $opt \
      --warmup 3 --steps 30 --tag "$m-b32-$opt" 2>/dev/null | tail -1 | cut -c1-300
  done
done
el "resnet pairs"
