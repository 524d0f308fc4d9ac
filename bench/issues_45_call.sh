#!/usr/bin/env bash
# Issue 45's speed call: the grouped expert GEMM's variants alone (bench/moe_gemm_call.sh: the
# fastest on the four expert-weight products is picked), then the 4-layer Qwen3-30B-A3B LoRA step
# side by side with transformers + PEFT (bench/moe_lora.sh) with that variant and cuDNN's attention
# where it applies (--attention-kernel auto), then the Qwen3.5 parity diagnosis: the grouped-head
# case in f32 with leantrain's side on the CPU (its reference kernels) and on the GPU with the
# staged DeltaNet passes off. Run on the GPU machine from the repo root:
#   BUILD=build-gpu OUT=/tmp/out bash bench/issues_45_call.sh
set -u
BUILD=${BUILD:-build-gpu}; OUT=${OUT:-/tmp/issue45}
export BUILD
mkdir -p "$OUT"
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
stragglers() { pkill -9 -f "$BUILD/leantrain" 2>/dev/null; pkill -9 -f "bench/peers/" 2>/dev/null; sleep 1; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
OUT=$OUT/gemm UNIT=${UNIT:-0} timeout 200 bash bench/moe_gemm_call.sh > "$OUT/gemm.log" 2>&1
stragglers; el "gemm variants done"; grep -E "^best|Duration|Throughput|Occupancy|Stall" "$OUT/gemm.log" | head -20
KNOBS=$(cat "$OUT/gemm/best-knobs" 2>/dev/null)
(env $KNOBS OUT=$OUT/moe ROUNDS=1 MOE_EXTRA="--attention-kernel auto" timeout 300 bash bench/moe_lora.sh) > "$OUT/moe.log" 2>&1
stragglers; el "moe side by side done ($KNOBS)"; cat "$OUT/moe/moe-lora.jsonl" 2>/dev/null | cut -c1-300
for side in cpu cuda; do
  [ $(( $(date +%s) - t0 )) -lt "${DEADLINE_S:-540}" ] || break
  env LEANTRAIN_GDN_STAGE_ROWS=$([ $side = cuda ] && echo 0 || echo 1) timeout 90 python3 bench/peers/parity.py \
    --bench "$BUILD/leantrain_bench" --out "$OUT/parity-$side" --only qwen3_5-small --dtypes f32 --leantrain-device $side \
    > "$OUT/parity-$side.log" 2>&1
  stragglers; el "parity ($side) done"
  python3 -c "
import json,glob,sys
for f in glob.glob('$OUT/parity-$side/*.json'):
    d=json.load(open(f)); d=d if isinstance(d,list) else d.get('results',[d])
    for r in d:
        if isinstance(r,dict) and 'case' in r: print('$side', r['case'], r['dtype'], 'grad', r.get('grad_worst_rel_err'), r.get('grad_worst_param'), 'f64', r.get('f64_ref_grad_worst_rel_err'), 'ok', r.get('ok'))
" 2>&1 | tail -3
done
(cd "$OUT" && keep=$(ls -d moe moe.log parity-cpu parity-cuda parity-cpu.log parity-cuda.log 2>/dev/null); [ -n "$keep" ] && tar czf raw.tgz $keep && rm -rf $keep)
el "all done"
