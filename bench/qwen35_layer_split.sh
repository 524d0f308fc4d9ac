#!/usr/bin/env bash
# Where a Qwen3.5 LoRA step's time goes, coarsely: the qwen3.5-2b shape (B1 x T4096, bf16, LoRA r16,
# checkpointed blocks) with every layer gated attention, then with every layer Gated DeltaNet
# (bench/configs/qwen3.5-2b-all-*.json); the preset mixes 18 DeltaNet and 6 attention layers.
#   BUILD=build-gpu bash bench/qwen35_layer_split.sh [extra train flags...]
set -u
BUILD=${BUILD:-build-gpu}; T=${T:-4096}
for v in all-attention all-deltanet; do
  timeout "${RUN_S:-60}" "./$BUILD/leantrain" train --config "bench/configs/qwen3.5-2b-$v.json" --data synthetic --batch 1 \
    --seq-len "$T" --precision bf16-true --lora-rank 16 --lora-alpha 32 --checkpoint blocks --device cuda --steps 6 \
    --eval-batches 0 --log-every 2 --metrics-json "/tmp/split-$v.json" "$@" > "/tmp/split-$v.log" 2>&1 || tail -3 "/tmp/split-$v.log"
  python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print(sys.argv[2], 'tokens/s', round(j['steady_items_per_s']), 'peak', j['peak_allocated_bytes'])" \
    "/tmp/split-$v.json" "$v" 2>&1 | tail -1
done
