#!/usr/bin/env bash
# Issues 44 and 46, one GPU call after the tiled Gated DeltaNet state passes (delta_state.cu), the
# row-block short convolution and the convolution plans as the default:
#   1. GPU tests against the CPU: the delta rule, the short convolution, Qwen3.5, packed documents
#      (tiled passes, LEANTRAIN_GDN_TILED=1); the T 4096 delta-rule timing again without them; the image ops
#      and ResNets with the backend-API convolutions now the default.
#   2. Qwen3.5-2B LoRA B1 x T4096 beside transformers + PEFT, two rounds (bench/qwen35_lora.sh).
#   3. Parity with transformers: qwen3_5-small and qwen3_5-small-untied-t130, f32 and bf16.
#   4. ResNets beside torchvision (bench/resnet_speed_call.sh, SGD; then AdamW at B32) and the ResNet
#      rows of plan_vs_measured.
#   5. One Qwen3.5 LoRA step under Nsight Compute (kernel table).
# Short form (PARITY=0 PROFILE=0 RESNET_SPEED=0 ROUNDS=1; UNTILED=0 CONV_UNIT=0 GDN_FILTER=... shorter): the tests, one Qwen3.5 round beside the
# peer, resnet50/152 B32 SGD and AdamW beside torchvision, the ResNet plan rows.
#   BUILD=build-gpu OUT=/tmp/call7 bash bench/issues_44_46_call7.sh; then archive $OUT's folders
#   (the device returns few files): tar czf all.tgz qwen35 parity resnet pvm *.json *.jsonl
set -u
BUILD=${BUILD:-build-gpu}; OUT=${OUT:-/tmp/call7}
export BUILD
# The tiled state passes are opt-in until this call has checked them: on for everything below
# except the one timing that runs without them.
export LEANTRAIN_GDN_TILED=${GDN_TILED:-1}
mkdir -p "$OUT"
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
F=${GDN_FILTER:-'Ops/OpsBackends.*gated_delta*:Ops/OpsBackends.*causal_conv1d*:GatedDelta*:CausalConv1d*:Qwen35*:PackedDocuments.*'}
timeout 150 "./$BUILD/leantrain_tests" --gtest_brief=1 --gtest_filter="$F" > "$OUT/unit-gdn.txt" 2>&1
el "unit gdn (tiled)"; grep -E "FAILED|PASSED|tests ran|time gated" "$OUT/unit-gdn.txt" | head -12
[ "${UNTILED:-1}" = 1 ] && LEANTRAIN_GDN_TILED=0 timeout 60 "./$BUILD/leantrain_tests" --gtest_brief=1 \
  --gtest_filter='GatedDelta.CudaMatchesTheCpuAtTheTwoBHeadsAndTimesT4096' > "$OUT/unit-gdn-untiled.txt" 2>&1
el "gdn untiled"; grep -E "FAILED|PASSED|time gated" "$OUT/unit-gdn-untiled.txt" | head -4
[ "${CONV_UNIT:-1}" = 1 ] && timeout 100 "./$BUILD/leantrain_tests" --gtest_brief=1 \
  --gtest_filter='Ops/OpsBackends.*conv2d*:Ops/OpsBackends.*batch_norm*:Ops/OpsBackends.*max_pool*:ConvOps*:ResNet*' \
  > "$OUT/unit-conv.txt" 2>&1
el "unit conv (graph default)"; grep -E "FAILED|PASSED|tests ran" "$OUT/unit-conv.txt" | head -8
OUT=$OUT/qwen35 ROUNDS=${ROUNDS:-2} timeout 330 bash bench/qwen35_lora.sh throughput 2>&1 | cut -c1-500
el "qwen3.5 throughput"
[ "${PARITY:-1}" = 1 ] && timeout ${PARITY_S:-150} python3 bench/peers/parity.py --bench "$BUILD/leantrain_bench" --out "$OUT/parity" --commit "${COMMIT:-call7}" \
  --only qwen3_5-small,qwen3_5-small-untied-t130 > "$OUT/parity.log" 2>&1
el "parity"; tail -6 "$OUT/parity.log"
[ "${RESNET_SPEED:-1}" = 1 ] && DEADLINE_S=${RESNET_S:-120} OUT=$OUT/resnet bash bench/resnet_speed_call.sh 2>&1 | grep -v "^\[" | cut -c1-260
resnet_pair() {  # model optimizer flags...: leantrain, then torchvision, B32 bf16-mixed, 30 steps each
  local m=$1 opt=$2; shift 2
  timeout 60 "./$BUILD/leantrain" train --model $m --batch 32 --precision bf16-mixed --optimizer $opt "$@" \
    --data synthetic --device cuda --steps 30 --eval-batches 1 --log-every 30 --metrics "$OUT/$m-$opt.jsonl" \
    --metrics-json "$OUT/$m-$opt.json" > /dev/null 2>&1
  python3 -c "
import json
s=[json.loads(l)['seconds'] for l in open('$OUT/$m-$opt.jsonl') if '\"loss\"' in l]
print(json.dumps({'system':'leantrain','run':'$m-b32-$opt','img_per_s':round((len(s)-1)*32/sum(s[1:]),1),'peak_allocated':json.load(open('$OUT/$m-$opt.json'))['peak_allocated_bytes']}))"
  timeout 90 python3 bench/peers/resnet_torch.py --model $m --batch 32 --precision bf16-mixed --optimizer $opt \
    --warmup 3 --steps 30 --tag "$m-b32-$opt" 2>/dev/null | tail -1 | cut -c1-300
}
for m in resnet50 resnet152; do
  [ "${RESNET_SPEED:-1}" = 1 ] || resnet_pair $m sgd --momentum 0.9 --lr 0.01
  resnet_pair $m adamw --lr 1e-3
done
el "resnet adamw"
LT=$BUILD/leantrain ROWS='resnet' OUT=$OUT/pvm COMMIT=${COMMIT:-call7} timeout 120 bash bench/plan_vs_measured.sh > "$OUT/pvm.log" 2>&1
el "plan vs measured"; grep "^|" "$OUT/pvm/plan_vs_measured.md" 2>/dev/null | head -8
[ "${PROFILE:-1}" = 1 ] && timeout "${PROF_S:-90}" bash bench/profile_train_kernels.sh "$OUT/prof-qwen35" --model qwen3.5-2b --data synthetic \
  --batch 1 --seq-len 4096 --precision bf16-true --lora-rank 16 --lora-alpha 32 --checkpoint blocks --steps 1 \
  --eval-batches 1 > "$OUT/prof-qwen35.md" 2>&1
el "qwen3.5 profile"; head -30 "$OUT/prof-qwen35.md"
rm -rf "$OUT/prof-qwen35"
