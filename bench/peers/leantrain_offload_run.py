#!/usr/bin/env python3
"""Runs one `leantrain train ... --metrics-json PATH` command (everything after --) and prints one
JSON line for bench/gpu_session.sh's offload section: steady tokens/s, the device peaks, the
pinned-host peak and the child's peak host RSS (what PyTorch's peer reports as host RSS).

usage: leantrain_offload_run.py --label NAME --metrics PATH -- leantrain train ...
"""
import argparse, json, resource, subprocess, sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--label", required=True)
    ap.add_argument("--metrics", required=True)
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.cmd[1:] if a.cmd and a.cmd[0] == "--" else a.cmd
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    sys.stderr.write("\n".join(r.stdout.splitlines()[-8:]) + "\n")
    line = {"system": a.label, "exit": r.returncode,
            "host_peak_rss": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024}
    if r.returncode == 0:
        j = json.load(open(a.metrics))
        line.update({"tokens_per_s": round(j["steady_items_per_s"]), "peak_allocated": j["peak_allocated_bytes"],
                     "peak_reserved": j["peak_reserved_bytes"], "peak_pinned_host": j["peak_pinned_host_bytes"],
                     "categories_peak": j["categories_peak"],
                     "pinned_host_categories_peak": j["pinned_host_categories_peak"]})
    print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
