# plan --budget with offload as the last resort: when no device-only configuration fits, the
# search plans --offload optimizer and --offload params candidates (their time from the measured
# host-step and PCIe bandwidths, named under the table) and chooses the cheapest that fits; the
# chosen command carries --offload. A budget that a device-only configuration meets plans none.
source "$(dirname "$0")/common.bash" "$@"
# --eval-batches 1: the 75 candidates' dry runs would each evaluate the whole held-out split (7
# minutes in all); one evaluation batch has the same peak.
M=(--model gpt2-tiny --dim 512 --depth 4 --heads 4 --batch 2 --seq-len 16 --precision bf16-true --context-bytes 0 --eval-batches 1
  --device-type cuda)

# 104 MiB: no device-only candidate (the leanest needs 106 MiB); the optimizer's state on the host
# does (102 MiB), and is cheaper than moving the weights too.
expect_ok "$LT" plan "${M[@]}" --budget 104MiB
expect_grep '^\* bf16-true +2 f32 +adamw +.*\+host-opt .* yes .*<- chosen$' "$WORK/out" "the table (optimizer offload chosen)"
expect_grep 'host step at 127 GB/s' "$WORK/out" "the bandwidths line"
expect_grep '^  leantrain train .* --offload optimizer( |$)' "$WORK/out" "the chosen command"

# 80 MiB: only with the block weights on the host too (62 MiB).
expect_ok "$LT" plan "${M[@]}" --budget 80MiB --json
cp "$WORK/out" "$WORK/fit.json"
if python3 - "$WORK/fit.json" <<'PY'; then ok; else fail "--budget 80MiB did not choose --offload params"; fi
import json, sys
j = json.load(open(sys.argv[1]))
chosen = [c for c in j["candidates"] if c["chosen"]]
assert len(chosen) == 1 and chosen[0]["offload"] == "params" and chosen[0]["fits"], chosen
assert "--offload params" in j["command"], j["command"]
assert chosen[0]["relative_time"] > 1.0, chosen  # the host step and the copies cost time
opt = [c for c in j["candidates"] if c["offload"] == "optimizer"]
assert opt and not any(c["fits"] for c in opt), opt
PY

# A budget the device-only configurations meet: no offload candidate is planned.
expect_ok "$LT" plan "${M[@]}" --budget 1GiB
if grep -q "host-opt\|host-params" "$WORK/out"; then fail "offload planned although the device suffices"; else ok; fi
finish
