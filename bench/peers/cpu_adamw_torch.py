#!/usr/bin/env python3
"""PyTorch peer for the host AdamW kernel (issue 14): torch.optim.AdamW(foreach=True) on CPU f32
tensors of the TinyLlama-1.1B shapes (1,100,048,384 elements; --layers scales it), f32 gradients,
torch.set_num_threads(all cores). The matching leantrain figure is `leantrain_bench host_step
--optimizer adamw --elements N --grad f32 --out none` (the same work: f32 master, moments and
gradient) and, as --offload optimizer runs it, --grad bf16 --out bf16.

Prints one JSON line: elements, threads, ms/step (median of --steps after one untimed step),
elements/s.
"""
import argparse, json, os, statistics, time

import torch


def shapes(layers):
    d, f, kv, v = 2048, 5632, 256, 32000
    out = [(v, d)]
    for _ in range(layers):
        out += [(d, d), (kv, d), (kv, d), (d, d), (f, d), (f, d), (d, f), (d,), (d,)]
    return out + [(d,), (v, d)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=22)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    params = [torch.full(s, 0.5, dtype=torch.float32, requires_grad=True) for s in shapes(args.layers)]
    for p in params:
        p.grad = torch.full_like(p, 1e-3)
    n = sum(p.numel() for p in params)
    opt = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.1, foreach=True)
    opt.step()  # allocates the moments, warms the pages
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        opt.step()
        times.append((time.perf_counter() - t0) * 1e3)
    ms = statistics.median(times)
    print(json.dumps({"system": "torch-adamw-foreach-cpu", "elements": n, "threads": args.threads,
                      "ms_per_step": round(ms, 1), "elements_per_s": round(n / (ms / 1e3)),
                      "torch": torch.__version__}), flush=True)


if __name__ == "__main__":
    main()
