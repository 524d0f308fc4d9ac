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
# skipped_steps_match_plan NAME KEYS FLAGS...: a CPU run whose steps overflow (16-mixed: this
# ResNet's first steps do on the CPU) has the plan's peaks for KEYS (comma-separated), and at least
# one step was skipped (else the check proves nothing).
skipped_steps_match_plan() {
  local name=$1 keys=$2
  shift 2
  local F=(--model resnet-tiny --data synthetic --precision 16-mixed --eval-batches 1 --log-every 0 "$@")
  "$LT" train "${F[@]}" --device cpu --metrics "$WORK/$name.jsonl" --metrics-json "$WORK/$name-run.json" >/dev/null 2>&1
  "$LT" plan "${F[@]}" --device-type cpu --json >"$WORK/$name-plan.json" 2>/dev/null
  if grep -q '"skipped": true' "$WORK/$name.jsonl"; then ok; else fail "$name: no step was skipped"; fi
  python3 - "$WORK/$name-plan.json" "$WORK/$name-run.json" "$keys" <<'PY' && ok || fail "$name: a run with skipped steps is off its plan"
import json, sys
p, r = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
for k in sys.argv[3].split(","):
    assert p[k] == r[k], (k, p[k], r[k])
PY
}
# A skipped step allocates what an applied one does (Optimizer::dry_step): the SGD momentum exists
# as planned.
skipped_steps_match_plan sgd peak_allocated_bytes --optimizer sgd --momentum 0.9 --steps 3 --batch 4
# The offloaded optimizer's host step also takes its pinned state on a skipped step (a GPU sweep
# found a ResNet-50 --offload params run 188 MB of pinned host under its plan); both steps overflow.
skipped_steps_match_plan offload peak_allocated_bytes,peak_pinned_host_bytes --optimizer lion \
  --checkpoint 'layer(1|2)' --offload params --steps 2 --batch 6
# --objective dpo (issue 48): with LoRA the reference is a forward with the adapters off inside each
# step; a full fine-tune's reference is a first pass over the pairs before the first step. Both
# planned to the byte, allocated and pinned host (the pass's loader stages its batches there).
dpo_matches_plan() {
  local name=$1
  shift
  local F=(--model llama-tiny --data synthetic --objective dpo --seq-len 32 --eval-batches 1 --log-every 0 "$@")
  "$LT" train "${F[@]}" --device cpu --metrics-json "$WORK/$name-run.json" >/dev/null 2>&1 || fail "$name: the run failed"
  "$LT" plan "${F[@]}" --device-type cpu --json >"$WORK/$name-plan.json" 2>/dev/null || fail "$name: the plan failed"
  python3 - "$WORK/$name-plan.json" "$WORK/$name-run.json" <<'PY' && ok || fail "$name: a DPO run is off its plan"
import json, sys
p, r = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
for k in ("peak_allocated_bytes", "peak_pinned_host_bytes"):
    assert p[k] == r[k], (k, p[k], r[k])
PY
}
dpo_matches_plan dpo-lora --lora-rank 4 --batch 4 --micro-batch 2 --steps 3 --precision bf16-mixed
dpo_matches_plan dpo-full --batch 4 --steps 2 --checkpoint blocks
dpo_matches_plan dpo-full-chunked --batch 2 --steps 2 --loss-chunk 16 --dpo-loss ipo --beta 0.5
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
