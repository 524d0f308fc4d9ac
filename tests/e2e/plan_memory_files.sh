# `leantrain plan --memory-snapshot/--memory-report`: the dry run writes the same files a run
# writes, from the predicted trace, so a user can see the timeline before launch. The trace's
# replayed peak must equal the plan's predicted peak allocated (exactness carries into the files).
source "$(dirname "$0")/common.bash" "$@"
ARGS=(plan --model gpt2-tiny --data synthetic --batch 4 --seq-len 32 --steps 2 --device-type cuda)
expect_ok "$LT" "${ARGS[@]}" --json --memory-history --memory-snapshot "$WORK/snap.json" --memory-report "$WORK/report.html"
cp "$WORK/out" "$WORK/plan.json"
for f in snap.json snap.pickle report.html; do
  if [ -s "$WORK/$f" ]; then ok; else fail "plan did not write $f"; fi
done
expect_grep '<svg' "$WORK/report.html" "the HTML report"
if command -v python3 >/dev/null; then
  if python3 - "$WORK/snap.json" "$WORK/plan.json" <<'PY'; then ok; else fail "snapshot trace peak differs from the plan's peak"; fi
import json, sys
snap, plan = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
live, cur, peak = {}, 0, 0
for e in snap['device_traces'][0]:
    if e['action'] == 'alloc':
        live[e['addr']] = e['size']; cur += e['size']; peak = max(peak, cur)
    elif e['action'] == 'free_requested':
        cur -= live.pop(e['addr'])
want = plan['peak_allocated_bytes']
assert peak == want, (peak, want)
PY
fi
# Without --memory-history the files still come (the dry run always records its trace).
expect_ok "$LT" "${ARGS[@]}" --memory-snapshot "$WORK/s2.json"
if [ -s "$WORK/s2.json" ] && [ -s "$WORK/s2.pickle" ]; then ok; else fail "plan --memory-snapshot alone wrote nothing"; fi
expect_error 2 "memory" "$LT" "${ARGS[@]}" --memory-snapshot "$WORK/no/such/dir/s.json"
# A run checks its output directories before it starts, not after the last step.
expect_error 2 "does not exist" "$LT" train --model gpt2-tiny --data synthetic --steps 1 --metrics "$WORK/missing/m.jsonl"
expect_error 2 "does not exist" "$LT" train --model gpt2-tiny --data synthetic --steps 1 --memory-report "$WORK/missing/r.html"
finish
