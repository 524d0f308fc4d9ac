#!/usr/bin/env bash
# Issue #18's TinyLlama line in the least device time: TinyLlama-1.1B shape, B4 x T1024 per GPU,
# bf16-mixed, checkpointed blocks, fsdp over $N GPUs (10 steps; every rank's peak from rank 0's
# --metrics-json), each rank's plan, then torchrun FSDP2 on the same GPUs. One GPU's peak is the
# plan's 17,667,916,288 B, measured equal on H100 and H200 (bench/results/dist-h200x2-125c0be.md).
set -u
BUILD=${BUILD:-build}; OUT=${OUT:-/tmp/fsdp4}; N=${DIST_GPUS:-4}
mkdir -p "$OUT"; export NCCL_NVLS_ENABLE=0
L="--model tinyllama-1.1b --data synthetic --seq-len 1024 --precision bf16-mixed --checkpoint blocks --steps 10 --log-every 5 --eval-batches 1 --device cuda"
timeout 150 "./$BUILD/leantrain" train $L --batch $((4 * N)) --devices $N --strategy fsdp --metrics-json "$OUT/ln.json" > "$OUT/ln.log" 2>&1
echo "fsdp $N GPUs: exit $?"; grep error "$OUT/ln.log" | head -2
python3 -c "import json; j=json.load(open('$OUT/ln.json')); m=j['rank_peak_allocated_bytes']; print('per rank peak', m, 'max/1GPU %.4f' % (max(m) / 17667916288), 'tok/s per rank', round(j['steady_items_per_s']), 'job', round($N * j['steady_items_per_s']))"
for r in $(seq 0 $((N - 1))); do printf "plan rank %d: " $r; timeout 60 "./$BUILD/leantrain" plan $L --batch $((4 * N)) --devices $N --strategy fsdp --rank $r --json | python3 -c "import json,sys; print(json.load(sys.stdin)['peak_allocated_bytes'])"; done
timeout 200 torchrun --standalone --nproc_per_node $N bench/peers/dist_torch.py --model tinyllama --mode fsdp2 --batch 4 --checkpoint --steps 8 --warmup 2 2>&1 | grep '^{'
