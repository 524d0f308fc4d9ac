# Memory kinds: the loader's pinned staging is counted in its own account, and the plan predicts
# it exactly. plan --json and train --metrics-json name the same keys; the end-of-run table, the
# plan report and the HTML report show the pinned-host rows. On cpu the staging buffers are
# ordinary memory, counted all the same, so this runs without a GPU.
source "$(dirname "$0")/common.bash" "$@"
ARGS=(--model gpt2-tiny --data synthetic --batch 4 --seq-len 32 --steps 2 --eval-batches 1)

expect_ok "$LT" plan "${ARGS[@]}" --device-type cpu --json
cp "$WORK/out" "$WORK/plan.json"
expect_ok "$LT" plan "${ARGS[@]}" --device-type cpu
expect_grep "predicted peak pinned host +[0-9.]+ KiB .*ordinary memory on cpu" "$WORK/out" "plan report"
expect_grep "^ +input +[0-9.]+ KiB +[0-9]+ B$" "$WORK/out" "plan report's pinned category"

expect_ok "$LT" train "${ARGS[@]}" --device cpu --metrics-json "$WORK/run.json" --memory-report "$WORK/report.html"
expect_grep "^\| Pinned host memory \(ordinary\) +\| +[0-9.]+ KiB +\| +[0-9.]+ KiB" "$WORK/out" "train's memory table"
expect_grep 'id="pinned-host"' "$WORK/report.html" "the HTML report"

# Staging rings: training (prefetch 2 + 2 buffers) and, during the evaluation, the eval loader's
# on top: 4 buffers of 4 x (32 + 32) x 8 B = 2 KiB each, twice.
if python3 - "$WORK/plan.json" "$WORK/run.json" <<'PY'; then ok; else fail "pinned host: plan != measured"; fi
import json, sys
plan, run = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
p, r = plan["peak_pinned_host_bytes"], run["peak_pinned_host_bytes"]
assert p == r == 8 * 4 * 64 * 8, (p, r)
assert plan["pinned_host_categories_peak"] == run["pinned_host_categories_peak"], (plan, run)
assert run["pinned_host_categories_peak"]["input"] == r, run
PY
finish
