# plan --budget with --devices N: device counts (1, 2, ... up to N) and strategies are knobs of
# the search. A budget one GPU meets keeps one GPU (fewest device-seconds) and names the fastest
# way to use all N; a budget only a sharded run meets chooses it, and its need is its largest
# rank's, equal to planning that command rank by rank. Device counts that do not split the batch
# and a fused step on several ranks are refused up front.
source "$(dirname "$0")/common.bash" "$@"
M=(--model gpt2-124m --data synthetic --batch 8 --seq-len 512 --precision bf16-mixed --context-bytes 0 --nccl-bytes 0
  --devices 2)

# 3 GiB: one GPU fits with nothing checkpointed; that is the cheapest in device-seconds.
expect_ok "$LT" plan "${M[@]}" --budget 3GiB
expect_grep '<- chosen$' "$WORK/out" "the table"
expect_grep '^  leantrain train --model gpt2-124m .*--precision bf16-true$' "$WORK/out" "one GPU chosen"
expect_grep '^on all 2 GPUs: needs .* per GPU' "$WORK/out" "the all-GPUs line"
expect_grep '^  leantrain train .* --devices 2 --strategy ' "$WORK/out" "the all-GPUs command"

# 1200 MiB: one GPU would need most blocks checkpointed; two fsdp ranks are cheaper.
expect_ok "$LT" plan "${M[@]}" --budget 1200MiB --json
cp "$WORK/out" "$WORK/fit.json"
python3 - "$WORK/fit.json" > "$WORK/cmd" <<'PY' || fail "--budget 1200MiB did not choose 2 GPUs"
import json, sys
j = json.load(open(sys.argv[1]))
chosen = [c for c in j["candidates"] if c["chosen"]]
assert len(chosen) == 1 and chosen[0]["devices"] == 2 and chosen[0]["fits"], chosen
assert chosen[0]["total_needed_bytes"] <= j["budget_bytes"], chosen
assert "--devices 2 --strategy " + chosen[0]["strategy"] in j["command"], j["command"]
assert any(c["devices"] == 1 for c in j["candidates"]), "one GPU was not tried"
one = [c for c in j["candidates"] if c["devices"] == 1 and c["fits"]]
assert all(c["relative_cost"] >= chosen[0]["relative_cost"] for c in one), one
print(j["command"].split(" ", 2)[2])  # the flags after "leantrain train"
print(chosen[0]["total_needed_bytes"])
PY
if [ -s "$WORK/cmd" ]; then
  ok
  flags=$(sed -n 1p "$WORK/cmd")
  need=$(sed -n 2p "$WORK/cmd")
  largest=0
  for rank in 0 1; do
    eval "expect_ok \"\$LT\" plan $flags --context-bytes 0 --nccl-bytes 0 --rank $rank --json"
    got=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["total_needed_bytes"])' "$WORK/out")
    [ "$got" -gt "$largest" ] && largest=$got
  done
  [ "$largest" = "$need" ] && ok || fail "the chosen need $need is not its largest rank's $largest"
fi

expect_error 2 "--devices 2 with --fused-step" "$LT" train --model gpt2-tiny --devices 2 --fused-step
expect_error 2 "--devices 2 with --batch 3" "$LT" train --model gpt2-tiny --devices 2 --batch 3
expect_error 2 "--devices 2 with --micro-batch 3" "$LT" train --model gpt2-tiny --devices 2 --batch 6 --micro-batch 3
finish
