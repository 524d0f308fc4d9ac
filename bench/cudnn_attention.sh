#!/usr/bin/env bash
# Issue 46's cuDNN attention in one device call (about 6 minutes on an H100):
#   1. the attention unit tests on the GPU (cuDNN against the CPU reference and leantrain's kernels,
#      the host-side route and plan tests, the backend op table);
#   2. GPT-2 124M throughput, B16 x T1024, bf16-mixed, AdamW (bench/gpt2_speed.sh's measure:
#      leantrain_bench throughput, median of 20 steps after 5), --attention-kernel leantrain against
#      cudnn, each with the default lean saves and with --lean-saves 0, alternating over ROUNDS rounds;
#   3. the plan's peaks (leantrain plan, the meta dry run) against a 2-step CUDA train run of the same
#      GPT-2 config, for both kernels: the cuDNN backward's workspace must be in the plan to the byte.
# Builds nothing. Run from the repository root with a CUDA build's binaries in BIN_DIR:
#   BIN_DIR=gpu-carry OUT=$OUT bash bench/cudnn_attention.sh
# BIN_DIR holds leantrain, leantrain_tests and leantrain_bench (or the three gzipped). Writes $OUT/speed.jsonl,
# $OUT/plan_vs_measured.jsonl, the tests' log and each run's stderr (the first cudnn run's has
# LEANTRAIN_CUDNN_LOG=1: the cuDNN version, each plan built, its engine and workspace).
set -u
BIN_DIR=${BIN_DIR:-build-cuda}
OUT=${OUT:-/tmp/cudnn-attention}
ROUNDS=${ROUNDS:-2}
mkdir -p "$OUT"
# Binaries carried gzipped (leantrain.gz, ...) are unpacked outside $OUT first.
if [ ! -x "$BIN_DIR/leantrain_bench" ] && [ -f "$BIN_DIR/leantrain_bench.gz" ]; then
  mkdir -p /tmp/cudnn-attention-bin
  for b in leantrain leantrain_tests leantrain_bench; do
    gunzip -c "$BIN_DIR/$b.gz" >"/tmp/cudnn-attention-bin/$b" && chmod +x "/tmp/cudnn-attention-bin/$b"
  done
  BIN_DIR=/tmp/cudnn-attention-bin
fi
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
# libcudnn.so.9: the system's when there is one, else the Python environment's wheel.
if ! ldconfig -p 2>/dev/null | grep -q 'libcudnn\.so\.9' && [ ! -e /usr/local/cuda/lib64/libcudnn.so.9 ]; then
  d=$(python3 -c 'import nvidia.cudnn, os; print(os.path.join(list(nvidia.cudnn.__path__)[0], "lib"))' 2>/dev/null) &&
    export LD_LIBRARY_PATH="$d:$LD_LIBRARY_PATH"
fi
echo "gpu: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1), commit: ${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)}"
for d in ${LD_LIBRARY_PATH//:/ }; do ls "$d"/libcudnn.so.9* 2>/dev/null | head -1; done | head -2 | sed 's/^/libcudnn: /'

echo "== 1. unit tests"
timeout 200 "$BIN_DIR/leantrain_tests" --gtest_brief=1 \
  --gtest_filter='CudnnAttention.*:AttentionKernel.*:BackendOps.*' >"$OUT/tests.log" 2>&1
echo "tests exit $?"
grep -E '^\[ (cuDNN|timing) |FAILED|Failure|error|Expected|Which is|actual|^\[  PASSED|^\[  SKIPPED|tests ran' "$OUT/tests.log" | head -60

echo "== 2. throughput (ms/step, tokens/s, peak allocated / reserved GiB)"
VARIANTS=("leantrain||" "cudnn|--attention-kernel cudnn|" "leantrain-keep|--lean-saves 0|" "cudnn-keep|--attention-kernel cudnn --lean-saves 0|")
: >"$OUT/speed.jsonl"
for round in $(seq 1 "$ROUNDS"); do
  for v in "${VARIANTS[@]}"; do
    IFS='|' read -r label flags envs <<<"$v"
    [ "$round" = 1 ] && [ "$label" = cudnn ] && envs="LEANTRAIN_CUDNN_LOG=1"
    # shellcheck disable=SC2086
    line=$(env $envs timeout 120 "$BIN_DIR/leantrain_bench" throughput --device cuda --model gpt2-124m \
      --precision bf16-mixed --batch 16 --seq 1024 --warmup 5 --steps 20 $flags 2>"$OUT/$label.r$round.err" | tail -1)
    case "$line" in
      \{*) echo "{\"variant\": \"$label\", \"round\": $round, ${line#\{}" >>"$OUT/speed.jsonl" ;;
      *) echo "$label round $round failed: $(tail -2 "$OUT/$label.r$round.err" | tr '\n' ' ')" ;;
    esac
  done
