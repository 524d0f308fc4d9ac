#!/usr/bin/env bash
# The grouped expert GEMM alone (leantrain_bench grouped_gemm: the shapes of one Qwen3-30B-A3B
# expert MLP at B2 x T2048, bf16) for each kernel variant in VARIANTS, then Nsight Compute's
# sections on the default kernel's gate|up forward and input gradient, then the CUDA MoE unit
# tests with each variant. Run on the GPU machine from the repo root:
#   BUILD=build-gpu OUT=/tmp/out VARIANTS="D K32S2 S2" bash bench/moe_gemm_call.sh
# Variants: D (defaults: 64 deep, 3 stages since 9bcbf09's measurements), K32S2 (the earlier
# defaults: 32 deep, 2 stages), S2/S3/S4 (LEANTRAIN_MOE_GEMM_STAGES), N256 (LEANTRAIN_MOE_GEMM_BN=256
# with 32 deep), K64 (LEANTRAIN_MOE_GEMM_BK=64), K64S3 (both). Prints "best: <variant> <knobs>", the variant with
# the least time over the four expert-weight products (written to $OUT/best-knobs too).
# NCU=0 / UNIT=0 leave out the Nsight sections / the unit tests.
set -u
BUILD=${BUILD:-build-gpu}; OUT=${OUT:-/tmp/moe-gemm}
mkdir -p "$OUT"
knobs() {
  case "$1" in
    D) echo "" ;;
    K32S2) echo "LEANTRAIN_MOE_GEMM_BK=32 LEANTRAIN_MOE_GEMM_STAGES=2" ;;
    S2) echo "LEANTRAIN_MOE_GEMM_STAGES=2" ;;
    S3) echo "LEANTRAIN_MOE_GEMM_STAGES=3" ;;
    S4) echo "LEANTRAIN_MOE_GEMM_STAGES=4" ;;
    N256) echo "LEANTRAIN_MOE_GEMM_BK=32 LEANTRAIN_MOE_GEMM_BN=256" ;;
    K64) echo "LEANTRAIN_MOE_GEMM_BK=64" ;;
    K64S3) echo "LEANTRAIN_MOE_GEMM_BK=64 LEANTRAIN_MOE_GEMM_STAGES=3" ;;
    *) echo "unknown variant $1" >&2; return 1 ;;
  esac
}
for v in ${VARIANTS:-D K32S2 S2}; do
  k=$(knobs "$v") || continue
  env $k "./$BUILD/leantrain_bench" grouped_gemm ${GEMM_FLAGS:-} | sed "s/^{/{\"variant\": \"$v\", /" | tee -a "$OUT/grouped-gemm.jsonl"
done
python3 - "$OUT/grouped-gemm.jsonl" <<'PY' > "$OUT/best.txt"
import json, sys, collections
tot = collections.defaultdict(float)
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r["case"] in ("gate_up_fwd", "down_fwd", "gate_up_dgrad", "down_dgrad"):
        tot[r["variant"]] += r["ms"]
for v, ms in sorted(tot.items(), key=lambda x: x[1]):
    print(v, round(ms, 4))
PY
best=$(head -1 "$OUT/best.txt" | cut -d' ' -f1)
knobs "$best" > "$OUT/best-knobs"
echo "best: $best $(cat "$OUT/best-knobs") (four products, ms: $(tr '\n' ' ' < "$OUT/best.txt"))"
if [ "${NCU:-1}" = 1 ] && command -v ncu > /dev/null; then
  # Launches 2 and 6 of the bench are gate|up's timed forward and input-gradient runs
  # (each case: one warm-up launch, then --iters timed ones).
  timeout 120 ncu --section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats \
    --section MemoryWorkloadAnalysis --kernel-name-base demangled -k regex:mma_gemm --launch-skip 1 --launch-count 1 \
    "./$BUILD/leantrain_bench" grouped_gemm --iters 1 > "$OUT/ncu-gate-up-fwd.txt" 2>&1
  grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|Achieved Occupancy|Registers Per|Stall|Warp Cycles|L2 Hit|DRAM Throughput|Theoretical Occ|Block Limit" \
    "$OUT/ncu-gate-up-fwd.txt" | head -30
fi
if [ "${UNIT:-1}" = 1 ]; then
  for v in ${VARIANTS:-D K32S2 S2}; do
    k=$(knobs "$v") || continue
    env $k timeout 120 "./$BUILD/leantrain_tests" --gtest_filter='MoeCuda.*:MoeExperts*:LoraLinearOp*' 2>&1 |
      grep -E "^\[  (PASSED|FAILED) |FAILED  \]|tests ran" | sed "s/^/$v: /" | tee -a "$OUT/unit.txt"
  done
fi
