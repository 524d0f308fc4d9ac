#!/usr/bin/env bash
# The --checkpoint modes side by side: measured activation and allocated peaks and the median
# step time of a short run per mode (docs/activation-checkpointing.md, "Measured").
#
#   BUILD=build DEVICE=cpu bash bench/checkpoint_modes.sh      # prints a markdown table
#
# CASES: one "model|flags" per line (default: gpt2-tiny on 8 x 128 tokens and vit-tiny on 128
# images), synthetic data, PRECISION (default 32-true), MODES (default none selective every:2
# blocks), STEPS steps (default 8; the first two are left out of the time). Uses $BUILD/leantrain.
#   DEVICE=cuda PRECISION=bf16-mixed CASES="vit-l-16|--batch 32" bash bench/checkpoint_modes.sh
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
DEVICE=${DEVICE:-cpu}
STEPS=${STEPS:-8}
PRECISION=${PRECISION:-32-true}
MODES=${MODES:-none selective every:2 blocks}
CASES=${CASES:-"gpt2-tiny|--batch 8 --seq-len 128
vit-tiny|--batch 128"}
LT="./$BUILD/leantrain"
[ -x "$LT" ] || { echo "checkpoint_modes.sh: no $LT (set BUILD)" >&2; exit 2; }
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
echo "${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)}, device $DEVICE, $PRECISION, $STEPS steps per mode"
echo
echo "| model | \`--checkpoint\` | activation peak | allocated peak | step time (median) |"
echo "|---|---|---|---|---|"
while IFS='|' read -r model shape; do
  [ -n "$model" ] || continue
  for mode in $MODES; do
    # shellcheck disable=SC2086
    "$LT" train --model "$model" --data synthetic $shape --steps "$STEPS" --device "$DEVICE" --precision "$PRECISION" \
      --checkpoint "$mode" --eval-batches 1 --metrics "$WORK/m.jsonl" --metrics-json "$WORK/m.json" </dev/null >"$WORK/log" 2>&1 ||
      { cat "$WORK/log" >&2; exit 1; }
    python3 - "$model" "$mode" "$WORK" <<'PY'
import json, statistics, sys
model, mode, work = sys.argv[1:]
j = json.load(open(work + "/m.json"))
secs = [json.loads(l)["seconds"] for l in open(work + "/m.jsonl") if '"seconds"' in l][2:]
mib = lambda b: "%.2f MiB" % (b / 2**20)
print("| %s | `%s` | %s | %s | %.0f ms |" % (model, mode, mib(j["categories_peak"]["activation"]),
      mib(j["peak_allocated_bytes"]), 1000 * statistics.median(secs)))
PY
  done
done <<<"$CASES"
