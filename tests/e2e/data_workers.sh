# --workers: the same run (losses, learning rates, gradient norms) for any number of loader
# threads; each --metrics line carries the step's seconds; --metrics-json has the throughput;
# bad values are one-line usage errors (exit 2).
source "$(dirname "$0")/common.bash" "$@"

RUN=("$LT" train --model vit-tiny --data synthetic --steps 4 --batch 8 --micro-batch 4 --eval-batches 1 --device cpu
  --log-every 1)
# The metrics without the wall-time field.
values() { sed 's/, "seconds": [0-9.e+-]*//' "$1"; }

expect_ok "${RUN[@]}" --workers 1 --metrics "$WORK/w1.jsonl" --metrics-json "$WORK/w1.json"
expect_ok "${RUN[@]}" --workers 4 --metrics "$WORK/w4.jsonl"
if [ "$(grep -c '"loss"' "$WORK/w1.jsonl")" = 4 ] && cmp -s <(values "$WORK/w1.jsonl") <(values "$WORK/w4.jsonl"); then ok; else
  fail "--workers 4 changed the run"; diff "$WORK/w1.jsonl" "$WORK/w4.jsonl" | head -6 >&2; fi
# Every step line has "seconds": a positive number; evaluation lines have none.
if python3 - "$WORK/w1.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
steps = [r for r in rows if "loss" in r]
assert len(steps) == 4 and all(r["seconds"] > 0 for r in steps), steps
assert all("seconds" not in r for r in rows if "eval_loss" in r)
PY
then ok; else fail "metrics lines lack positive seconds"; cat "$WORK/w1.jsonl" >&2; fi
# The summary: steady-state rate (steps 2..4) next to the memory peaks.
if python3 - "$WORK/w1.json" "$WORK/w1.jsonl" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
assert j["unit"] == "img/s" and j["items_per_s"] > 0 and j["steady_items_per_s"] > 0, j
assert "peak_allocated_bytes" in j
secs = [json.loads(l)["seconds"] for l in open(sys.argv[2]) if '"loss"' in l]
want = 3 * 8 / sum(secs[1:])
assert abs(j["steady_items_per_s"] - want) < 1e-3 * want + 0.01, (j, want)
PY
then ok; else fail "--metrics-json lacks the steady throughput"; cat "$WORK/w1.json" >&2; fi
expect_grep "^step 4/4 .*\| [0-9]+ img/s \|" "$WORK/out" "progress line"

# Resume with another worker count continues the same curve.
expect_ok "${RUN[@]}" --stop-at 2 --workers 3 --save "$WORK/ck" --metrics "$WORK/r.jsonl"
expect_ok "$LT" train --resume "$WORK/ck" --workers 2
if cmp -s <(values "$WORK/w1.jsonl" | grep '"loss"') <(values "$WORK/r.jsonl" | grep '"loss"'); then ok; else
  fail "resumed with other --workers, the losses differ"; paste "$WORK/w1.jsonl" "$WORK/r.jsonl" >&2; fi

expect_error 2 "--workers 0: it counts the threads that build batches \(pass --workers 1 or more" "${RUN[@]}" --workers 0
expect_error 2 "--workers -3: it counts the threads" "${RUN[@]}" --workers -3
expect_error 2 "--workers two is not a whole number: --workers takes 1 to [0-9]+ threads" "${RUN[@]}" --workers two
expect_error 2 "--workers 0" "$LT" plan --model vit-tiny --data synthetic --workers 0
"$LT" train --help >"$WORK/help" 2>&1
expect_grep "^ *--workers " "$WORK/help" "train --help"
finish
