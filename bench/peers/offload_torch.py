#!/usr/bin/env python3
"""PyTorch peer for the offload bench (issue 14): FSDP2 fully_shard on one GPU with
CPUOffloadPolicy(pin_memory=True) and MixedPrecisionPolicy(param_dtype=bf16), the TinyLlama-1.1B
shape (HF LlamaForCausalLM from its config, random init), random tokens B x T, HF gradient
checkpointing of the decoder layers (non-reentrant), AdamW (foreach; with CPU offload FSDP2
steps the f32 sharded parameters on the CPU). World size 1, NCCL (CPU offload needs a backend
for CPU tensors too: "cpu:gloo,cuda:nccl").

Prints one JSON line: ms/step (median over the timed steps, wall clock after a CUDA sync: part of
the step runs on the CPU), tokens/s, GPU peak allocated and reserved bytes, the process's peak
host RSS, and its RSS now.
"""
import argparse, json, os, resource, statistics, time

import torch


def rss_now():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--layers", type=int, default=22)
    args = ap.parse_args()
    import torch.distributed as dist
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard
    from transformers import LlamaConfig, LlamaForCausalLM

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29534")
    torch.cuda.set_device(0)
    dist.init_process_group("cpu:gloo,cuda:nccl", rank=0, world_size=1)
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = True
    # TinyLlama-1.1B (bench/configs has its HF config; written out here so the script stands alone).
    cfg = LlamaConfig(hidden_size=2048, intermediate_size=5632, num_hidden_layers=args.layers, num_attention_heads=32,
                      num_key_value_heads=4, vocab_size=32000, max_position_embeddings=2048, rope_theta=10000.0,
                      rms_norm_eps=1e-5, tie_word_embeddings=False)
    cfg._attn_implementation = "sdpa"
    model = LlamaForCausalLM(cfg)  # built on the CPU: fully_shard with CPU offload keeps it there
    model.config.use_cache = False
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    off = CPUOffloadPolicy(pin_memory=True)
    for layer in model.model.layers:
        fully_shard(layer, mp_policy=mp, offload_policy=off)
    fully_shard(model, mp_policy=mp, offload_policy=off)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, foreach=True)
    B, T = args.batch, args.seq
    data = torch.randint(0, cfg.vocab_size, (args.warmup + args.steps, B, T), device="cuda")

    def step(i):
        x = data[i]
        loss = model(input_ids=x, labels=x).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    for i in range(args.warmup):
        step(i)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    times = []
    for i in range(args.steps):
        t0 = time.perf_counter()
        loss = step(args.warmup + i)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    ms = statistics.median(times)
    print(json.dumps({
        "system": "pytorch-fsdp2-cpu-offload", "ms_per_step": round(ms, 1), "tokens_per_s": round(B * T / (ms / 1e3)),
        "peak_allocated": torch.cuda.max_memory_allocated(), "peak_reserved": torch.cuda.max_memory_reserved(),
        "host_peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "host_rss": rss_now(),
        "final_loss": loss.item(), "batch": B, "seq": T, "steps": args.steps,
        "torch": torch.__version__}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
