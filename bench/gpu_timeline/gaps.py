#!/usr/bin/env python3
"""Where the GPU sits idle, from gpu_timeline.cpp's CSV: the device work (kernels, copies, fills)
cut into steps at each launch of a marker kernel (the token embedding's forward, once a step), and
for each whole step its span, the time some device work ran (the union of the intervals) and the
rest: idle. Then the largest gaps of the steps after the first, each with the work before and
after it and whether a host synchronisation was waiting across it.
A per-kernel table (time in the stream, not replayed alone as under ncu) closes it.
    python3 gaps.py trace.csv [--marker embedding_fwd] [--every 1] [--skip 1] [--top 15] [--kernels N]
--every N: a step every N markers (GPT-2 launches its token and position embeddings: 2).
--kernels N: the steps of N kernels (llm.c's evaluation passes also launch its marker).
"""
import argparse
import csv
import re

ap = argparse.ArgumentParser()
ap.add_argument("csv")
ap.add_argument("--marker", default="embedding_fwd")
ap.add_argument("--every", type=int, default=1, help="markers a step")
ap.add_argument("--skip", type=int, default=1, help="whole steps left out at the start (warm-up)")
ap.add_argument("--top", type=int, default=15)
ap.add_argument("--kernels", type=int, default=0, help="average the steps of this many kernels (default: the usual count)")
a = ap.parse_args()

work, syncs = [], []
with open(a.csv) as f:
    for r in csv.DictReader(f):
        row = (int(r["start_ns"]), int(r["end_ns"]), r["kind"], r["name"])
        (syncs if r["kind"] == "sync" else work).append(row)
work.sort()


def short(name):
    name = re.sub(r"\(.*", "", name)
    return name[:80]


starts = [i for i, w in enumerate(work) if w[2] == "kernel" and a.marker in w[3]][:: a.every]
if len(starts) < 2:
    raise SystemExit(f"fewer than two '{a.marker}' kernels: no whole step")
steps = []
for s, e in zip(starts, starts[1:]):
    items = work[s:e]
    span = work[e][0] - work[s][0]
    busy, cur_s, cur_e, gaps = 0, items[0][0], items[0][1], []
    prev = items[0]
    for it in items[1:]:
        if it[0] > cur_e:
            busy += cur_e - cur_s
            gaps.append((it[0] - cur_e, prev, it, cur_e))
            cur_s, cur_e = it[0], it[1]
        else:
            cur_e = max(cur_e, it[1])
        if it[1] >= prev[1]:
            prev = it
    busy += cur_e - cur_s
    tail = work[e][0] - cur_e  # the gap before the next step's first kernel
    if tail > 0:
        gaps.append((tail, prev, work[e], cur_e))
    steps.append({"span": span, "busy": busy, "gaps": gaps, "kernels": sum(1 for i in items if i[2] == "kernel"),
                  "items": items})

print(f"{len(steps)} whole steps cut at '{a.marker}' (the first {a.skip} left out of the totals)")
print("| step | span ms | busy ms | idle ms | idle % | kernels | gaps > 5 us |")
print("|---|---|---|---|---|---|---|")
for i, s in enumerate(steps):
    idle = s["span"] - s["busy"]
    print(f"| {i} | {s['span'] / 1e6:.2f} | {s['busy'] / 1e6:.2f} | {idle / 1e6:.2f} | {100 * idle / s['span']:.1f} | "
          f"{s['kernels']} | {sum(1 for g in s['gaps'] if g[0] > 5000)} |")
# The steps after the warm-up that launch the usual number of kernels (a run's last marker can
# open an evaluation or a final forward, not a training step).
kept = steps[a.skip:] or steps
usual = a.kernels or max(set(s["kernels"] for s in kept), key=lambda c: sum(1 for s in kept if s["kernels"] == c))
kept = [s for s in kept if s["kernels"] == usual]
n = len(kept)
span = sum(s["span"] for s in kept) / n
busy = sum(s["busy"] for s in kept) / n
all_gaps = [g for s in kept for g in s["gaps"]]
print(f"\nmean of {n} steps of {usual} kernels: span {span / 1e6:.2f} ms, busy {busy / 1e6:.2f} ms, idle {(span - busy) / 1e6:.2f} ms "
      f"({100 * (span - busy) / span:.1f}%)")
for lo, hi in ((0, 2000), (2000, 5000), (5000, 20000), (20000, 100000), (100000, 10 ** 12)):
    sel = [g[0] for g in all_gaps if lo <= g[0] < hi]
    print(f"  gaps {lo / 1e3:g}-{hi / 1e3:g} us: {len(sel) / n:.1f} a step, {sum(sel) / n / 1e6:.3f} ms a step")


def synced(t0, t1):
    return any(s[0] < t1 and s[1] > t0 for s in syncs)


print(f"\nlargest {a.top} gaps (steps {a.skip}..):")
print("| gap us | the work before it | the work after it | host sync across |")
print("|---|---|---|---|")
for g, before, after, at in sorted(all_gaps, key=lambda x: -x[0])[: a.top]:
    print(f"| {g / 1e3:.1f} | `{short(before[3])}` | `{short(after[3])}` | {'yes' if synced(at, at + g) else ''} |")

per, cnt = {}, {}
for s in kept:
    for it in s["items"]:
        k = short(it[3]) if it[2] == "kernel" else it[2]
        per[k] = per.get(k, 0) + it[1] - it[0]
        cnt[k] = cnt.get(k, 0) + 1
print(f"\nkernels in the stream, a step (mean of {n}): {sum(per.values()) / n / 1e6:.2f} ms over {sum(cnt.values()) / n:.0f} launches")
print("| kernel | launches | ms | share of busy |")
print("|---|---|---|---|")
for k in sorted(per, key=lambda x: -per[x])[:30]:
    print(f"| `{k}` | {cnt[k] / n:g} | {per[k] / n / 1e6:.3f} | {100 * per[k] / n / busy:.1f}% |")
