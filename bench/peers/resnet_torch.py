#!/usr/bin/env python3
"""PyTorch peer for the ResNet benches (issue 17): torchvision resnet50 / resnet152, random images
B x 3 x 224 x 224 and 10 classes as leantrain's synthetic data, train mode, at its best: cuDNN
benchmark on, channels_last, torch.autocast(bf16) with f32 parameters (bf16-mixed) or bf16
parameters (bf16-true), SGD with momentum (foreach) or fused AdamW; optionally torch.compile.
Prints one JSON line: ms/step (median over timed steps, CUDA events), images/s, peak allocated.
"""
import argparse, json

import torch
import torchvision

from step_timing import median_step_ms


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--precision", choices=("bf16-mixed", "bf16-true", "32-true"), default="bf16-mixed")
    ap.add_argument("--optimizer", choices=("sgd", "adamw"), default="sgd")
    ap.add_argument("--channels-last", type=int, default=1)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--tag", default="")
    args = ap.parse_args()
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(0)
    model = getattr(torchvision.models, args.model)(weights=None, num_classes=10).cuda()
    if args.precision == "bf16-true":
        model = model.to(torch.bfloat16)
    fmt = torch.channels_last if args.channels_last else torch.contiguous_format
    model = model.to(memory_format=fmt).train()
    if args.optimizer == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, foreach=True)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    step_model = torch.compile(model) if args.compile else model
    B = args.batch
    dt = torch.bfloat16 if args.precision == "bf16-true" else torch.float32
    x = torch.randn(args.warmup + args.steps, B, 3, 224, 224, device="cuda", dtype=dt)
    y = torch.randint(0, 10, (args.warmup + args.steps, B), device="cuda")

    def step(i):
        xi = x[i].contiguous(memory_format=fmt)
        if args.precision == "bf16-mixed":
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = torch.nn.functional.cross_entropy(step_model(xi), y[i])
        else:
            loss = torch.nn.functional.cross_entropy(step_model(xi).float(), y[i])
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    ms, loss = median_step_ms(step, args.warmup, args.steps)
    print(json.dumps({"system": "pytorch" + ("-compile" if args.compile else ""), "config": args.tag,
                      "model": args.model, "precision": args.precision, "channels_last": bool(args.channels_last),
                      "ms_per_step": round(ms, 2), "img_per_s": round(B / (ms / 1e3), 1),
                      "peak_allocated": torch.cuda.max_memory_allocated(), "final_loss": loss.item(), "batch": B}),
          flush=True)


if __name__ == "__main__":
    main()
