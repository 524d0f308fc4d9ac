#!/usr/bin/env bash
# Per-kernel GPU time of a `leantrain train` run, measured by Nsight Compute (each kernel timed
# alone, replayed), summed by kernel name over the whole run (its steps and its evaluation): where
# a model's time goes when leantrain_bench has no throughput mode for it (ResNet, encoders).
#   BUILD=gpu-carry bash bench/profile_train_kernels.sh OUT_DIR train flags...
set -u
BUILD=${BUILD:-build}
OUT=${1:-/tmp/profile}; shift || true
mkdir -p "$OUT"
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
[ -n "$NCU" ] || { echo "no ncu on this machine"; exit 1; }
"$NCU" --clock-control none --metrics gpu__time_duration.sum --csv --print-units base \
  "./$BUILD/leantrain" train --device cuda "$@" > "$OUT/ncu.csv" 2> "$OUT/ncu.err"
python3 - "$OUT/ncu.csv" <<'PY'
import csv, sys, collections
rows = [l for l in open(sys.argv[1]) if l.startswith('"')]
tot, cnt = collections.Counter(), collections.Counter()
for r in csv.DictReader(rows):
    if r.get("Metric Name") != "gpu__time_duration.sum":
        continue
    name = r["Kernel Name"].split("(")[0][:100]
    tot[name] += float(r["Metric Value"].replace(",", "")) / 1e6
    cnt[name] += 1
all_ms = sum(tot.values())
print(f"kernel time of the run: {all_ms:.2f} ms over {sum(cnt.values())} launches")
print("| kernel | launches | ms | share |\n|---|---|---|---|")
for name, ms in tot.most_common(30):
    print(f"| `{name}` | {cnt[name]} | {ms:.3f} | {100 * ms / all_ms:.1f}% |")
PY
