#!/usr/bin/env bash
# Issues 44 and 45, fourth round, one GPU call: the GPU unit tests of this round's kernels (the
# per-head q/k norm, the grouped GEMM with the adapter's term in its K loop, the vectorised combine),
# the grouped GEMM alone (bench/moe_gemm_call.sh: defaults against the earlier 32-deep, 2-stage
# tiles), parity of the small Qwen3.5 cases (the decay parameters' noise floor), the 4-layer Qwen3-30B-A3B LoRA step side by side with transformers + PEFT in two rounds
# (the peer first in the second), the Qwen3.5-2B LoRA step side by side, then the randomized
# plan-vs-measured sweep in the time left. The opt-in kernels written without a GPU
# (LEANTRAIN_MOE_GEMM_PAIR, LEANTRAIN_NORM_HEADS_CUDA) are on for the tests and the parity runs, and
# the MoE step runs with them (round 1 and 2) and without (the last run). Run on the GPU machine
# from the repo root:
#   BUILD=build-gpu OUT=/tmp/out bash bench/issues_44_45_call4.sh
set -u
BUILD=${BUILD:-build-gpu}; OUT=${OUT:-/tmp/call4}
export BUILD
mkdir -p "$OUT"
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
left() { [ $(( $(date +%s) - t0 + $1 )) -lt "${DEADLINE_S:-570}" ]; }
stragglers() { pkill -9 -f "$BUILD/leantrain" 2>/dev/null; pkill -9 -f "bench/peers/" 2>/dev/null; sleep 1; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
NEW="LEANTRAIN_MOE_GEMM_PAIR=1 LEANTRAIN_NORM_HEADS_CUDA=1"
env $NEW timeout 90 "./$BUILD/leantrain_tests" --gtest_brief=1 \
  --gtest_filter='NormHeads*:MoeCuda.*:Moe*Cuda*:*Qwen3*Cuda*:*Gemma*Cuda*:Ops/OpsBackends.*norm_heads*:Ops/OpsBackends.*rms*:LoraLinearOp*:Qwen35Model.Cuda*' \
  > "$OUT/unit.txt" 2>&1
stragglers; el "unit"; grep -E "FAILED|PASSED|tests ran" "$OUT/unit.txt" | head -12
OUT=$OUT/gemm UNIT=0 NCU=0 VARIANTS="D K32S2" timeout 90 bash bench/moe_gemm_call.sh > "$OUT/gemm.log" 2>&1
stragglers; el "gemm"; grep "^best" "$OUT/gemm.log"
moe() {  # $1: label, then env assignments for moe_lora.sh
  local label=$1; shift
  (env "$@" OUT=$OUT/moe-$label ROUNDS=1 timeout 200 bash bench/moe_lora.sh) > "$OUT/moe-$label.log" 2>&1
  stragglers; el "moe $label"
  grep -h '"side": "leantrain"\|"peer"' "$OUT/moe-$label/moe-lora.jsonl" 2>/dev/null | sed "s/^/$label /" | tee -a "$OUT/moe.jsonl" | cut -c1-220
}
moe auto $NEW MOE_EXTRA="--attention-kernel auto"
(cd bench/peers && timeout 200 python3 moe_lora_torch.py --warmup 2 --steps 8 2>&1 | tail -1) | sed "s/^/peer2 /" | tee -a "$OUT/moe.jsonl" | cut -c1-220
stragglers; el "peer round 2"
moe auto2 $NEW PEER=0 MOE_EXTRA="--attention-kernel auto"
moe auto-new-off PEER=0 MOE_EXTRA="--attention-kernel auto"
if left 100; then
env $NEW timeout $(( ${DEADLINE_S:-570} - ($(date +%s) - t0) - 5 )) python3 bench/peers/parity.py --bench "$BUILD/leantrain_bench" --out "$OUT/parity" \
  --only qwen3_5-small,qwen3_5-small-untied-t130,qwen3-small,gemma3-small > "$OUT/parity.log" 2>&1
stragglers; el "parity"; tail -6 "$OUT/parity.log" | cut -c1-200
fi
if left 200; then
  (env $NEW OUT=$OUT/qwen35 timeout 260 bash bench/qwen35_lora.sh throughput) > "$OUT/qwen35.log" 2>&1
  stragglers; el "qwen35"; grep -h "tokens_per_s" "$OUT"/qwen35/*.jsonl 2>/dev/null | cut -c1-260 | tee "$OUT/qwen35.jsonl"
fi
if left 100; then
  N=${SWEEP_N:-12}
  (OUT=$OUT/sweep timeout $(( ${DEADLINE_S:-570} - ($(date +%s) - t0) - 15 )) bash bench/plan_sweep.sh 4242 $N) > "$OUT/sweep.log" 2>&1
  stragglers; el "sweep"; tail -5 "$OUT/sweep.log"
fi
(cd "$OUT" && keep=$(ls -d moe-* qwen35 qwen35.log sweep gemm.log parity parity.log 2>/dev/null); [ -n "$keep" ] && tar czf raw.tgz $keep && rm -rf $keep)
el "all done"
