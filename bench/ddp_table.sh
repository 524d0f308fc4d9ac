#!/usr/bin/env bash
# Issue #13's ddp line with the tied table's lookup rows gathered (src/dist/data_parallel.cpp,
# table_rows): the old and the new binary alternating on GPT-2 124M (bench/ddp_ab.sh), then the
# new one's per-rank plan against its measured peaks (GPT-2 ddp and zero1), its losses against one
# GPU where the rows are gathered (gpt2-tiny, 4 x 16 tokens per rank, ddp and zero1, f32) and on
# GPT-2 124M (bf16-mixed, ddp), and torchrun DDP + torch.compile on the same GPUs.
# Usage (GPU machine): A=gpu-carry/leantrain-old B=gpu-carry/leantrain OUT=dir bash bench/ddp_table.sh
set -u
OUT=${OUT:-/tmp/ddp-table}; N=${DIST_GPUS:-2}
mkdir -p "$OUT"; export NCCL_NVLS_ENABLE=0
A=$A B=$B OUT=$OUT ROUNDS=${ROUNDS:-2} bash bench/ddp_ab.sh
cp "$OUT/ddp.json" "$OUT/ddp-B.json"  # the last round's B run
T="--model gpt2-124m --data synthetic --seq-len 1024 --precision bf16-mixed --steps 20 --log-every 10 --eval-batches 1 --device cuda"
planned() { timeout 120 "$B" plan "$@" --json 2>/dev/null | python3 -c "import json,sys; print(json.load(sys.stdin)['peak_allocated_bytes'])" 2>/dev/null || echo -1; }
measured() { python3 -c "import json,sys; print(json.load(open(sys.argv[1])).get('rank_peak_allocated_bytes'))" "$1"; }
echo "GPT-2 ddp per rank: measured $(measured "$OUT/ddp-B.json") plan [$(planned $T --batch $((16 * N)) --devices $N --strategy ddp --rank 0), $(planned $T --batch $((16 * N)) --devices $N --strategy ddp --rank 1)]"
timeout 150 "$B" train $T --batch $((16 * N)) --devices $N --strategy zero1 --metrics-json "$OUT/zero1.json" > "$OUT/zero1.log" 2>&1
echo "GPT-2 zero1: exit $? per rank: measured $(measured "$OUT/zero1.json") plan [$(planned $T --batch $((16 * N)) --devices $N --strategy zero1 --rank 0), $(planned $T --batch $((16 * N)) --devices $N --strategy zero1 --rank 1)]"
losses() { python3 -c "import json,sys; print([round(json.loads(l)['loss'], 6) for l in open(sys.argv[1]) if '\"loss\"' in l and 'eval_loss' not in l])" "$1" 2>/dev/null; }
G="--model gpt2-tiny --data synthetic --batch 8 --seq-len 16 --steps 12 --log-every 1 --eval-batches 1 --device cuda"
timeout 60 "$B" train $G --metrics "$OUT/t1.jsonl" > /dev/null 2>&1
echo "gpt2-tiny 1 GPU:  $(losses "$OUT/t1.jsonl")"
for s in ddp zero1; do
  timeout 90 "$B" train $G --devices $N --strategy $s --metrics "$OUT/t-$s.jsonl" > "$OUT/t-$s.log" 2>&1
  echo "gpt2-tiny $s: exit $? $(losses "$OUT/t-$s.jsonl")"; grep error "$OUT/t-$s.log" | head -2
done
# GPT-2 at lr 1e-4 (steadier than the default on random tokens), 8 steps: ddp against one GPU on
# the same 16 x N rows (bf16 GEMM tiling differs, so close, not equal).
S="${T/--steps 20 --log-every 10/--steps 8 --log-every 1} --lr 1e-4"
timeout 120 "$B" train $S --batch $((16 * N)) --metrics "$OUT/g1.jsonl" > /dev/null 2>&1
timeout 150 "$B" train $S --batch $((16 * N)) --devices $N --strategy ddp --metrics "$OUT/gd.jsonl" > /dev/null 2>&1
echo "GPT-2 1 GPU, $((16 * N)) rows: $(losses "$OUT/g1.jsonl")"
echo "GPT-2 ddp, same rows:   $(losses "$OUT/gd.jsonl")"
timeout 300 torchrun --standalone --nproc_per_node $N bench/peers/dist_torch.py --model gpt2 --mode ddp --compile 2>&1 | grep '^{'
