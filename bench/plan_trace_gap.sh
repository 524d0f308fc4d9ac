#!/usr/bin/env bash
# Where one configuration's run leaves its plan: trains it on the GPU and plans it, both with
# --memory-snapshot, then prints the peaks of both sides and the first event where the traces
# differ, and the segments only one side mapped (bench/plan_trace_diff.py). Single GPU.
#   BUILD=gpu-carry OUT=dir bash bench/plan_trace_gap.sh NAME FLAGS...
# (FLAGS without --device; --data synthetic and the eval/log settings are added.) Keeps the two
# snapshots gzipped in $OUT/NAME-{run,plan}.json.gz for a closer look.
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-gpu}
OUT=${OUT:-/tmp/plan-trace-gap}
name=$1
shift
mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
F=(--data synthetic --eval-batches 1 --log-every 0 "$@")
echo "== $name: ${F[*]}"
timeout 300 "$BUILD/leantrain" train "${F[@]}" --device cuda --memory-snapshot "$OUT/$name-run.json" \
  --metrics-json "$OUT/$name-run-metrics.json" > "$OUT/$name-run.log" 2>&1 || { echo "run failed:"; tail -3 "$OUT/$name-run.log"; }
timeout 300 "$BUILD/leantrain" plan "${F[@]}" --device-type cuda --memory-snapshot "$OUT/$name-plan.json" --json \
  > "$OUT/$name-plan-out.json" 2> "$OUT/$name-plan.err" || { echo "plan failed:"; tail -3 "$OUT/$name-plan.err"; }
python3 - "$OUT/$name-plan-out.json" "$OUT/$name-run-metrics.json" <<'PY'
import json, sys
try:
    p, r = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
except Exception as e:
    print("no figures:", e); sys.exit(0)
for k in ("peak_allocated_bytes", "peak_reserved_bytes", "peak_pinned_host_bytes", "peak_disk_bytes"):
    print("%-24s plan %14d run %14d diff %+d" % (k, p.get(k, 0), r.get(k, 0), p.get(k, 0) - r.get(k, 0)))
PY
[ -f "$OUT/$name-run.json" ] && [ -f "$OUT/$name-plan.json" ] &&
  python3 bench/plan_trace_diff.py "$OUT/$name-run.json" "$OUT/$name-plan.json"
gzip -f "$OUT/$name-run.json" "$OUT/$name-plan.json" 2>/dev/null
rm -f "$OUT"/"$name"-*.pickle
