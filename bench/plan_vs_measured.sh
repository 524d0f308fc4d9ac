#!/usr/bin/env bash
# Exactness of the memory prediction (BENCHMARKS.md section 3): for each config, the meta
# dry-run's peaks, device and pinned host (`leantrain plan --json`) against a CUDA run's measured ones (`leantrain
# train --device cuda --steps 2 --metrics-json`), same flags, synthetic data. Builds nothing:
#   LT=build-gpu/leantrain bash bench/plan_vs_measured.sh
# COMMIT names the binaries' commit in the results (the GPU machine's git copy may be stale).
# Writes plan_vs_measured.{md,json} to $OUT (when set) and bench/results/. The CUDA context
# and library handles are outside the allocator and outside both figures.
set -u
cd "$(dirname "$0")/.."
LT=${LT:-build-gpu/leantrain}
RES=bench/results
mkdir -p "$RES" ${OUT:+"$OUT"}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
COMMON="--data synthetic --steps 2 --eval-batches 1 --log-every 1"
VIT="--model vit-l-16"
CONFIGS=(
  "rung1 fp32 adamw b64|$VIT --batch 64 --optimizer adamw"
  "rung2 16-mixed|$VIT --batch 64 --optimizer adamw --precision 16-mixed"
  "rung3 bf16-true|$VIT --batch 64 --optimizer adamw --precision bf16-true"
  "rung4 + batch 16|$VIT --batch 16 --optimizer adamw --precision bf16-true"
  "rung5 + micro-batch 4|$VIT --batch 16 --micro-batch 4 --optimizer adamw --precision bf16-true"
  "rung6 + sgd|$VIT --batch 16 --micro-batch 4 --optimizer sgd --precision bf16-true"
  "rung7 + checkpoint blocks|$VIT --batch 16 --micro-batch 4 --optimizer sgd --precision bf16-true --checkpoint blocks"
  "rung8 + micro-batch 1|$VIT --batch 16 --micro-batch 1 --optimizer sgd --precision bf16-true --checkpoint blocks"
  "gpt2-124m bf16-mixed b16x1024|--model gpt2-124m --batch 16 --seq-len 1024 --optimizer adamw --precision bf16-mixed"
  "gpt2-124m bf16-mixed b16x1024 no-lean-saves|--model gpt2-124m --batch 16 --seq-len 1024 --optimizer adamw --precision bf16-mixed --no-lean-saves"
  "vit-l selective b32 bf16-mixed|$VIT --batch 32 --optimizer adamw --precision bf16-mixed --checkpoint selective"
  "vit-l fused step + clip (norm pass)|$VIT --batch 16 --optimizer sgd --precision bf16-true --checkpoint blocks --fused-step --clip 1"
  "rung7 + offload activations|$VIT --batch 16 --micro-batch 4 --optimizer sgd --precision bf16-true --checkpoint blocks --offload-activations"
  "gpt2-124m b16x1024 blocks + offload|--model gpt2-124m --batch 16 --seq-len 1024 --optimizer adamw --precision bf16-mixed --checkpoint blocks --offload-activations"
  "llama-small f32 b4x77|--config bench/configs/llama-small.json --batch 4 --seq-len 77 --optimizer adamw"
  "qwen2-small bf16-mixed b4x77|--config bench/configs/qwen2-small.json --batch 4 --seq-len 77 --optimizer adamw --precision bf16-mixed"
  "llama3 rope hd128 b2x300|--config bench/configs/llama3-rope-d128.json --batch 2 --seq-len 300 --optimizer adamw"
  "smollm2-135m b2x256 bf16-mixed|--model smollm2-135m --batch 2 --seq-len 256 --optimizer adamw --precision bf16-mixed"
  "tinyllama-1.1b b1x128 bf16-true|--model tinyllama-1.1b --batch 1 --seq-len 128 --optimizer adamw --precision bf16-true"
  "tinyllama-1.1b b4x1024 bf16-mixed blocks fused-step|--model tinyllama-1.1b --batch 4 --seq-len 1024 --optimizer adamw --precision bf16-mixed --checkpoint blocks --fused-step"
  "resnet50 b32 bf16-mixed|--model resnet50 --batch 32 --optimizer sgd --momentum 0.9 --precision bf16-mixed"
  "resnet50 b64 f32 stages 1-2 checkpointed|--model resnet50 --batch 64 --optimizer adamw --checkpoint layer(1|2)"
  "resnet152 b16 bf16-true|--model resnet152 --batch 16 --optimizer sgd --precision bf16-true"
  "tinyllama-1.1b DPO LoRA 4 pairs x512 bf16-true|--model tinyllama-1.1b --objective dpo --batch 4 --seq-len 512 --precision bf16-true --lora-rank 16 --lora-alpha 32 --optimizer adamw"
  "llama-small DPO full 4 pairs x77 f32 (reference pass)|--config bench/configs/llama-small.json --objective dpo --batch 4 --micro-batch 2 --seq-len 77 --optimizer adamw"
  "smollm2-135m DPO full 2 pairs x256 bf16-mixed blocks|--model smollm2-135m --objective dpo --batch 2 --seq-len 256 --optimizer adamw --precision bf16-mixed --checkpoint blocks"
)
# ROWS: a regular expression choosing configurations by name (default: all).
if [ -n "${ROWS:-}" ]; then
  kept=()
  for entry in "${CONFIGS[@]}"; do [[ "${entry%%|*}" =~ $ROWS ]] && kept+=("$entry"); done
  CONFIGS=("${kept[@]}")
