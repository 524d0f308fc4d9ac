#!/usr/bin/env python3
"""PyTorch peer for the TinyLlama-1.1B throughput bench (issue 12): HF LlamaForCausalLM with the
TinyLlama-1.1B shape, random tokens B x T, bf16 compute, checkpointed decoder layers, AdamW.

Modes (all with labels passed to the model, so the loss is computed inside it as HF does):
  fsdp   the issue's configuration: fully_shard on one GPU per decoder layer and the root with
         MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=f32), f32 sharded parameters, AdamW
         (foreach), HF gradient checkpointing (non-reentrant)
  plain  no FSDP: f32 parameters, torch.autocast(bf16), fused AdamW, HF gradient checkpointing
  compile  plain + torch.compile of the model
Prints one JSON line: ms/step (median over timed steps, CUDA events), tokens/s, peak allocated
and reserved bytes.
"""
import argparse, json, os

import torch

from step_timing import median_step_ms


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=("fsdp", "plain", "compile"), default="fsdp")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--layers", type=int, default=22)
    args = ap.parse_args()
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = True
    cfg = LlamaConfig(hidden_size=2048, intermediate_size=5632, num_hidden_layers=args.layers, num_attention_heads=32,
                      num_key_value_heads=4, vocab_size=32000, max_position_embeddings=2048, rope_theta=10000.0,
                      rms_norm_eps=1e-5, tie_word_embeddings=False)
    cfg._attn_implementation = "sdpa"
    model = LlamaForCausalLM(cfg).cuda()
    model.config.use_cache = False
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    if args.mode == "fsdp":
        import torch.distributed as dist
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29533")
        dist.init_process_group("nccl", rank=0, world_size=1)
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        for layer in model.model.layers:
            fully_shard(layer, mp_policy=mp)
        fully_shard(model, mp_policy=mp)
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, foreach=True)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, fused=True)
    step_model = torch.compile(model) if args.mode == "compile" else model
    B, T = args.batch, args.seq
    data = torch.randint(0, cfg.vocab_size, (args.warmup + args.steps, B, T), device="cuda")

    def step(i):
        x = data[i]
        if args.mode == "fsdp":
            loss = step_model(input_ids=x, labels=x).loss
        else:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = step_model(input_ids=x, labels=x).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    ms, loss = median_step_ms(step, args.warmup, args.steps)
    tok_s = B * T / (ms / 1e3)
    print(json.dumps({
        "system": "pytorch-" + args.mode, "ms_per_step": round(ms, 2), "tokens_per_s": round(tok_s),
        "peak_allocated": torch.cuda.max_memory_allocated(), "peak_reserved": torch.cuda.max_memory_reserved(),
        "final_loss": loss.item(), "batch": B, "seq": T, "steps": args.steps}), flush=True)
    if args.mode == "fsdp":
        import torch.distributed as dist
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
