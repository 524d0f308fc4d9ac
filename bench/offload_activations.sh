#!/usr/bin/env bash
# --offload-activations on the GPU: GPT-2 124M (B16 x 1024, bf16-mixed, AdamW) and ViT-L/16 rung 7
# (batch 16, micro-batch 4, SGD, bf16-true), each with --checkpoint blocks alone and with
# --offload-activations added, 8 steps on synthetic data. Prints a markdown table of the device
# peak allocated, the pinned host peak, the steady throughput and its ratio to checkpointing
# alone, read from --metrics-json. Builds nothing:
#   BUILD=build-gpu bash bench/offload_activations.sh
# Writes offload_activations.{md,json} to $OUT (when set) and bench/results/.
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-gpu}
LT=$BUILD/leantrain
RES=bench/results
mkdir -p "$RES"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
COMMON="--data synthetic --steps 8 --eval-batches 1 --log-every 1 --device cuda"
CONFIGS=(
  "gpt2-124m B16x1024 bf16-mixed|--model gpt2-124m --batch 16 --seq-len 1024 --optimizer adamw --precision bf16-mixed --checkpoint blocks"
  "vit-l-16 rung 7|--model vit-l-16 --batch 16 --micro-batch 4 --optimizer sgd --precision bf16-true --checkpoint blocks"
)
rows="$WORK/rows.jsonl"
: >"$rows"
for entry in "${CONFIGS[@]}"; do
  name=${entry%%|*}
  flags=${entry#*|}
  for offload in "" "--offload-activations"; do
    echo "== $name $offload: $flags" >&2
    # shellcheck disable=SC2086
    timeout 600 "$LT" train $flags $offload $COMMON --metrics-json "$WORK/run.json" >"$WORK/run.log" 2>&1 ||
      { echo "train failed: $(tail -1 "$WORK/run.log")" >&2; rm -f "$WORK/run.json"; }
    python3 - "$name" "$flags $offload" "$offload" "$WORK/run.json" >>"$rows" <<'PY'
import json, sys
name, flags, offload, rp = sys.argv[1:]
try: r = json.load(open(rp))
except Exception: r = None
row = {"config": name, "flags": flags.strip(), "offload": bool(offload)}
for k in ("peak_allocated_bytes", "peak_reserved_bytes", "peak_pinned_host_bytes", "steady_items_per_s", "unit"):
    row[k] = r.get(k) if r else None
print(json.dumps(row))
PY
  done
done
python3 - "$rows" "$RES" "${OUT:-}" <<'PY'
import json, os, subprocess, sys
rows_path, res, out = sys.argv[1:]
rows = [json.loads(l) for l in open(rows_path)]
gib = lambda b: "n/a" if b is None else f"{b / 2**30:.3f} GiB"
try: gpu = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
except Exception: gpu = "unknown"
commit = os.environ.get("COMMIT") or subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
md = [f"# --offload-activations ({gpu}, commit {commit})", "",
      "| config | offload | device peak allocated | device peak reserved | pinned host peak | throughput | throughput ratio | device peak ratio |",
      "|---|---|---|---|---|---|---|---|"]
base = {}
for r in rows:
    if not r["offload"]: base[r["config"]] = r
for r in rows:
    b = base.get(r["config"])
    tput = "n/a" if r["steady_items_per_s"] is None else f"{r['steady_items_per_s']:.0f} {r['unit']}"
    ratio = lambda k: "n/a" if not b or not b.get(k) or r.get(k) is None else f"{r[k] / b[k]:.3f}"
    md.append(f"| {r['config']} | {'yes' if r['offload'] else 'no'} | {gib(r['peak_allocated_bytes'])} | "
              f"{gib(r['peak_reserved_bytes'])} | {gib(r['peak_pinned_host_bytes'])} | {tput} | "
              f"{ratio('steady_items_per_s')} | {ratio('peak_allocated_bytes')} |")
md += ["", "Both rows of a config use --checkpoint blocks; ratios are against it. Throughput: the steady rate "
       "(the first two steps left out) from --metrics-json. The pinned host peak includes the data loader's ring."]
text = "\n".join(md) + "\n"
print(text)
doc = {"gpu": gpu, "commit": commit, "rows": rows}
for dest in filter(None, [res, out]):
    open(f"{dest}/offload_activations.md", "w").write(text)
    json.dump(doc, open(f"{dest}/offload_activations.json", "w"), indent=1)
PY
