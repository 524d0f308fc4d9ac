# --offload-activations: needs --checkpoint (one usage line otherwise); on cpu the checkpointed
# blocks' inputs go to the pinned-host account as activations, and plan --json predicts the run's
# device and pinned-host peaks (train --metrics-json) to the byte.
source "$(dirname "$0")/common.bash" "$@"
ARGS=(--model gpt2-tiny --data synthetic --batch 4 --seq-len 32 --steps 2 --eval-batches 1)

expect_error 2 "^leantrain: error: --offload-activations without --checkpoint: .*\(add --checkpoint blocks" \
  "$LT" train "${ARGS[@]}" --device cpu --offload-activations
expect_error 2 "^leantrain: error: --offload-activations without --checkpoint" \
  "$LT" plan "${ARGS[@]}" --checkpoint none --offload-activations

expect_ok "$LT" plan "${ARGS[@]}" --device-type cpu --checkpoint blocks --offload-activations --json
cp "$WORK/out" "$WORK/plan.json"
expect_ok "$LT" train "${ARGS[@]}" --device cpu --checkpoint blocks --offload-activations --metrics-json "$WORK/run.json"
expect_grep "saved inputs offloaded to pinned host memory" "$WORK/out" "train's log"

if python3 - "$WORK/plan.json" "$WORK/run.json" <<'PY'; then ok; else fail "offload: plan != measured"; fi
import json, sys
plan, run = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert plan["peak_allocated_bytes"] == run["peak_allocated_bytes"], (plan["peak_allocated_bytes"], run["peak_allocated_bytes"])
assert plan["peak_pinned_host_bytes"] == run["peak_pinned_host_bytes"], (plan, run)
assert plan["pinned_host_categories_peak"] == run["pinned_host_categories_peak"], (plan, run)
# gpt2-tiny: 4 blocks, inputs [4, 32, 128] f32 = 64 KiB each, all off the device at the forward's end.
assert run["pinned_host_categories_peak"]["activation"] == 4 * 4 * 32 * 128 * 4, run
PY
finish
