#!/usr/bin/env bash
# Validates the budget search's cost model (src/plan/cost_model.cpp) on the GPU machine: for each
# candidate configuration of one model (ViT-B/16, 224x224x3, batch 32, synthetic images), the
# plan's predicted step time (`leantrain plan --json`: predicted_step_seconds) against the
# measured steady-state step time (`leantrain train --device cuda --metrics`: each step's
# "seconds", synchronised; the median of the steps after the first WARMUP). Both are taken
# relative to the first (base) configuration. Prints one row per candidate, the rank agreement
# (Spearman) and the mean absolute error of the relative costs, and writes cost_model.json to
# $OUT. Builds nothing; run from the repo root with prebuilt binaries in $BUILD:
#   BUILD=build-gpu OUT=/tmp/cm bash bench/cost_model.sh
# STEPS (default 20) and WARMUP (default 5) set the measurement; MODEL/BATCH the model.
set -u
BUILD=${BUILD:-build-gpu}
OUT=${OUT:-/tmp/leantrain-cost-model}
STEPS=${STEPS:-20}
WARMUP=${WARMUP:-5}
MODEL=${MODEL:-vit-b-16}
BATCH=${BATCH:-32}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
LT="./$BUILD/leantrain"
COMMON="--model $MODEL --data synthetic --batch $BATCH --lr 1e-4 --warmup 0 --weight-decay 0 --eval-batches 1"
BLK='encoder\.layers\.encoder_layer_[0-9]+'
# name|flags (the first is the base every ratio is taken against)
CANDIDATES=(
  "base bf16-mixed|--precision bf16-mixed"
  "micro-batch 16|--precision bf16-mixed --micro-batch 16"
  "micro-batch 8|--precision bf16-mixed --micro-batch 8"
  "micro-batch 2|--precision bf16-mixed --micro-batch 2"
  "checkpoint blocks|--precision bf16-mixed --checkpoint blocks"
  "checkpoint every:2|--precision bf16-mixed --checkpoint every:2"
  "checkpoint mlp|--precision bf16-mixed --checkpoint $BLK\\.mlp"
  "checkpoint attention core|--precision bf16-mixed --checkpoint $BLK\\.self_attention\\.core"
  "bf16 state|--precision bf16-mixed --state-dtype bf16"
  "adamw8bit|--precision bf16-mixed --optimizer adamw8bit"
  "fused step|--precision bf16-mixed --fused-step"
  "fused step + clip (norm pass)|--precision bf16-mixed --fused-step --clip 1"
  "checkpoint selective|--precision bf16-mixed --checkpoint selective"
  "mb 8 + blocks + 8-bit|--precision bf16-mixed --micro-batch 8 --checkpoint blocks --optimizer adamw8bit"
  "bf16-true|--precision bf16-true"
  "32-true|--precision 32-true"
)
rows="$OUT/cost_model_rows.jsonl"
: >"$rows"
for entry in "${CANDIDATES[@]}"; do
  name=${entry%%|*}
  flags=${entry#*|}
  echo "== $name: $flags" >&2
  # shellcheck disable=SC2086
  "$LT" plan $COMMON $flags --json >"$OUT/plan.json" 2>"$OUT/plan.err" || echo "plan failed: $(tail -1 "$OUT/plan.err")" >&2
  rm -f "$OUT/metrics.jsonl"
  # shellcheck disable=SC2086
  timeout 300 "$LT" train $COMMON $flags --steps "$STEPS" --device cuda --metrics "$OUT/metrics.jsonl" \
    --log-every "$STEPS" >"$OUT/train.log" 2>&1 || echo "train failed: $(tail -1 "$OUT/train.log")" >&2
  python3 - "$name" "$flags" "$OUT/plan.json" "$OUT/metrics.jsonl" "$WARMUP" >>"$rows" <<'PY'
import json, statistics, sys
name, flags, plan, metrics, warmup = sys.argv[1:]
row = {"name": name, "flags": flags}
try:
    p = json.load(open(plan))
    row["predicted_step_seconds"] = p.get("predicted_step_seconds")
    row["recompute_flops"] = p.get("recompute_flops")
    row["peak_reserved_bytes"] = p.get("peak_reserved_bytes")
except Exception as e:
    row["plan_error"] = str(e)
try:
    secs = [json.loads(l)["seconds"] for l in open(metrics) if '"loss"' in l]
    steady = secs[int(warmup):]
    row["measured_step_seconds"] = statistics.median(steady) if steady else None
    row["measured_steps"] = len(steady)
except Exception as e:
    row["measured_error"] = str(e)
print(json.dumps(row))
PY
  tail -1 "$rows" >&2
done
python3 - "$rows" "$OUT/cost_model.json" "$MODEL" "$BATCH" <<'PY'
import json, subprocess, sys
rows_path, out, model, batch = sys.argv[1:]
rows = [json.loads(l) for l in open(rows_path)]
base = rows[0]
ok = [r for r in rows if r.get("predicted_step_seconds") and r.get("measured_step_seconds")]
for r in ok:
    r["predicted_relative"] = r["predicted_step_seconds"] / base["predicted_step_seconds"]
    r["measured_relative"] = r["measured_step_seconds"] / base["measured_step_seconds"]
def ranks(v):
    order = sorted(range(len(v)), key=lambda i: v[i])
    r = [0.0] * len(v)
    i = 0
    while i < len(order):  # ties share their mean rank
        j = i
        while j + 1 < len(order) and v[order[j + 1]] == v[order[i]]:
            j += 1
        for k in range(i, j + 1):
            r[order[k]] = (i + j) / 2
        i = j + 1
    return r
def spearman(a, b):
    ra, rb = ranks(a), ranks(b)
    n = len(a)
    ma, mb = sum(ra) / n, sum(rb) / n
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    va = sum((x - ma) ** 2 for x in ra) ** 0.5
    vb = sum((y - mb) ** 2 for y in rb) ** 0.5
    return cov / (va * vb) if va and vb else None
pred = [r["predicted_relative"] for r in ok]
meas = [r["measured_relative"] for r in ok]
rho = spearman(pred, meas) if len(ok) > 2 else None
mae = sum(abs(p - m) for p, m in zip(pred, meas)) / len(ok) if ok else None
print(f"\ncost model vs measured: {model}, batch {batch}, relative to '{base['name']}'")
print(f"  {'candidate':28s} {'pred s':>9s} {'meas s':>9s} {'pred rel':>9s} {'meas rel':>9s} {'pred/meas':>9s}")
for r in rows:
    if r in ok:
        print(f"  {r['name']:28s} {r['predicted_step_seconds']:9.4f} {r['measured_step_seconds']:9.4f} "
              f"{r['predicted_relative']:9.3f} {r['measured_relative']:9.3f} {r['predicted_relative'] / r['measured_relative']:9.3f}")
    else:
        print(f"  {r['name']:28s} (failed: {r.get('plan_error') or r.get('measured_error') or 'no figures'})")
print(f"rank agreement (Spearman) {rho if rho is None else round(rho, 3)} over {len(ok)} candidates; "
      f"mean |pred rel - meas rel| {mae if mae is None else round(mae, 3)}")
try:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
except Exception:
    commit = "unknown"
try:
    gpu = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
except Exception:
    gpu = "unknown"
json.dump({"model": model, "batch": batch, "commit": commit, "gpu": gpu, "spearman": rho, "mean_abs_error": mae,
           "rows": rows}, open(out, "w"), indent=1)
print(f"wrote {out}")
PY
echo "cost_model done"
