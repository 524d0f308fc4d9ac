#!/usr/bin/env bash
# Where a rank's measured allocation timeline leaves its plan's (issue #13: GPT-2 124M zero2/fsdp
# ranks a few hundred KiB off). Runs $STRATEGY on $N GPUs with every rank's --memory-snapshot,
# plans each rank with its own, and prints, per rank, the peaks and the first event where the
# two traces differ (action, size, category, stream), with the events around it.
# Usage (GPU machine): BUILD=gpu-carry OUT=dir STRATEGY=zero2 bash bench/plan_gap.sh
set -u
BUILD=${BUILD:-build}; OUT=${OUT:-/tmp/plan-gap}; N=${DIST_GPUS:-2}; S=${STRATEGY:-zero2}
mkdir -p "$OUT"; export NCCL_NVLS_ENABLE=0
T="--model gpt2-124m --data synthetic --seq-len 1024 --precision bf16-mixed --steps ${GAP_STEPS:-4} --log-every 2 --eval-batches 1 --batch $((16 * N)) --devices $N --strategy $S"
timeout 200 "./$BUILD/leantrain" train $T --device cuda --memory-snapshot "$OUT/run.json" --metrics-json "$OUT/run-metrics.json" > "$OUT/run.log" 2>&1 || { echo "run failed"; tail -3 "$OUT/run.log"; }
for r in $(seq 0 $((N - 1))); do
  timeout 200 "./$BUILD/leantrain" plan $T --rank $r --memory-snapshot "$OUT/plan$r.json" > /dev/null 2>&1
  run="$OUT/run.json"; [ "$r" -gt 0 ] && run="$OUT/run.rank$r.json"
  python3 - "$run" "$OUT/plan$r.json" "$r" <<'PY'
import json, sys
def trace(p):
    t = max(json.load(open(p))["device_traces"], key=len)  # rank r's run traces device r
    return [(e["action"], e["size"], e.get("category"), e.get("stream"), (e.get("frames") or [{}])[0].get("name", "")) for e in t
            if e["action"] in ("alloc", "free_completed")]
def peak(t):
    cur = best = at = 0
    for i, e in enumerate(t):
        cur += e[1] if e[0] == "alloc" else -e[1]
        if cur > best: best, at = cur, i
    return best, at
a, b = trace(sys.argv[1]), trace(sys.argv[2])
pa, pb = peak(a), peak(b)
print(f"rank {sys.argv[3]}: run {len(a)} events, peak {pa[0]} at {pa[1]}; plan {len(b)} events, peak {pb[0]} at {pb[1]}")
n = min(len(a), len(b))
first = next((i for i in range(n) if a[i][:4] != b[i][:4]), None)
if first is None: print("  the plan's events are a prefix of the run's" if len(a) >= len(b) else "  the run's events are a prefix of the plan's")
else:
    print(f"  first difference at event {first}:")
    for i in range(max(0, first - 6), min(n, first + 8)):
        print(("  >" if i == first else "   "), i, "run", a[i], "| plan", b[i])
PY
done
ls -la "$OUT" | head -20
