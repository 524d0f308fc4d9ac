#!/usr/bin/env bash
# The GPU checks of the backward epilogues (issue #16): a linear's bias gradient in its weight
# gradient's GEMM (gemm_bgrad) and the tanh GELU's backward in the input gradient's (gemm_dgelu).
# Run from the repo root with the stripped binaries in $BIN (leantrain, leantrain_tests,
# leantrain_bench); summaries under $OUT, logs under $WORK.
#   1. the CUDA unit tests of the changed code (every op on CUDA against the CPU, the recompute
#      linears, the fused step, checkpointing);
#   2. parity with transformers: GPT-2 124M, GPT-2 small, ViT small and B/16;
#   3. GPT-2 124M B16 x T1024 bf16-mixed (leantrain_bench throughput): the epilogues on, then
#      LEANTRAIN_GEMM_BGRAD=0, then LEANTRAIN_GEMM_BGRAD=0 LEANTRAIN_GEMM_GELU=0 (the kernels apart),
#      two rounds, and torch.compile in the same call;
#   4. plan == measured for the same GPT-2 run through the CLI.
set -u
BIN=${BIN:-gpu-carry}
OUT=${OUT:-/tmp/leantrain-epi}; W=${WORK:-/tmp/leantrain-epi-work}
mkdir -p "$OUT" "$W"
export PYTHONUNBUFFERED=1
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "gpu: $gpu, commit: ${COMMIT:-unknown}"
timeout 200 "$BIN/leantrain_tests" --gtest_color=no \
  --gtest_filter='*cuda*:*Cuda*:WeightBiasGrad.*:RecomputeLinear.*:FusedStep.*:Checkpoint*' >"$W/unit.log" 2>&1
echo "unit tests rc=$?"
grep -E '^\[==========\]|^\[  PASSED  \]|^\[  FAILED  \]|^\[  SKIPPED \] [0-9]' "$W/unit.log" | tee "$OUT/unit.txt"
timeout 240 python3 bench/peers/parity.py --bench "$BIN/leantrain_bench" --out "$W" --only gpt2-small,gpt2-124m,vit-small,vit-b-16 2>&1 | tail -14 | tee "$OUT/parity.txt"
: > "$OUT/throughput.jsonl"
for round in 1 2; do
  for setting in default LEANTRAIN_GEMM_BGRAD=0 LEANTRAIN_GEMM_BGRAD=0,LEANTRAIN_GEMM_GELU=0; do
    e=${setting//,/ }; [ "$e" = default ] && e=""
    env $e timeout 90 "$BIN/leantrain_bench" throughput --device cuda --model gpt2-124m --precision bf16-mixed \
      --batch 16 --seq 1024 --warmup 5 --steps 20 2>&1 | tail -1 | sed "s/^{/{\"setting\": \"$setting\", /" | tee -a "$OUT/throughput.jsonl"
  done
done
timeout 170 python3 bench/peers/gpt2_throughput_torch.py --compile 2>&1 | tail -1 | tee -a "$OUT/throughput.jsonl"
T="--model gpt2-124m --data synthetic --batch 16 --seq-len 1024 --precision bf16-mixed"
timeout 90 "$BIN/leantrain" train $T --steps 6 --log-every 3 --eval-batches 1 --device cuda --metrics-json "$W/g.json" > "$W/g.log" 2>&1
timeout 90 "$BIN/leantrain" plan $T --json > "$W/gp.json" 2>&1
python3 -c "
import json,sys
m=json.load(open(sys.argv[1])); p=json.load(open(sys.argv[2]))
print('GPT-2 124M CLI: measured peak allocated', m['peak_allocated_bytes'], 'plan', p['peak_allocated_bytes'], 'equal' if m['peak_allocated_bytes']==p['peak_allocated_bytes'] else 'DIFFER')" "$W/g.json" "$W/gp.json" | tee "$OUT/plan.txt"
