#!/usr/bin/env bash
# Is a ddp step slow because of the reductions or because one GPU is slower? GPT-2 124M, B16 x T1024
# per GPU, bf16-mixed, 30 steps: each GPU alone, both side by side as two independent 1-GPU runs (no
# communication), then ddp with the copy-engine reductions and with NCCL's (LEANTRAIN_PEER_REDUCE=0),
# for ROUNDS rounds; a ddp step waits for the slower GPU. Run on the GPU machine from the repo root:
#   BIN=path/to/leantrain [ROUNDS=2] bash bench/ddp_gpus_alone.sh
set -u
BIN=${BIN:-build/leantrain}; ROUNDS=${ROUNDS:-2}
export NCCL_NVLS_ENABLE=0
T="--model gpt2-124m --data synthetic --seq-len 1024 --precision bf16-mixed --steps 30 --log-every 10 --eval-batches 1 --device cuda --dist-timeout ${DIST_TIMEOUT:-60}"
tps() { python3 -c "import json,sys; print(round(json.load(open(sys.argv[1]))['steady_items_per_s']))" "$1" 2>/dev/null || echo -1; }
for round in $(seq 1 "$ROUNDS"); do
  CUDA_VISIBLE_DEVICES=0 timeout 120 "$BIN" train $T --batch 16 --metrics-json /tmp/g0.json > /tmp/g0.log 2>&1
  CUDA_VISIBLE_DEVICES=1 timeout 120 "$BIN" train $T --batch 16 --metrics-json /tmp/g1.json > /tmp/g1.log 2>&1
  echo "round $round alone: gpu0 $(tps /tmp/g0.json) gpu1 $(tps /tmp/g1.json)"
  CUDA_VISIBLE_DEVICES=0 timeout 120 "$BIN" train $T --batch 16 --metrics-json /tmp/p0.json > /tmp/p0.log 2>&1 &
  CUDA_VISIBLE_DEVICES=1 timeout 120 "$BIN" train $T --batch 16 --metrics-json /tmp/p1.json > /tmp/p1.log 2>&1 &
  wait
  echo "round $round side by side, no communication: gpu0 $(tps /tmp/p0.json) gpu1 $(tps /tmp/p1.json)"
  for p in 1 0; do
    LEANTRAIN_PEER_REDUCE=$p timeout 150 "$BIN" train $T --batch 32 --devices 2 --strategy ddp --metrics-json /tmp/d.json > /tmp/d.log 2>&1
    echo "round $round ddp peer=$p: $(tps /tmp/d.json) per rank"
  done
done
