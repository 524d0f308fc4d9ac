#!/usr/bin/env bash
# Issues 44 and 45, the GPU call after the kernel tables (issues_44_45_diagnose.sh): head dim 256
# on tensor cores (attn_*_mma at D 256, LEANTRAIN_ATTN_MMA_D256) and the Gated DeltaNet's sequential
# passes with their chunk rows staged in shared memory (LEANTRAIN_GDN_STAGE_ROWS), both opt-in until
# this call has checked them; on for the whole call, with one Qwen3.5 run of the defaults beside.
#   Phase 1, side by side, untimed: the GPU unit tests of those kernels (against the CPU in f64);
#     parity of the small Qwen3.5 cases with the f64 arbiter; the Qwen3-30B-A3B QLoRA run (50
#     steps; its own peak, plan against measured, the loss on real text). Whatever still runs at the
#     phase's end is killed, so nothing of it runs into phase 2.
#   Phase 2, alone on the GPU, one after another: Qwen3.5-2B LoRA against transformers + PEFT,
#     the MoE LoRA bench against transformers + PEFT (then leantrain alone with the grouped GEMM's
#     3- and 4-stage pipelines), Gemma-3-1B at T 8192.
#   BUILD=build-gpu COMMIT=abc1234 OUT=/tmp/out QLORA_DATA=fortunes.jsonl bash bench/issues_44_45_verify.sh
# GEMMA=0 leaves out the Gemma-3-1B run; PROF_IF_BEFORE_S=0 the closing kernel table.
set -u
BUILD=${BUILD:-build-gpu}; OUT=${OUT:-/tmp/verify}; COMMIT=${COMMIT:-$(git rev-parse --short HEAD)}
export BUILD COMMIT
# The opt-in kernels under test, on for the whole call unless set (0 gives the defaults' figures).
export LEANTRAIN_ATTN_MMA_D256=${LEANTRAIN_ATTN_MMA_D256:-1} LEANTRAIN_GDN_STAGE_ROWS=${LEANTRAIN_GDN_STAGE_ROWS:-1}
mkdir -p "$OUT"
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
el "phase 1"
# LEAN=1 (little device time left): the tests, parity and the two side-by-side benches only.
LEAN=${LEAN:-0}
QLORA_PID=
# QLORA_RUN=0 leaves the QLoRA run out of phase 1 (a call of its own: moe_lora.sh QLORA=1).
QLORA_RUN=${QLORA_RUN:-1}; [ "$LEAN" = 1 ] && QLORA_RUN=0
[ "$QLORA_RUN" = 0 ] || { setsid bash -c "OUT=$OUT/qlora ROUNDS=0 QLORA=1 bash bench/moe_lora.sh" > "$OUT/qlora.log" 2>&1 &
  QLORA_PID=$!; }
setsid bash -c "timeout ${UNIT_S:-240} ./$BUILD/leantrain_tests --gtest_brief=1 \
  --gtest_filter='${UNIT_FILTER:-AttentionGqa.Cuda*:AttentionWindow.CudaMatchesCpuReference:Ops/OpsBackends.*gated_delta*:GatedDelta*:Qwen35Model.Cuda*:MoeCuda.*:CudnnAttention.*:PackedDocuments.*}'" \
  > "$OUT/unit.txt" 2>&1 &
UNIT_PID=$!
setsid bash -c "timeout ${PARITY_S:-240} python3 bench/peers/parity.py --bench $BUILD/leantrain_bench --out $OUT/parity \
  --commit $COMMIT --only qwen3_5-small,qwen3_5-small-untied-t130" > "$OUT/parity.log" 2>&1 &
