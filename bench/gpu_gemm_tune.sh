#!/usr/bin/env bash
# The GEMM tuning of large products (issue #16), on the GPU machine from the repo root with the
# stripped binaries in $BIN: CUDA unit tests of the GEMM paths; GPT-2 124M B16 x T1024 bf16-mixed
# (leantrain_bench throughput) with the tuning on (default, 250 GFLOP and up), off
# (LEANTRAIN_GEMM_TUNE=0) and wider (LEANTRAIN_GEMM_TUNE_GFLOP=50: the MLP's products too), two
# rounds, torch.compile in the same call; two CLI runs of the same model compared loss for loss
# (the tuned choice must repeat), and their peak against the plan.
set -u
BIN=${BIN:-gpu-carry}
OUT=${OUT:-/tmp/leantrain-tune}; W=${WORK:-/tmp/leantrain-tune-work}
mkdir -p "$OUT" "$W"
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "gpu: $gpu, commit: ${COMMIT:-unknown}"
timeout 150 "$BIN/leantrain_tests" --gtest_color=no --gtest_filter='*cuda*:*Cuda*:WeightBiasGrad.*' >"$W/unit.log" 2>&1
echo "unit tests rc=$?"
grep -E '^\[==========\]|^\[  PASSED  \]|^\[  FAILED  \]|^\[  SKIPPED \] [0-9]' "$W/unit.log" | tee "$OUT/unit.txt"
: > "$OUT/throughput.jsonl"
for round in 1 2; do
  for setting in default LEANTRAIN_GEMM_TUNE=0 LEANTRAIN_GEMM_TUNE_GFLOP=50; do
    e=${setting//,/ }; [ "$e" = default ] && e=""
    env $e timeout 90 "$BIN/leantrain_bench" throughput --device cuda --model gpt2-124m --precision bf16-mixed \
      --batch 16 --seq 1024 --warmup 5 --steps 20 2>&1 | tail -1 | sed "s/^{/{\"setting\": \"$setting\", /" | tee -a "$OUT/throughput.jsonl"
  done
done
timeout 170 python3 bench/peers/gpt2_throughput_torch.py --compile 2>&1 | tail -1 | tee -a "$OUT/throughput.jsonl"
T="--model gpt2-124m --data synthetic --batch 16 --seq-len 1024 --precision bf16-mixed"
for r in 1 2; do
  timeout 90 "$BIN/leantrain" train $T --steps 8 --log-every 1 --eval-batches 1 --device cuda --metrics "$W/m$r.jsonl" \
    --metrics-json "$W/g$r.json" > "$W/g$r.log" 2>&1
done
timeout 90 "$BIN/leantrain" plan $T --json > "$W/gp.json" 2>&1
python3 - "$W" <<'PY' | tee "$OUT/repeat.txt"
import json, sys
w = sys.argv[1]
loss = lambda f: [json.loads(l)["loss"] for l in open(f) if '"loss"' in l and "eval_loss" not in l]
a, b = loss(w + "/m1.jsonl"), loss(w + "/m2.jsonl")
print("two CLI runs, GPT-2 124M, 8 steps: losses", "identical" if a == b and a else "DIFFER", a[:3], "...")
m = json.load(open(w + "/g1.json"))["peak_allocated_bytes"]; p = json.load(open(w + "/gp.json"))["peak_allocated_bytes"]
print("peak allocated measured", m, "plan", p, "equal" if m == p else "DIFFER")
PY
