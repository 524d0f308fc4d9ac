#!/usr/bin/env python3
"""One JSON line for a TinyLlama run (bench/issue46_call10.sh, issue46_call11.sh): tokens/s, ms a step,
MFU (3 x the plan's forward FLOPs per step / step time / 989 TFLOP/s, the H100/H200 dense bf16 peak)
and the run's peaks beside the plan's.
    tinyllama_row.py PLAN_JSON RUN_JSON VARIANT ROUND [TOKENS_PER_STEP]"""
import json
import sys

plan, run = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
tokens = int(sys.argv[5]) if len(sys.argv) > 5 else 4096
tok_s = run["steady_items_per_s"]
step_s = tokens / tok_s
print(json.dumps({"variant": sys.argv[3], "round": int(sys.argv[4]), "tokens_per_s": round(tok_s),
                  "ms_per_step": round(1e3 * step_s, 2), "mfu": round(3 * plan["forward_flops"] / step_s / 989e12, 4),
                  "peak_allocated": run["peak_allocated_bytes"], "plan_peak_allocated": plan["peak_allocated_bytes"],
                  "peak_reserved": run["peak_reserved_bytes"], "plan_peak_reserved": plan["peak_reserved_bytes"],
                  "peak_equals_plan": run["peak_allocated_bytes"] == plan["peak_allocated_bytes"]
                  and run["peak_reserved_bytes"] == plan["peak_reserved_bytes"]}))
