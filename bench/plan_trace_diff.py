#!/usr/bin/env python3
"""Where a run's memory trace leaves its plan's: the first event that differs, and the segments.

    python3 bench/plan_trace_diff.py RUN_SNAPSHOT.json PLAN_SNAPSHOT.json [--context 8]

Both files are `--memory-snapshot` outputs (train on the GPU, plan on meta; same flags). Compares
the device trace event by event (action, size, category, stream, op; addresses differ by design)
and prints the first difference with the events around it, then the segments (cudaMalloc calls)
each side made that the other did not (a reserved-bytes gap is made of these), and the peaks of
allocated and reserved bytes along each trace.
"""
import argparse
import collections
import json


def trace(path):
    snap = json.load(open(path))
    t = max(snap["device_traces"], key=len)
    out = []
    for e in t:
        if e["action"] in ("alloc", "free_completed", "segment_alloc", "segment_free"):
            name = (e.get("frames") or [{}])[0].get("name", "")
            out.append((e["action"], e["size"], e.get("category"), e.get("stream"), name))
    return out


def peaks(t):
    alloc = res = pa = pr = 0
    at_a = at_r = 0
    for i, (act, size, *_rest) in enumerate(t):
        if act == "alloc":
            alloc += size
        elif act == "free_completed":
            alloc -= size
        elif act == "segment_alloc":
            res += size
        elif act == "segment_free":
            res -= size
        if alloc > pa:
            pa, at_a = alloc, i
        if res > pr:
            pr, at_r = res, i
    return pa, at_a, pr, at_r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("run")
    ap.add_argument("plan")
    ap.add_argument("--context", type=int, default=8)
    a = ap.parse_args()
    r, p = trace(a.run), trace(a.plan)
    pr, pp = peaks(r), peaks(p)
    print("run : %d events, peak allocated %d (event %d), peak reserved %d (event %d)" % (len(r), *pr))
    print("plan: %d events, peak allocated %d (event %d), peak reserved %d (event %d)" % (len(p), *pp))
    n = min(len(r), len(p))
    first = next((i for i in range(n) if r[i] != p[i]), None)
    if first is None:
        print("no difference in the first %d events" % n)
    else:
        print("first difference at event %d:" % first)
        for i in range(max(0, first - a.context), min(n, first + a.context)):
            mark = ">" if i == first else " "
            print("%s %6d run  %s\n         plan %s" % (mark, i, r[i], p[i]))
    segs_r = collections.Counter(e[:4] for e in r if e[0] == "segment_alloc")
    segs_p = collections.Counter(e[:4] for e in p if e[0] == "segment_alloc")
    only_r, only_p = segs_r - segs_p, segs_p - segs_r
    print("segments only in the run : %s" % (sorted(only_r.items()) or "none"))
    print("segments only in the plan: %s" % (sorted(only_p.items()) or "none"))
    if only_r:
        # The first segment_alloc the plan did not make, with what the run was allocating.
        seen = collections.Counter()
        for i, e in enumerate(r):
            if e[0] != "segment_alloc":
                continue
            seen[e[:4]] += 1
            if seen[e[:4]] > segs_p.get(e[:4], 0):
                print("first extra run segment at event %d: %s" % (i, e))
                for j in range(max(0, i - a.context), min(len(r), i + 3)):
                    print("   %6d %s" % (j, r[j]))
                break


if __name__ == "__main__":
    main()
