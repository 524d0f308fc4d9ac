#!/usr/bin/env python3
"""PyTorch peer for the MoE LoRA bench (issue 45): transformers' Qwen3MoeForCausalLM at the
Qwen3-30B-A3B shape with 4 layers (random init, bf16 base made on the GPU), random tokens B x T
(default 2 x 2048), PEFT LoRA r 16, alpha 32 on every linear layer (target_modules "all-linear":
q|k|v|o_proj) and on the experts (target_parameters experts.gate_up_proj, experts.down_proj:
PEFT's ParamWrapper), HF gradient checkpointing of the decoder layers (non-reentrant),
torch.optim.AdamW(fused=True) over the adapters, labels passed to the model, bf16 autocast as the
HF Trainer runs it. transformers' own experts implementation (whatever its default is: the
grouped_mm path where the installed version has it) is left as it comes, and reported.
Prints one JSON line: ms/step (median over timed steps), tokens/s, peak allocated and reserved.
"""
import argparse, json

import torch

from step_timing import median_step_ms


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--alpha", type=int, default=32)
    ap.add_argument("--no-checkpoint", dest="checkpoint", action="store_false")
    args = ap.parse_args()
    import transformers
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM
    from peft import LoraConfig, get_peft_model
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = True
    cfg = Qwen3MoeConfig(vocab_size=151936, hidden_size=2048, intermediate_size=6144, moe_intermediate_size=768,
                         num_hidden_layers=args.layers, num_attention_heads=32, num_key_value_heads=4, head_dim=128,
                         num_experts=128, num_experts_per_tok=8, norm_topk_prob=True, max_position_embeddings=40960,
                         rms_norm_eps=1e-6, rope_theta=1e6, tie_word_embeddings=False)
    cfg._attn_implementation = "sdpa"
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda"):
        base = Qwen3MoeForCausalLM(cfg)
    torch.set_default_dtype(torch.float32)
    base.config.use_cache = False
    if args.checkpoint:
        base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    lcfg = LoraConfig(r=args.rank, lora_alpha=args.alpha, lora_dropout=0.0, bias="none", task_type="CAUSAL_LM",
                      target_modules="all-linear", target_parameters=["experts.gate_up_proj", "experts.down_proj"])
    model = get_peft_model(base, lcfg)
    model.train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trainable, lr=2e-4, weight_decay=0.0, fused=True)
    B, T = args.batch, args.seq
    data = torch.randint(0, cfg.vocab_size, (args.warmup + args.steps, B, T), device="cuda")

    def step(i):
        x = data[i]
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=x, labels=x).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    ms, _ = median_step_ms(step, args.warmup, args.steps)
    print(json.dumps({"peer": "transformers+peft", "transformers": transformers.__version__,
                      "experts_implementation": getattr(cfg, "_experts_implementation", None),
                      "batch": B, "seq": T, "layers": args.layers, "rank": args.rank, "checkpoint": args.checkpoint,
                      "ms_per_step": round(ms, 2), "tokens_per_s": round(B * T / (ms / 1e3)),
                      "peak_allocated": torch.cuda.max_memory_allocated(),
                      "peak_reserved": torch.cuda.max_memory_reserved(),
                      "trainable": sum(p.numel() for p in trainable)}))


if __name__ == "__main__":
    main()
