#!/usr/bin/env bash
# Per-kernel GPU time of a leantrain_bench throughput step, measured by Nsight Compute (ncu, the
# one profiler the GPU machine has: each kernel is timed alone, replayed, so overlaps do not show),
# summed by kernel name and divided by the steps profiled: the table issue 16 asks for before and
# after. Run on the GPU machine from the repo root:
#   BUILD=build-gpu bash bench/profile_kernels.sh OUT_DIR [leantrain_bench throughput flags...]
set -u
BUILD=${BUILD:-build-gpu}
OUT=${1:-/tmp/profile}; shift || true
mkdir -p "$OUT"
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
[ -n "$NCU" ] || { echo "no ncu on this machine"; exit 1; }
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
FLAGS=${*:---model gpt2-124m --precision bf16-mixed --batch 16 --seq 1024}
STEPS=2
# Only the timed steps: the bench opens the profiler's range after its warm-up step
# (cuda_profiler_range), so the model's initialisation (its random fills and casts) and the first
# step's one-off work stay out of the table.
"$NCU" --profile-from-start off --metrics gpu__time_duration.sum --csv --print-units base \
  "./$BUILD/leantrain_bench" throughput --device cuda $FLAGS --warmup 1 --steps $STEPS > "$OUT/ncu.csv" 2> "$OUT/ncu.err"
python3 - "$OUT/ncu.csv" $STEPS <<'PY'
import csv, sys, collections
path, steps = sys.argv[1], int(sys.argv[2])
rows = [l for l in open(path) if l.startswith('"')]
tot, cnt = collections.Counter(), collections.Counter()
for r in csv.DictReader(rows):
    if r.get("Metric Name") != "gpu__time_duration.sum":
        continue
    name = r["Kernel Name"].split("(")[0][:90]
    tot[name] += float(r["Metric Value"].replace(",", "")) / 1e6
    cnt[name] += 1
all_ms = sum(tot.values()) / steps
print(f"kernel time per step: {all_ms:.2f} ms over {sum(cnt.values()) // steps} launches")
print(f"| kernel | launches/step | ms/step | share |\n|---|---|---|---|")
for name, ms in tot.most_common(40):
    print(f"| `{name}` | {cnt[name] / steps:g} | {ms / steps:.3f} | {100 * ms / steps / all_ms:.1f}% |")
PY
