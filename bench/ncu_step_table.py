#!/usr/bin/env python3
"""Per-step kernel table from Nsight Compute's CSV (gpu__time_duration.sum of each launch, in launch
order): the launches are cut into steps at each launch of a marker kernel (the token embedding's,
once a forward), and the table is of one step that ran the optimizer (default: the last such one).
Each kernel is timed alone by ncu, so the step's kernel sum is the GPU-busy time with no overlap;
against the run's measured step time it bounds the idle time.
    python3 bench/ncu_step_table.py ncu.csv [--marker embedding_fwd] [--needs adamw] [--top 40]
"""
import argparse
import collections
import csv
import sys

ap = argparse.ArgumentParser()
ap.add_argument("csv")
ap.add_argument("--marker", default="embedding_fwd")
ap.add_argument("--needs", default="adamw")
ap.add_argument("--top", type=int, default=40)
a = ap.parse_args()
rows = [l for l in open(a.csv) if l.startswith('"')]
launches = []
for r in csv.DictReader(rows):
    if r.get("Metric Name") == "gpu__time_duration.sum":
        launches.append((r["Kernel Name"].split("(")[0][:110], float(r["Metric Value"].replace(",", "")) / 1e6))
steps, cur = [], []
for name, ms in launches:
    if a.marker in name and cur:
        steps.append(cur)
        cur = []
    cur.append((name, ms))
steps.append(cur)
full = [s for s in steps if any(a.needs in n for n, _ in s)]
if not full:
    sys.exit(f"no step with a '{a.needs}' kernel among {len(steps)} cut at '{a.marker}'")
step = full[-1]
tot, cnt = collections.Counter(), collections.Counter()
for name, ms in step:
    tot[name] += ms
    cnt[name] += 1
all_ms = sum(tot.values())
print(f"one training step ({len(full)} of {len(steps)} cut at '{a.marker}' ran '{a.needs}'; the last): "
      f"kernel time {all_ms:.2f} ms over {len(step)} launches")
print("| kernel | launches | ms | share |\n|---|---|---|---|")
for name, ms in tot.most_common(a.top):
    print(f"| `{name}` | {cnt[name]} | {ms:.3f} | {100 * ms / all_ms:.1f}% |")
