#!/usr/bin/env bash
# Issues 44 and 46 after the tiled Gated DeltaNet state passes became the default (d5d96ba). Two parts,
# one device call each (a machine can be taken back mid-call):
#   PART=a  issue 44: the GPU tests of the delta rule, Qwen3.5 and packed documents (the new
#           tiled-vs-untiled bits test among them); Qwen3.5-2B LoRA B1 x T4096 beside transformers +
#           PEFT, two rounds; parity with transformers for qwen3_5-small and -small-untied-t130.
#   PART=b  issue 46: GPT-2 124M B16 x T1024 bf16 beside llm.c's cuDNN build (LLMC=path to its
#           train_gpt2cu; memory by nvidia-smi for both, sampled while each runs), two rounds
#           alternating; resnet50 B32 SGD beside torchvision, three rounds alternating; one GPT-2
#           step under Nsight Compute with cuDNN attention and --lean-saves 0 (kernel table).
#   BUILD=build-gpu OUT=$OUT PART=a bash bench/issues_44_46_call9.sh
set -u
PART=${PART:-a}
CALL_OUT_DEFAULT=/tmp/call9; source bench/call_lib.sh

if [ "$PART" = a ]; then
  F='Ops/OpsBackends.*gated_delta*:Ops/OpsBackends.*causal_conv1d*:Ops/OpsBackends.*rms_norm_gated*:GatedDelta*:CausalConv1d*:RmsNormGated*:Qwen35*:PackedDocuments.*'
  timeout 150 "./$BUILD/leantrain_tests" --gtest_brief=1 --gtest_filter="$F" > "$OUT/unit-gdn.txt" 2>&1
  el "unit gdn"; grep -E "FAILED|PASSED|tests ran|time gated" "$OUT/unit-gdn.txt" | head -12
  OUT=$OUT/qwen35 ROUNDS=${ROUNDS:-2} timeout 330 bash bench/qwen35_lora.sh throughput 2>&1 | cut -c1-500
  el "qwen3.5 throughput"
  timeout ${PARITY_S:-200} python3 bench/peers/parity.py --bench "$BUILD/leantrain_bench" --out "$OUT/parity" \
    --commit "${COMMIT:-call9}" --only qwen3_5-small,qwen3_5-small-untied-t130 > "$OUT/parity.log" 2>&1
  el "parity"; tail -8 "$OUT/parity.log"
fi

if [ "$PART" = b ]; then
  # GPT-2 against llm.c: leantrain_bench throughput prints its own JSON line; llm.c prints a line a
  # step (steps 21-40 averaged). nvidia-smi samples the process's memory every 200 ms for both.
  [ -n "${LLMC:-}" ] && llmc_shards
  idle=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits); echo "idle_mib $idle"
  for round in 1 2; do
    for v in "cudnn-keep|--attention-kernel cudnn --lean-saves 0" "cudnn-lean|--attention-kernel cudnn" "default|"; do
      IFS='|' read -r label flags <<< "$v"
      gpt2_bench "$label" "$round" "" $flags
    done
    if [ -n "${LLMC:-}" ]; then
      llmc_round "$round"
    fi
    el "gpt2 round $round"
  done
  for round in 1 2 3; do
    timeout 60 "./$BUILD/leantrain" train --model resnet50 --batch 32 --precision bf16-mixed --optimizer sgd --momentum 0.9 \
      --lr 0.01 --data synthetic --device cuda --steps 30 --eval-batches 1 --log-every 30 --metrics "$OUT/r50-$round.jsonl" \
      > /dev/null 2>&1
    python3 -c "
import json
s=[json.loads(l)['seconds'] for l in open('$OUT/r50-$round.jsonl') if '\"loss\"' in l]
print('leantrain resnet50 b32 sgd round $round:', round((len(s)-1)*32/sum(s[1:]),1), 'img/s')"
    timeout 90 python3 bench/peers/resnet_torch.py --model resnet50 --batch 32 --precision bf16-mixed --optimizer sgd \
      --warmup 3 --steps 30 --tag "resnet50-b32-sgd" 2>/dev/null | tail -1 | cut -c1-300
  done
  el "resnet50 rounds"
  [ "${PROFILE:-1}" = 1 ] && timeout 150 bash bench/profile_kernels.sh "$OUT/prof-gpt2" --model gpt2-124m --precision bf16-mixed \
    --batch 16 --seq 1024 --attention-kernel cudnn --lean-saves 0 > "$OUT/prof-gpt2.md" 2>&1
  el "gpt2 profile"; head -45 "$OUT/prof-gpt2.md"
  rm -rf "$OUT/shards" "$OUT/prof-gpt2/ncu.csv"
fi
