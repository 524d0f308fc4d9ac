#!/usr/bin/env python3
"""PyTorch peer for the LoRA throughput bench (issue 15): PEFT LoRA on a frozen bf16 base of the
TinyLlama-1.1B shape (random init), random tokens B x T (default 4 x 1024), r 64, alpha 16 on all
7 linear names (q|k|v|o|gate|up|down_proj), HF gradient checkpointing of the decoder layers
(non-reentrant), torch.optim.AdamW(fused=True) over the adapters, labels passed to the model.

PEFT's defaults as a user meets them: the base loaded in bf16 (torch_dtype), the adapters upcast
to f32 (get_peft_model's autocast_adapter_dtype=True; --adapter-dtype bf16 keeps them bf16), and
the step under torch.autocast(bf16) as the HF Trainer runs it with bf16=True (--no-autocast: off).
Prints one JSON line: ms/step (median over timed steps, CUDA events), tokens/s, peak allocated
and reserved bytes, trainable parameters.
"""
import argparse, json

import torch

from step_timing import median_step_ms


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--layers", type=int, default=22)
    ap.add_argument("--rank", type=int, default=64)
    ap.add_argument("--alpha", type=int, default=16)
    ap.add_argument("--adapter-dtype", choices=("f32", "bf16"), default="f32")
    ap.add_argument("--no-autocast", dest="autocast", action="store_false")
    args = ap.parse_args()
    from transformers import LlamaConfig, LlamaForCausalLM
    from peft import LoraConfig, get_peft_model
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = True
    cfg = LlamaConfig(hidden_size=2048, intermediate_size=5632, num_hidden_layers=args.layers, num_attention_heads=32,
                      num_key_value_heads=4, vocab_size=32000, max_position_embeddings=2048, rope_theta=10000.0,
                      rms_norm_eps=1e-5, tie_word_embeddings=False)
    cfg._attn_implementation = "sdpa"
    cfg.torch_dtype = torch.bfloat16
    # The base made in bf16 on the GPU directly (as from_pretrained(torch_dtype=bfloat16) loads it).
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda"):
        base = LlamaForCausalLM(cfg)
    torch.set_default_dtype(torch.float32)
    base.config.use_cache = False
    base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    lcfg = LoraConfig(r=args.rank, lora_alpha=args.alpha, lora_dropout=0.0, bias="none", task_type="CAUSAL_LM",
                      target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    model = get_peft_model(base, lcfg, autocast_adapter_dtype=args.adapter_dtype == "f32")
    model.train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trainable, lr=2e-4, weight_decay=0.0, fused=True)
    B, T = args.batch, args.seq
    data = torch.randint(0, cfg.vocab_size, (args.warmup + args.steps, B, T), device="cuda")

    def step(i):
        x = data[i]
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=args.autocast):
            loss = model(input_ids=x, labels=x).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    ms, loss = median_step_ms(step, args.warmup, args.steps)
    print(json.dumps({
        "system": "pytorch-peft-lora", "ms_per_step": round(ms, 2), "tokens_per_s": round(B * T / (ms / 1e3)),
        "peak_allocated": torch.cuda.max_memory_allocated(), "peak_reserved": torch.cuda.max_memory_reserved(),
        "final_loss": loss.item(), "batch": B, "seq": T, "steps": args.steps, "rank": args.rank, "alpha": args.alpha,
        "adapter_dtype": args.adapter_dtype, "autocast": args.autocast,
        "trainable_params": sum(p.numel() for p in trainable)}), flush=True)


if __name__ == "__main__":
    main()