PARITY_PID=$!
wait $UNIT_PID; el "unit done"
# The grouped expert GEMM with 3 and 4 K tiles in flight (LEANTRAIN_MOE_GEMM_STAGES): the same tests.
# The same with 256-column tiles (LEANTRAIN_MOE_GEMM_BN), alone and with 3 stages.
MOE_VARIANTS=${MOE_VARIANTS:-"S3 S4 B256 B256S3"}
moe_env() {  # S3 -> LEANTRAIN_MOE_GEMM_STAGES=3; B256S3 -> LEANTRAIN_MOE_GEMM_BN=256 LEANTRAIN_MOE_GEMM_STAGES=3
  local v=$1 e=""   # A...: the same with cuDNN's attention where it applies (--attention-kernel auto)
  [[ $v == A* ]] && e="MOE_EXTRA=--attention-kernel=auto" && v=${v#A}
  [[ $v == B256* ]] && e="$e LEANTRAIN_MOE_GEMM_BK=32 LEANTRAIN_MOE_GEMM_BN=256" && v=${v#B256}
  [ -n "$v" ] && e="$e LEANTRAIN_MOE_GEMM_STAGES=${v#S}"
  echo "$e"
}
for v in $MOE_VARIANTS; do
  [ "$LEAN" = 1 ] && break
  env $(moe_env "$v") timeout 120 "./$BUILD/leantrain_tests" --gtest_brief=1 --gtest_filter='MoeCuda.*:Moe*Cuda*' \
    2>&1 | tail -3 | sed "s/^/[$v] /" >> "$OUT/unit.txt"
done
el "moe stage tests done"
wait $PARITY_PID; el "parity done"
for _ in $(seq 1 "${QLORA_WAIT_S:-200}"); do [ -n "$QLORA_PID" ] && kill -0 $QLORA_PID 2>/dev/null || break; sleep 1; done
# Every process phase 1 started goes (an inner `timeout` makes a process group of its own, which
# killing the outer group would miss); the same after each timed bench.
stragglers() { pkill -9 -f "$BUILD/leantrain" 2>/dev/null; pkill -9 -f "bench/peers/" 2>/dev/null; sleep 1; }
[ -n "$QLORA_PID" ] && kill -- -$QLORA_PID 2>/dev/null; stragglers
cp "$OUT/qlora/qlora-run.log" "$OUT/qlora-run.log" 2>/dev/null; tail -4 "$OUT/qlora.log"
el "phase 1 done"
nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader
OUT1=$OUT
# Phase 2 in order of worth; a step starts only while the call has DEADLINE_S left to run it (the
# archive at the end must still be written: the device returns 8 files).
before() { [ $(( $(date +%s) - t0 + $1 )) -lt "${DEADLINE_S:-560}" ]; }
before 100 && (OUT=$OUT1/qwen35 ROUNDS=1 timeout "${QWEN_S:-150}" bash bench/qwen35_lora.sh throughput) > "$OUT/qwen35.log" 2>&1
stragglers; el "qwen35 (ours + peer) done"
before 80 && (OUT=$OUT1/moe-lora ROUNDS=1 QLORA=0 timeout "${MOE_S:-120}" bash bench/moe_lora.sh) > "$OUT/moe-lora.log" 2>&1
stragglers; el "moe bench done"
# The same leantrain run with both opt-in paths off: the before of the before/after, in this call.
before 60 && (OUT=$OUT1/qwen35-default ROUNDS=1 PEER=0 LEANTRAIN_ATTN_MMA_D256=0 LEANTRAIN_GDN_STAGE_ROWS=0 timeout 90 \
  bash bench/qwen35_lora.sh throughput) 2>&1 | grep -m1 tokens_per_s | sed 's/^/[defaults] /'
stragglers; el "qwen35 defaults done"
for v in $MOE_VARIANTS; do  # leantrain alone: the grouped GEMM's pipeline deeper, its tiles wider
  [ "$LEAN" = 1 ] && break
  before 45 || break
  (export $(moe_env "$v"); OUT=$OUT1/moe-lora-$v ROUNDS=1 QLORA=0 PEER=0 timeout 60 bash bench/moe_lora.sh) \
    > "$OUT/moe-lora-$v.log" 2>&1
  grep '"side": "leantrain"' "$OUT1/moe-lora-$v/moe-lora.jsonl" 2>/dev/null | head -1 | sed "s/^/[$v] /"
done
stragglers; el "moe stage benches done"
[ "$LEAN" = 1 ] || [ "${GEMMA:-1}" = 0 ] || ! before 60 || (OUT=$OUT1/gemma3 timeout "${GEMMA_S:-60}" bash bench/gpu_session.sh gemma3_long) > "$OUT/gemma3-long.log" 2>&1
el "gemma3 long done"; tail -3 "$OUT/gemma3-long.log"
# Time left in the call: the kernel table of a Qwen3.5-2B LoRA step after the changes.
if [ "$LEAN" != 1 ] && [ $(( $(date +%s) - t0 )) -lt "${PROF_IF_BEFORE_S:-420}" ]; then
  timeout "${PROF_S:-120}" bash bench/profile_train_kernels.sh "$OUT/prof" --model qwen3.5-2b --data synthetic --batch 1 \
    --seq-len 4096 --precision bf16-true --lora-rank 16 --lora-alpha 32 --checkpoint blocks --steps 2 --eval-batches 0 \
    > "$OUT/prof-qwen35.md" 2>&1
  rm -rf "$OUT/prof"; el "profile done"
fi
# The device returns few files a call: the raw JSON and the longer logs travel as one archive.
# unit.txt goes in too (a call once came back without it), and a copy of its last lines in call.log.
tail -5 "$OUT/unit.txt" 2>/dev/null
# Only the entries that exist: tar fails on a missing one, and then nothing would be removed.
(cd "$OUT" && keep=$(ls -d unit.txt qlora parity qwen35* moe-lora* gemma3 qlora.log gemma3-long.log 2>/dev/null); [ -n "$keep" ] &&
  tar czf raw.tgz $keep && rm -rf $keep)
el "all done"
