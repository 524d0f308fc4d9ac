#!/usr/bin/env python3
"""PyTorch peer for the memory ladder (BENCHMARKS.md section 1): one rung per process.

torchvision vit_l_16 (random init), 224x224x3 synthetic images, 10 classes, cross-entropy,
6 optimizer steps. Rungs, each adding one technique to the one before:
 1 fp32, Adam, batch 64        2 16-mixed (autocast fp16 + GradScaler)   3 bf16-true (model in bf16)
 4 + batch 16                  5 + micro-batch 4 (accumulate 4)          6 + SGD (lr 0.01, cosine)
 7 + checkpoint every encoder block                                      8 + micro-batch 1
Prints one JSON line: peak allocated/reserved (torch.cuda.max_memory_*), img/s over steps 2..6.
"""
import argparse, json, time

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint
from torchvision.models import vit_l_16


def rung_config(r):
    c = dict(precision="32-true", optimizer="adam", batch=64, micro=64, ckpt=False)
    if r >= 2: c["precision"] = "16-mixed"
    if r >= 3: c["precision"] = "bf16-true"
    if r >= 4: c["batch"] = c["micro"] = 16
    if r >= 5: c["micro"] = 4
    if r >= 6: c["optimizer"] = "sgd"
    if r >= 7: c["ckpt"] = True
    if r >= 8: c["micro"] = 1
    return c


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rung", type=int, required=True)
    ap.add_argument("--steps", type=int, default=6)
    args = ap.parse_args()
    c = rung_config(args.rung)
    torch.manual_seed(0)
    model = vit_l_16(weights=None)
    model.heads.head = torch.nn.Linear(1024, 10)
    if c["precision"] == "bf16-true":
        model = model.to(torch.bfloat16)
    model = model.cuda()
    if c["ckpt"]:
        # Non-invasive: wrap each encoder block's forward in torch.utils.checkpoint.
        for blk in model.encoder.layers:
            f = blk.forward
            blk.forward = (lambda f: lambda x: checkpoint(f, x, use_reentrant=False))(f)
    if c["optimizer"] == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=5e-5)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=args.steps)
    scaler = torch.amp.GradScaler("cuda") if c["precision"] == "16-mixed" else None
    dtype = torch.bfloat16 if c["precision"] == "bf16-true" else torch.float32
    accum = c["batch"] // c["micro"]
    g = torch.Generator(device="cuda").manual_seed(1)
    torch.cuda.reset_peak_memory_stats()
    t_start = None
    for step in range(args.steps):
        if step == 1:
            torch.cuda.synchronize()
            t_start = time.perf_counter()
        for _ in range(accum):
            x = torch.randn(c["micro"], 3, 224, 224, device="cuda", generator=g).to(dtype)
            y = torch.randint(0, 10, (c["micro"],), device="cuda", generator=g)
            with torch.autocast("cuda", dtype=torch.float16, enabled=scaler is not None):
                loss = F.cross_entropy(model(x).float(), y) / accum
            (scaler.scale(loss) if scaler else loss).backward()
        if scaler:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
        opt.zero_grad(set_to_none=True)
        sched.step()
    torch.cuda.synchronize()
    secs = time.perf_counter() - t_start
    print(json.dumps({"system": "pytorch", "rung": args.rung, **c,
                      "peak_allocated": torch.cuda.max_memory_allocated(),
                      "peak_reserved": torch.cuda.max_memory_reserved(),
                      "img_per_s": round((args.steps - 1) * c["batch"] / secs, 1), "final_loss": float(loss) * accum}),
          flush=True)


if __name__ == "__main__":
    main()
