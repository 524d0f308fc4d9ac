#!/usr/bin/env python3
"""PyTorch peer for the GPT-2 124M throughput bench (BENCHMARKS.md section 2).

HF GPT2LMHeadModel, batch 16 x 1024 random tokens, bf16 autocast (bf16-mixed), fused AdamW.
Prints one JSON line: ms/step (median over timed steps, CUDA events), tokens/s, peak allocated
and reserved bytes. --compile wraps the model in torch.compile. The labels are passed to the
model, so the loss is computed inside it (and inside the compiled graph), PyTorch's leanest and
fastest way; --loss-outside computes it on an f32 copy of the logits instead (the old peer, which
made torch.compile look like 18-19.5 GiB). --compile-mode passes torch.compile's mode
("max-autotune": Triton GEMM templates timed against cuBLAS, and CUDA graphs; "reduce-overhead":
CUDA graphs only), so the peer can be PyTorch at its fastest, not only at its default.
"""
import argparse, json

import torch

from step_timing import median_step_ms
from transformers import GPT2Config, GPT2LMHeadModel


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--compile-mode", default="default",
                    choices=["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"])
    ap.add_argument("--loss-outside", action="store_true")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = True
    cfg = GPT2Config(n_embd=768, n_layer=12, n_head=12, n_positions=1024, vocab_size=50257,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = GPT2LMHeadModel(cfg).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, fused=True)
    step_model = torch.compile(model, mode=args.compile_mode) if args.compile else model
    B, T = args.batch, args.seq
    data = torch.randint(0, 50257, (args.warmup + args.steps, B, T + 1), device="cuda")

    def step(i):
        x, y = data[i, :, :-1], data[i, :, 1:]
        with torch.autocast("cuda", dtype=torch.bfloat16):
            if args.loss_outside:
                logits = step_model(input_ids=x).logits
                loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), y.reshape(-1))
            else:  # HF shifts labels itself: pass the T + 1 window's first T tokens as both
                loss = step_model(input_ids=data[i, :, :-1], labels=data[i, :, :-1]).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    ms, loss = median_step_ms(step, args.warmup, args.steps)
    n_params = sum(p.numel() for p in model.parameters())
    flops_per_token = 6 * n_params + 12 * 12 * T * 768
    tok_s = B * T / (ms / 1e3)
    print(json.dumps({
        "system": ("pytorch-compile" if args.compile else "pytorch-eager") +
                  ("-" + args.compile_mode if args.compile and args.compile_mode != "default" else "") +
                  ("-loss-outside" if args.loss_outside else ""),
        "ms_per_step": round(ms, 2), "tokens_per_s": round(tok_s), "mfu": round(tok_s * flops_per_token / 989e12, 4),
        "peak_allocated": torch.cuda.max_memory_allocated(), "peak_reserved": torch.cuda.max_memory_reserved(),
        "final_loss": float(loss), "batch": B, "seq": T, "steps": args.steps}), flush=True)


if __name__ == "__main__":
    main()
