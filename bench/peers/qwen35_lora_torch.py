#!/usr/bin/env python3
"""PyTorch peer for the Qwen3.5 LoRA throughput bench (issue 44): PEFT LoRA on a frozen bf16 base of
the ~1.9B Qwen3.5 text shape (hidden 2048, 24 layers: 18 Gated DeltaNet + 6 gated attention,
intermediate 6144, 8 query / 2 key-value heads of 256, DeltaNet 16 key / 16 value heads of 128,
vocab 248,320, tied; random init), random tokens B x T (default 1 x 4096), r 16, alpha 32 on every
linear name of the layers (q|k|v|o_proj, gate|up|down_proj, in_proj_qkv|z|b|a, out_proj), HF gradient
checkpointing of the decoder layers (non-reentrant), torch.optim.AdamW(fused=True) over the
adapters, labels passed to the model.

PEFT's defaults as a user meets them: the base in bf16, the adapters upcast to f32
(autocast_adapter_dtype=True; --adapter-dtype bf16 keeps them bf16), the step under
torch.autocast(bf16). transformers runs the delta rule through flash-linear-attention and the
convolution through causal-conv1d when those packages are installed, else its torch fallbacks; the
JSON line says which. Prints one JSON line: ms/step (median over timed steps, CUDA events),
tokens/s, peak allocated and reserved bytes, trainable parameters.
"""
import argparse, importlib.util, json

import torch

from step_timing import median_step_ms

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj",
           "in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a", "out_proj"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--alpha", type=int, default=32)
    ap.add_argument("--adapter-dtype", choices=("f32", "bf16"), default="f32")
    ap.add_argument("--no-autocast", dest="autocast", action="store_false")
    ap.add_argument("--no-checkpointing", dest="checkpointing", action="store_false")
    args = ap.parse_args()
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig
    from peft import LoraConfig, get_peft_model
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = True
    cfg = Qwen3_5TextConfig(vocab_size=248320, hidden_size=2048, intermediate_size=6144, num_hidden_layers=args.layers,
                            num_attention_heads=8, num_key_value_heads=2, head_dim=256, linear_num_key_heads=16,
                            linear_key_head_dim=128, linear_num_value_heads=16, linear_value_head_dim=128,
                            linear_conv_kernel_dim=4, full_attention_interval=4, max_position_embeddings=262144,
                            rms_norm_eps=1e-6, tie_word_embeddings=True,
                            rope_parameters=dict(rope_type="default", rope_theta=1e7, partial_rotary_factor=0.25))
    cfg._attn_implementation = "sdpa"
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda"):
        base = Qwen3_5ForCausalLM(cfg)
    torch.set_default_dtype(torch.float32)
    base.config.use_cache = False
    if args.checkpointing:
        base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    lcfg = LoraConfig(r=args.rank, lora_alpha=args.alpha, lora_dropout=0.0, bias="none", task_type="CAUSAL_LM",
                      target_modules=TARGETS)
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
        "system": "pytorch-peft-lora-qwen3_5", "ms_per_step": round(ms, 2), "tokens_per_s": round(B * T / (ms / 1e3)),
        "peak_allocated": torch.cuda.max_memory_allocated(), "peak_reserved": torch.cuda.max_memory_reserved(),
        "final_loss": loss.item(), "batch": B, "seq": T, "steps": args.steps, "rank": args.rank, "alpha": args.alpha,
        "adapter_dtype": args.adapter_dtype, "autocast": args.autocast, "checkpointing": args.checkpointing,
        "fla": importlib.util.find_spec("fla") is not None,
        "causal_conv1d": importlib.util.find_spec("causal_conv1d") is not None,
        "trainable_params": sum(p.numel() for p in trainable)}), flush=True)


if __name__ == "__main__":
    main()
