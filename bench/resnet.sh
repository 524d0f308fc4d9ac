#!/usr/bin/env bash
# ResNets side by side with PyTorch (issue 17) on the GPU machine: leantrain (synthetic 224x224
# images, 10 classes, 8 steps; img/s from steps 2..8) then bench/peers/resnet_torch.py (torchvision,
# channels_last, cuDNN benchmark; eager and compiled) with the same model, batch, precision and
# optimizer. One JSON line per run to $OUT/resnet.jsonl. Needs libcudnn.so.9 on LD_LIBRARY_PATH.
set -u
BUILD=${BUILD:-build}
OUT=${OUT:-/tmp/leantrain-resnet}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
# name | leantrain flags | peer flags
CONFIGS=(
  "resnet50-b32-mixed-sgd|--model resnet50 --batch 32 --precision bf16-mixed --optimizer sgd --momentum 0.9 --lr 0.01|--model resnet50 --batch 32 --precision bf16-mixed --optimizer sgd"
  "resnet152-b32-mixed-sgd|--model resnet152 --batch 32 --precision bf16-mixed --optimizer sgd --momentum 0.9 --lr 0.01|--model resnet152 --batch 32 --precision bf16-mixed --optimizer sgd"
  "resnet152-b32-mixed-adamw|--model resnet152 --batch 32 --precision bf16-mixed --optimizer adamw --lr 1e-3|--model resnet152 --batch 32 --precision bf16-mixed --optimizer adamw"
)
: > "$OUT/resnet.jsonl"
for entry in "${CONFIGS[@]}"; do
  IFS='|' read -r name ltf pyf <<<"$entry"
  rm -f "$OUT/$name.metrics.jsonl"
  # shellcheck disable=SC2086
  timeout 300 ./$BUILD/leantrain train $ltf --data synthetic --device cuda --steps 8 --eval-batches 1 --log-every 8 \
    --metrics-json "$OUT/$name.json" --metrics "$OUT/$name.metrics.jsonl" >"$OUT/$name.log" 2>&1
  python3 - "$name" "$OUT/$name.json" "$OUT/$name.metrics.jsonl" "$OUT/$name.log" "$ltf" >>"$OUT/resnet.jsonl" <<'PY'
import json, re, sys
name, path, metrics, log, flags = sys.argv[1:]
row = {"system": "leantrain", "config": name, "flags": flags}
try:
    j = json.load(open(path))
    row.update(peak_allocated=j["peak_allocated_bytes"], categories_peak=j["categories_peak"])
    secs = [json.loads(l)["seconds"] for l in open(metrics) if '"loss"' in l]
    batch = int(re.search(r"--batch (\d+)", flags).group(1))
    row["img_per_s"] = round((len(secs) - 1) * batch / sum(secs[1:]), 1)
except Exception as e:
    row["error"] = open(log).read()[-800:] + " " + repr(e)
print(json.dumps(row))
PY
  tail -1 "$OUT/resnet.jsonl"
  extras=("" "--compile")
  [ -n "${NO_COMPILE:-}" ] && extras=("")  # NO_COMPILE=1: eager PyTorch only
  for extra in "${extras[@]}"; do
    # shellcheck disable=SC2086
    timeout 300 python3 bench/peers/resnet_torch.py $pyf $extra --tag "$name" >>"$OUT/resnet.jsonl" 2>"$OUT/$name.torch.err" ||
      echo "{\"system\": \"pytorch$extra\", \"config\": \"$name\", \"error\": $(tail -c 600 "$OUT/$name.torch.err" | python3 -c 'import json,sys; print(json.dumps(sys.stdin.read()))')}" >>"$OUT/resnet.jsonl"
    tail -1 "$OUT/resnet.jsonl"
  done
done