done
python3 - "$OUT/speed.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
for r in rows:
    print(f"{r['variant']:15s} round {r['round']}  {r['ms_per_step']:7.2f} ms  {r['tokens_per_s']:9.0f} tok/s  "
          f"peak {r['peak_allocated'] / 2**30:.3f} / {r['peak_reserved'] / 2**30:.3f} GiB  kernel {r.get('attention_kernel')}")
by = {}
for r in rows: by.setdefault(r['variant'], []).append(r['ms_per_step'])
for v, ms in by.items(): print(f"{v:15s} best {min(ms):.2f} ms, mean {sum(ms) / len(ms):.2f} ms over {len(ms)}")
PY
grep -h "cudnn attention\|cuDNN\|leantrain:" "$OUT"/cudnn.r1.err 2>/dev/null | head -12

echo "== 3. plan vs measured (GPT-2 124M B16 x T1024 bf16-mixed, 2 steps)"
COMMON="--model gpt2-124m --batch 16 --seq-len 1024 --optimizer adamw --precision bf16-mixed --data synthetic --steps 2 --eval-batches 1 --log-every 1"
: >"$OUT/plan_vs_measured.jsonl"
for kernel in leantrain cudnn; do
  for extra in "" "--no-lean-saves"; do
    # shellcheck disable=SC2086
    timeout 60 "$BIN_DIR/leantrain" plan $COMMON $extra --attention-kernel $kernel --json >"$OUT/plan.json" 2>"$OUT/plan.err" ||
      echo "plan failed: $(tail -1 "$OUT/plan.err")"
    # shellcheck disable=SC2086
    timeout 90 "$BIN_DIR/leantrain" train $COMMON $extra --attention-kernel $kernel --device cuda \
      --metrics-json "$OUT/run.json" >"$OUT/run.log" 2>&1 || { echo "train failed: $(tail -1 "$OUT/run.log")"; rm -f "$OUT/run.json"; }
    python3 - "$kernel $extra" "$OUT/plan.json" "$OUT/run.json" >>"$OUT/plan_vs_measured.jsonl" <<'PY'
import json, sys
name, pp, rp = sys.argv[1:]
def load(p):
    try: return json.load(open(p))
    except Exception: return None
p, r = load(pp), load(rp)
row = {"config": name.strip()}
for k in ("peak_allocated_bytes", "peak_reserved_bytes"):
    row["plan_" + k] = p[k] if p else None
    row["measured_" + k] = r[k] if r else None
    row["diff_" + k] = (p[k] - r[k]) if p and r else None
print(json.dumps(row))
PY
    rm -f "$OUT/run.json"
  done
done
python3 - "$OUT/plan_vs_measured.jsonl" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    g = lambda k: "-" if r[k] is None else f"{r[k] / 2**30:.4f}"
    print(f"{r['config']:26s} allocated plan {g('plan_peak_allocated_bytes')} measured {g('measured_peak_allocated_bytes')} GiB "
          f"(diff {r['diff_peak_allocated_bytes']}), reserved plan {g('plan_peak_reserved_bytes')} measured "
          f"{g('measured_peak_reserved_bytes')} GiB (diff {r['diff_peak_reserved_bytes']})")
PY
