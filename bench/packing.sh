#!/usr/bin/env bash
# Padding-free packing (issue 48) against padded rows on the GPU: text tokens per second of one
# model trained on a length-skewed set of documents with --packing none (one document a row,
# padded to --seq-len), docs (whole documents packed, block-diagonal attention, positions from 0)
# and concat (back to back, attending across documents: the old behaviour), alternating over
# ROUNDS. tok/s counts text tokens only (padding is not counted), so the three are comparable:
# the same documents, the same model, the same rows' length. Each run prints one JSON line.
#   BUILD=g OUT=$OUT ROUNDS=2 bash bench/packing.sh
#   MODEL=gpt2-124m SEQ=1024 BATCH=16 bash bench/packing.sh      (the defaults)
#   MODEL=tinyllama-1.1b SEQ=2048 BATCH=4 PRECISION=bf16-mixed EXTRA="--checkpoint blocks" bash bench/packing.sh
# DEVICE=cpu runs it on the CPU (a check of the script; its timings mean nothing):
#   BUILD=build-cpu MODEL=llama-tiny SEQ=128 BATCH=8 STEPS=4 DOCS=400 MEDIAN=30 PRECISION=32-true DEVICE=cpu ROUNDS=1 bash bench/packing.sh
# The documents: DOCS of them (default 20000), lengths drawn from a log-normal with median
# MEDIAN words (default 60) and a long tail (sigma 1.2, cut at 4 x SEQ words), the byte-level
# GPT-2 test tokenizer's ids for GPT-2 (or TOKENIZER=DIR). Documents longer than a row are cut
# into rows in all three modes.
set -u
BUILD=${BUILD:-build}; OUT=${OUT:-/tmp/packing}; ROUNDS=${ROUNDS:-2}
MODEL=${MODEL:-gpt2-124m}; SEQ=${SEQ:-1024}; BATCH=${BATCH:-16}; STEPS=${STEPS:-30}
PRECISION=${PRECISION:-bf16-mixed}; DOCS=${DOCS:-20000}; MEDIAN=${MEDIAN:-60}; DEVICE=${DEVICE:-cuda}
TOKENIZER=${TOKENIZER:-tests/data/tokenizers/gpt2}
mkdir -p "$OUT"
echo "gpu: $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1), commit: ${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)}"
python3 - "$OUT/skewed.jsonl" "$DOCS" "$MEDIAN" "$SEQ" <<'PY'
import json, math, random, sys
path, n, median, seq = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
random.seed(48)
words = ("the of and to in is was for that with on as by at from his an were are which this be or "
         "had not first one their its new after but who they have her she two been other when there "
         "all during into school time may years more most only over city some world would where later").split()
lens = []
with open(path, "w") as f:
    for i in range(n):
        k = max(1, min(4 * seq, int(random.lognormvariate(math.log(median), 1.2))))
        lens.append(k)
        f.write(json.dumps({"text": " ".join(random.choice(words) for _ in range(k))}) + "\n")
lens.sort()
print(json.dumps({"documents": n, "words_median": lens[n // 2], "words_p90": lens[9 * n // 10], "words_max": lens[-1]}))
PY
F=(--model "$MODEL" --data "$OUT/skewed.jsonl" --tokenizer "$TOKENIZER" --seq-len "$SEQ" --batch "$BATCH"
  --precision "$PRECISION" --steps "$STEPS" --eval-batches 1 --log-every 10 --device "$DEVICE" ${EXTRA:-})
for round in $(seq 1 "$ROUNDS"); do
  for packing in none docs concat; do
    log="$OUT/$packing-$round.log"
    timeout 400 "./$BUILD/leantrain" train "${F[@]}" --packing "$packing" --metrics-json "$OUT/$packing-$round.json" >"$log" 2>&1 \
      || { echo "{\"packing\": \"$packing\", \"round\": $round, \"error\": \"$(tail -1 "$log" | tr '"' "'")\"}"; continue; }
    python3 - "$OUT/$packing-$round.json" "$log" "$packing" "$round" <<'PY' | tee -a "$OUT/packing.jsonl"
import json, re, sys
run, log = json.load(open(sys.argv[1])), open(sys.argv[2]).read()
fill = re.search(r"text fills ([0-9.]+)%", log)
rows = re.search(r"in ([0-9]+) rows|([0-9]+) windows", log)
print(json.dumps({"packing": sys.argv[3], "round": int(sys.argv[4]), "text_tokens_per_s": round(run["steady_items_per_s"]),
                  "text_fill_pct": float(fill.group(1)) if fill else 100.0,
                  "rows": int(next(g for g in rows.groups() if g)) if rows else None,
                  "peak_allocated": run["peak_allocated_bytes"]}))
PY
  done
done
python3 - "$OUT/packing.jsonl" <<'PY'
import json, sys
from collections import defaultdict
best = defaultdict(float)
for line in open(sys.argv[1]):
    r = json.loads(line)
    best[r["packing"]] = max(best[r["packing"]], r["text_tokens_per_s"])
for k in ("none", "docs", "concat"):
    if k in best:
        print(f"{k:>6}: {best[k]:>12,.0f} text tok/s" + (f"  ({best[k] / best['none']:.2f}x padded)" if best.get("none") else ""))
PY
