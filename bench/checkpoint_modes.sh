#!/usr/bin/env bash
# The --checkpoint modes side by side: measured activation and allocated peaks and the median
# step time of a short run per mode (docs/activation-checkpointing.md, "Measured").
#
#   BUILD=build DEVICE=cpu bash bench/checkpoint_modes.sh      # prints a markdown table
#
# gpt2-tiny on 8 x 128 tokens and vit-tiny on 128 images, synthetic data, f32 (PRECISION),
# STEPS steps (default 8; the first is left out of the time). Uses the binary in $BUILD.
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
DEVICE=${DEVICE:-cpu}
STEPS=${STEPS:-8}
PRECISION=${PRECISION:-32-true}
LT="./$BUILD/leantrain"
[ -x "$LT" ] || { echo "checkpoint_modes.sh: no $LT (set BUILD)" >&2; exit 2; }
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
echo "| model | \`--checkpoint\` | activation peak | allocated peak | step time (median) |"
echo "|---|---|---|---|---|"
for model in gpt2-tiny vit-tiny; do
  if [ "$model" = gpt2-tiny ]; then shape="--batch 8 --seq-len 128"; else shape="--batch 128"; fi
  for mode in none selective every:2 blocks; do
    # shellcheck disable=SC2086
    "$LT" train --model "$model" --data synthetic $shape --steps "$STEPS" --device "$DEVICE" --precision "$PRECISION" \
      --checkpoint "$mode" --eval-batches 1 --metrics "$WORK/m.jsonl" --metrics-json "$WORK/m.json" >"$WORK/log" 2>&1 ||
      { cat "$WORK/log" >&2; exit 1; }
    python3 - "$model" "$mode" "$WORK" <<'PY'
import json, statistics, sys
model, mode, work = sys.argv[1:]
j = json.load(open(work + "/m.json"))
secs = [json.loads(l)["seconds"] for l in open(work + "/m.jsonl") if '"seconds"' in l][1:]
mib = lambda b: "%.2f MiB" % (b / 2**20)
print("| %s | `%s` | %s | %s | %.0f ms |" % (model, mode, mib(j["categories_peak"]["activation"]),
      mib(j["peak_allocated_bytes"]), 1000 * statistics.median(secs)))
PY
  done
done
