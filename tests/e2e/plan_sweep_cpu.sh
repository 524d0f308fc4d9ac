# The randomized plan-vs-measured sweep (bench/plan_sweep.py, issue 42) on the CPU: 12 small
# configurations from every family and technique, each planned for a cpu run (`plan --device-type
# cpu`) and run on the CPU, must agree to the byte on allocated, pinned host and disk. The GPU sweep
# (bench/plan_sweep.sh) checks the caching allocator's reserved bytes as well; this one checks the
# draws, the trace of every technique's code path and the exit status on every CI run.
source "$(dirname "$0")/common.bash" "$@"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
command -v python3 >/dev/null || { echo "SKIP: no python3"; exit 0; }
out="$WORK/sweep.txt"
rc=0
python3 "$ROOT/bench/plan_sweep.py" --seed "${LT_SWEEP_SEED:-42}" --n 12 --small --device cpu --bin "$LT" \
  --timeout 300 >"$out" 2>&1 || rc=$?
cat "$out"
if [ "$rc" = 0 ]; then ok; else fail "the CPU sweep exited $rc"; fi
if grep -q '"exact": 12' "$out"; then ok; else fail "not every configuration was exact"; fi
# A skipped step (16-mixed overflow) allocates what an applied one does (Optimizer::dry_step): this
# ResNet's first steps overflow on the CPU, and its SGD momentum must still exist as planned.
F="--model resnet-tiny --data synthetic --precision 16-mixed --optimizer sgd --momentum 0.9 --steps 3 --batch 4 --eval-batches 1 --log-every 0"
"$LT" train $F --device cpu --metrics "$WORK/steps.jsonl" --metrics-json "$WORK/run.json" >/dev/null 2>&1
"$LT" plan $F --device-type cpu --json >"$WORK/plan.json" 2>/dev/null
if grep -q '"skipped": true' "$WORK/steps.jsonl"; then ok; else fail "no step was skipped: the check below proves nothing"; fi
python3 - "$WORK/plan.json" "$WORK/run.json" <<'PY' && ok || fail "a run with skipped steps is off its plan"
import json, sys
p, r = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert p["peak_allocated_bytes"] == r["peak_allocated_bytes"], (p["peak_allocated_bytes"], r["peak_allocated_bytes"])
PY
# The same with the offloaded optimizer, whose host step must also create its pinned state on a
# skipped step (a GPU sweep found a ResNet-50 --offload params run 188 MB of pinned host under its plan).
F="--model resnet-tiny --data synthetic --precision 16-mixed --optimizer lion --checkpoint layer(1|2) --offload params --steps 2 --batch 6 --eval-batches 1 --log-every 0"
"$LT" train $F --device cpu --metrics "$WORK/steps2.jsonl" --metrics-json "$WORK/run2.json" >/dev/null 2>&1
"$LT" plan $F --device-type cpu --json >"$WORK/plan2.json" 2>/dev/null
if grep -q '"skipped": true' "$WORK/steps2.jsonl"; then ok; else fail "no offloaded step was skipped: the check below proves nothing"; fi
python3 - "$WORK/plan2.json" "$WORK/run2.json" <<'PY' && ok || fail "an offloaded run with skipped steps is off its plan"
import json, sys
p, r = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
for k in ("peak_allocated_bytes", "peak_pinned_host_bytes"):
    assert p[k] == r[k], (k, p[k], r[k])
PY
# The comparison is not vacuous: a plan for another step count is off, and the sweep says MISS.
"$LT" plan --model gpt2-tiny --data synthetic --steps 1 --batch 4 --device-type cpu --json >"$WORK/p1.json" 2>/dev/null
"$LT" plan --model gpt2-tiny --data synthetic --steps 1 --batch 8 --device-type cpu --json >"$WORK/p2.json" 2>/dev/null
python3 - "$ROOT/bench" "$WORK/p1.json" "$WORK/p2.json" <<'PY' && ok || fail "compare() did not flag a different peak"
import json, sys
sys.path.insert(0, sys.argv[1])
import plan_sweep
p, q = json.load(open(sys.argv[2])), json.load(open(sys.argv[3]))
assert plan_sweep.compare(p, q)["alloc"][1] == "MISS"
assert plan_sweep.compare(p, p)["alloc"][1] == "exact"
PY
finish
