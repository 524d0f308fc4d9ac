#!/usr/bin/env bash
# Text classifiers side by side with PyTorch (issue 17) on the GPU machine: for each configuration,
# leantrain (synthetic whole rows, 8 steps) then bench/peers/encoder_torch.py with the same model,
# batch, length and precision. One JSON line per run to $OUT/encoders.jsonl, and a plan of each
# leantrain run (plan == measured). seq_per_s: (steps - 1) * batch over the seconds of steps 2..N.
# Run from the repo root with prebuilt binaries in $BUILD (default build). ONLY=regex picks configurations;
# NO_COMPILE=1 skips the compiled PyTorch peer.
set -u
BUILD=${BUILD:-build}
OUT=${OUT:-/tmp/leantrain-encoders}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
# name | leantrain flags | peer flags
CONFIGS=(
  "distilbert-seed|--model distilbert-base-uncased --batch 16 --seq-len 512 --precision bf16-true --checkpoint blocks --optimizer adamw8bit|--model distilbert --batch 16 --seq 512 --precision bf16-true --checkpoint"
  "distilbert-seed-adamw|--model distilbert-base-uncased --batch 16 --seq-len 512 --precision bf16-true --checkpoint blocks --optimizer adamw|--model distilbert --batch 16 --seq 512 --precision bf16-true --checkpoint"
  "distilbert-mixed|--model distilbert-base-uncased --batch 16 --seq-len 512 --precision bf16-mixed --optimizer adamw|--model distilbert --batch 16 --seq 512 --precision bf16-mixed"
  "bert-base-mixed|--model bert-base-uncased --batch 32 --seq-len 128 --precision bf16-mixed --optimizer adamw|--model bert --batch 32 --seq 128 --precision bf16-mixed"
  "roberta-base-mixed|--model roberta-base --batch 32 --seq-len 128 --precision bf16-mixed --optimizer adamw|--model roberta --batch 32 --seq 128 --precision bf16-mixed"
  # Seed 002's BigBird-RoBERTa-base recipe (bf16-true, checkpointing, 8-bit AdamW) at 4096 positions, block_sparse.
  "bigbird-seed-b4|--model bigbird-roberta-base --batch 4 --seq-len 4096 --precision bf16-true --checkpoint blocks --optimizer adamw8bit|--model big_bird --batch 4 --seq 4096 --precision bf16-true --checkpoint"
  "bigbird-seed-b8|--model bigbird-roberta-base --batch 8 --seq-len 4096 --precision bf16-true --checkpoint blocks --optimizer adamw8bit|--model big_bird --batch 8 --seq 4096 --precision bf16-true --checkpoint"
  "bigbird-b4-adamw|--model bigbird-roberta-base --batch 4 --seq-len 4096 --precision bf16-true --checkpoint blocks --optimizer adamw|--model big_bird --batch 4 --seq 4096 --precision bf16-true --checkpoint"
)
: > "$OUT/encoders.jsonl"
for entry in "${CONFIGS[@]}"; do
  IFS='|' read -r name ltf pyf <<<"$entry"
  [[ -n "${ONLY:-}" && ! "$name" =~ ${ONLY} ]] && continue  # ONLY=regex: a subset of the configurations
  # shellcheck disable=SC2086
  ./$BUILD/leantrain plan $ltf --data synthetic --device cuda --steps 8 --eval-batches 1 >"$OUT/$name.plan" 2>&1
  rm -f "$OUT/$name.metrics.jsonl"
  # shellcheck disable=SC2086
  timeout 300 ./$BUILD/leantrain train $ltf --data synthetic --device cuda --steps 8 --eval-batches 1 --log-every 8 \
    --lr 5e-5 --metrics-json "$OUT/$name.json" --metrics "$OUT/$name.metrics.jsonl" >"$OUT/$name.log" 2>&1
  python3 - "$name" "$OUT/$name.json" "$OUT/$name.metrics.jsonl" "$OUT/$name.log" "$OUT/$name.plan" "$ltf" \
    >>"$OUT/encoders.jsonl" <<'PY'
import json, re, sys
name, path, metrics, log, plan, flags = sys.argv[1:]
row = {"system": "leantrain", "config": name, "flags": flags}
try:
    row.update(json.load(open(path)))
    secs = [json.loads(l)["seconds"] for l in open(metrics) if '"loss"' in l]
    batch = int(re.search(r"--batch (\d+)", flags).group(1))
    row["seq_per_s"] = round((len(secs) - 1) * batch / sum(secs[1:]), 1)
    m = re.search(r"predicted peak allocated\s+\S+ \S+\s+(\d+) B", open(plan).read())
    row["plan_peak_bytes"] = int(m.group(1)) if m else None
    row["plan_equals_measured"] = row["plan_peak_bytes"] == row.get("peak_allocated_bytes")
except Exception as e:
    row["error"] = (open(log).read()[-800:] + " " + open(plan).read()[-400:] + " " + repr(e))
print(json.dumps(row))
PY
  tail -1 "$OUT/encoders.jsonl"
  # PyTorch eager, then compiled (its best, when it compiles).
  extras=("" "--compile")
  [ -n "${NO_COMPILE:-}" ] && extras=("")
  for extra in "${extras[@]}"; do
    # shellcheck disable=SC2086
    timeout 300 python3 bench/peers/encoder_torch.py $pyf $extra --tag "$name" >>"$OUT/encoders.jsonl" 2>"$OUT/$name.torch.err" ||
      echo "{\"system\": \"pytorch$extra\", \"config\": \"$name\", \"error\": $(tail -c 600 "$OUT/$name.torch.err" | python3 -c 'import json,sys; print(json.dumps(sys.stdin.read()))')}" >>"$OUT/encoders.jsonl"
    tail -1 "$OUT/encoders.jsonl"
  done
done
