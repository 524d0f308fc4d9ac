#!/usr/bin/env python3
"""PyTorch peers for the several-GPU benches (issues 13 and 18), launched with torchrun on the
same GPUs: `torchrun --standalone --nproc_per_node N bench/peers/dist_torch.py --model M --mode X`.

Models (Hugging Face classes, random weights, random tokens, labels passed to the model so the
loss is computed inside it as HF does):
  gpt2       GPT-2 124M (GPT2LMHeadModel, n_positions 1024, sdpa attention)
  tinyllama  TinyLlama-1.1B shape (LlamaForCausalLM, sdpa attention)
  llama2-7b  Llama-2-7B shape (LlamaForCausalLM, sdpa attention, 4096 positions); fsdp2 only
Under fsdp2 a LLaMA is created on the meta device, sharded, then given memory (to_empty) and
initialised shard by shard, as PyTorch's FSDP2 guide does: no rank ever holds the whole model.
Modes, each PyTorch's best-known setup for it:
  ddp    f32 parameters, DistributedDataParallel(gradient_as_bucket_view, static_graph),
         torch.autocast(bf16), fused AdamW; --compile adds torch.compile of the DDP model
  fsdp2  fully_shard per block and the root with MixedPrecisionPolicy(param_dtype=bf16,
         reduce_dtype=f32), f32 sharded parameters, AdamW (foreach)
--checkpoint: HF gradient checkpointing (non-reentrant) of every block.
--batch is per GPU. Rank 0 prints one JSON line: median ms/step (CUDA events), total tokens/s over
the world, the largest peak allocated / reserved over the ranks.
"""
import argparse, json, os

import torch
import torch.distributed as dist

from step_timing import median_step_ms


LLAMA_SIZES = {
    "tinyllama": dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22, num_attention_heads=32,
                      num_key_value_heads=4, max_position_embeddings=2048),
    "llama2-7b": dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32,
                      num_key_value_heads=32, max_position_embeddings=4096),
}


def build(model):
    if model == "gpt2":
        from transformers import GPT2Config, GPT2LMHeadModel
        cfg = GPT2Config(n_positions=1024, n_embd=768, n_layer=12, n_head=12, vocab_size=50257,
                         resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        cfg._attn_implementation = "sdpa"
        m = GPT2LMHeadModel(cfg)
        return m, cfg.vocab_size, list(m.transformer.h)
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(**LLAMA_SIZES[model], vocab_size=32000, rope_theta=10000.0, rms_norm_eps=1e-5,
                      tie_word_embeddings=False)
    cfg._attn_implementation = "sdpa"
    m = LlamaForCausalLM(cfg)
    return m, cfg.vocab_size, list(m.model.layers)


def materialize_sharded(model):
    """A LLaMA's shards get memory (to_empty), then HF's init drawn into them: normal(0, 0.02)
    for the matrices and the embedding, ones for the RMS norms; the rotary tables are rebuilt
    (their buffers were meta). Values differ from a whole build's; the step's time and memory
    do not."""
    model.to_empty(device="cuda")
    std = model.config.initializer_range
    with torch.no_grad():
        for name, p in model.named_parameters():
            local = p.to_local() if hasattr(p, "to_local") else p
            if name.endswith("norm.weight"):
                local.fill_(1.0)
            else:
                local.normal_(0.0, std)
        for m in model.modules():
            if hasattr(m, "inv_freq"):  # the rotary embedding: rebuilt on the device
                fresh = type(m)(config=model.config, device="cuda")
                for b, v in fresh.named_buffers(recurse=False):
                    setattr(m, b, v)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=("gpt2", "tinyllama", "llama2-7b"), default="gpt2")
    ap.add_argument("--mode", choices=("ddp", "fsdp2"), default="ddp")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--steps", type=int, default=15)
    ap.add_argument("--checkpoint", action="store_true")
    ap.add_argument("--compile", action="store_true")
    args = ap.parse_args()
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    local = int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(local)
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    meta = args.mode == "fsdp2" and args.model != "gpt2"
    if meta:
        with torch.device("meta"):
            model, vocab, blocks = build(args.model)
    else:
        if args.model == "llama2-7b":
            raise SystemExit("llama2-7b runs under --mode fsdp2 only (a whole f32 copy per rank is what FSDP avoids)")
        model, vocab, blocks = build(args.model)
        model = model.cuda()
    model.config.use_cache = False
    if args.checkpoint:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    if args.mode == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP
        step_model = DDP(model, device_ids=[local], gradient_as_bucket_view=True, static_graph=True)
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, fused=True)
    else:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        for b in blocks:
            fully_shard(b, mp_policy=mp)
        fully_shard(model, mp_policy=mp)
        if meta:
            materialize_sharded(model)
        step_model = model
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, foreach=True)
    if args.compile:
        step_model = torch.compile(step_model)
    B, T = args.batch, args.seq
    g = torch.Generator(device="cuda").manual_seed(1234 + rank)
    data = torch.randint(0, vocab, (args.warmup + args.steps, B, T), device="cuda", generator=g)

    def step(i):
        x = data[i]
        if args.mode == "ddp":
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = step_model(input_ids=x, labels=x).loss
        else:
            loss = step_model(input_ids=x, labels=x).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    ms, loss = median_step_ms(step, args.warmup, args.steps)
    ms = torch.tensor([ms], device="cuda")
    peaks = torch.tensor([torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved()], device="cuda",
                         dtype=torch.float64)
    dist.all_reduce(ms, op=dist.ReduceOp.MAX)  # the slowest rank sets the step
    dist.all_reduce(peaks, op=dist.ReduceOp.MAX)
    if rank == 0:
        tok_s = world * B * T / (ms.item() / 1e3)
        name = "pytorch-%s%s" % (args.mode, "-compile" if args.compile else "")
        print(json.dumps({"system": name, "model": args.model, "world": world, "batch_per_gpu": B, "seq": T,
                          "checkpoint": args.checkpoint, "ms_per_step": round(ms.item(), 2),
                          "tokens_per_s": round(tok_s), "peak_allocated": int(peaks[0].item()),
                          "peak_reserved": int(peaks[1].item()), "final_loss": loss.item()}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