fi
rows="$WORK/rows.jsonl"
: >"$rows"
for entry in "${CONFIGS[@]}"; do
  name=${entry%%|*}
  flags=${entry#*|}
  echo "== $name: $flags" >&2
  # shellcheck disable=SC2086
  "$LT" plan $flags $COMMON --json >"$WORK/plan.json" 2>"$WORK/plan.err" || { echo "plan failed: $(cat "$WORK/plan.err")" >&2; }
  # shellcheck disable=SC2086
  "$LT" train $flags $COMMON --device cuda --metrics-json "$WORK/run.json" >"$WORK/run.log" 2>&1 ||
    { echo "train failed: $(tail -1 "$WORK/run.log")" >&2; rm -f "$WORK/run.json"; }
  python3 - "$name" "$flags" "$WORK/plan.json" "$WORK/run.json" >>"$rows" <<'PY'
import json, os, sys
name, flags, pp, rp = sys.argv[1:]
def load(p):
    try: return json.load(open(p))
    except Exception: return None
p, r = load(pp), load(rp)
row = {"config": name, "flags": flags}
for k in ("peak_allocated_bytes", "peak_reserved_bytes", "peak_pinned_host_bytes"):
    row["predicted_" + k] = p[k] if p else None
    row["measured_" + k] = r[k] if r else None
    row["diff_" + k] = (p[k] - r[k]) if p and r else None
if p: row["plan_seconds"] = p["plan_seconds"]; row["predicted_total_needed_bytes"] = p["total_needed_bytes"]
print(json.dumps(row))
PY
done
python3 - "$rows" "$RES" "${OUT:-}" "$LT" <<'PY'
import json, os, subprocess, sys
rows_path, res, out, lt = sys.argv[1:]
rows = [json.loads(l) for l in open(rows_path)]
gib = lambda b: "n/a" if b is None else f"{b / 2**30:.3f} GiB"
d = lambda b: "n/a" if b is None else f"{b:+d} B"
try: gpu = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
except Exception: gpu = "unknown"
commit = os.environ.get("COMMIT") or subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
md = [f"# plan vs measured ({gpu}, commit {commit})", "",
      "| config | predicted alloc | measured alloc | diff | predicted reserved | measured reserved | diff | predicted pinned host | measured pinned host | diff |",
      "|---|---|---|---|---|---|---|---|---|---|"]
for r in rows:
    md.append(f"| {r['config']} | {gib(r['predicted_peak_allocated_bytes'])} | {gib(r['measured_peak_allocated_bytes'])} | "
              f"{d(r['diff_peak_allocated_bytes'])} | {gib(r['predicted_peak_reserved_bytes'])} | "
              f"{gib(r['measured_peak_reserved_bytes'])} | {d(r['diff_peak_reserved_bytes'])} | "
              f"{gib(r['predicted_peak_pinned_host_bytes'])} | {gib(r['measured_peak_pinned_host_bytes'])} | "
              f"{d(r['diff_peak_pinned_host_bytes'])} |")
md += ["", "CUDA context and library handles are outside both columns (plan reports them on their own line)."]
text = "\n".join(md) + "\n"
print(text)
doc = {"gpu": gpu, "commit": commit, "rows": rows}
for dest in filter(None, [res, out]):
    open(f"{dest}/plan_vs_measured.md", "w").write(text)
    json.dump(doc, open(f"{dest}/plan_vs_measured.json", "w"), indent=1)
PY
