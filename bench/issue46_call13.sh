#!/usr/bin/env bash
# The fused batch norm + ReLU (LEANTRAIN_BN_RELU: 0 two ops, 1 one op with the ReLU's mask kernel in
# its backward, 2 one op masking inside the norm's kernels), A/B/C in one device call:
#   1. the GPU tests of the fused op (the same bits as the pair, every mode) and the ResNets;
#   2. resnet50 and resnet152 B32 bf16-mixed SGD, the three modes alternating over two rounds,
#      each run's peaks beside its plan's (the plan reads the knob too); torchvision once per model.
#   BUILD=build-gpu OUT=$OUT bash bench/issue46_call13.sh
set -u
CALL_OUT_DEFAULT=/tmp/call13; source bench/call_lib.sh
timeout 120 "./$BUILD/leantrain_tests" --gtest_brief=1 --gtest_filter='BatchNormRelu.*:ResNet*:Ops/OpsBackends.*batch_norm*' \
  > "$OUT/unit.txt" 2>&1
el "unit"; grep -E "FAILED|PASSED|tests ran" "$OUT/unit.txt" | head -6
for round in 1 2; do
  for m in resnet50 resnet152; do
    for mode in 0 1 2; do
      F="--model $m --batch 32 --precision bf16-mixed --optimizer sgd --lr 0.01 --momentum 0.9 --data synthetic"
      [ -f "$OUT/plan-$m-$mode.json" ] || LEANTRAIN_BN_RELU=$mode timeout 60 "./$BUILD/leantrain" plan $F --json \
        > "$OUT/plan-$m-$mode.json" 2>/dev/null
      LEANTRAIN_BN_RELU=$mode timeout 60 "./$BUILD/leantrain" train $F --device cuda --steps 30 --eval-batches 0 \
        --log-every 30 --metrics "$OUT/$m-$mode-$round.jsonl" --metrics-json "$OUT/$m-$mode-$round.json" > /dev/null 2>&1
      python3 - "$OUT/$m-$mode-$round.jsonl" "$OUT/$m-$mode-$round.json" "$OUT/plan-$m-$mode.json" "$m" "$mode" "$round" <<'PY'
import json, sys
s = [json.loads(l)["seconds"] for l in open(sys.argv[1]) if '"loss"' in l]
run, plan = json.load(open(sys.argv[2])), json.load(open(sys.argv[3]))
print(json.dumps({"model": sys.argv[4], "bn_relu": int(sys.argv[5]), "round": int(sys.argv[6]),
                  "img_per_s": round((len(s) - 1) * 32 / sum(s[1:]), 1), "peak_allocated": run["peak_allocated_bytes"],
                  "peak_equals_plan": run["peak_allocated_bytes"] == plan["peak_allocated_bytes"]
                                      and run["peak_reserved_bytes"] == plan["peak_reserved_bytes"]}))
PY
    done
    [ "$round" = 1 ] && timeout 90 python3 bench/peers/resnet_torch.py --model $m --batch 32 --precision bf16-mixed \
      --optimizer sgd --warmup 3 --steps 30 --tag "$m-b32-sgd" 2>/dev/null | tail -1 | cut -c1-260
  done
  el "round $round"
done
