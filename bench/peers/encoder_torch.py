#!/usr/bin/env python3
"""PyTorch peer for the text-classifier benches (issue 17): transformers' *ForSequenceClassification
(DistilBERT, BERT, RoBERTa, BigBird at their base shapes, random weights), whole rows of random ids B x T,
random labels, labels passed to the model (the loss inside it, as transformers computes it), SDPA
attention (transformers' default and fastest), the models' hidden dropout (0.1) and none on the
attention probabilities (leantrain's attention has none).

  --precision bf16-true   parameters, gradients and AdamW states in bf16 (Lightning's bf16-true)
  --precision bf16-mixed  f32 parameters, torch.autocast(bf16), fused AdamW
  --checkpoint            transformers' gradient checkpointing of every layer (non-reentrant)
  --compile               torch.compile of the model

bitsandbytes is not installed on the GPU machine, so the 8-bit AdamW of the seed's recipe has no
PyTorch peer here: torch.optim.AdamW (fused) stands in, with states in the parameters' dtype.
Prints one JSON line: ms/step (median over timed steps, CUDA events), sequences/s, peak allocated
and reserved bytes (after the warm-up, so the timed steps' peak).
"""
import argparse, json

import torch

from step_timing import median_step_ms

SHAPES = {
    "distilbert": dict(vocab_size=30522, dim=768, n_layers=6, n_heads=12, hidden_dim=3072, max_position_embeddings=512),
    "bert": dict(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
                 max_position_embeddings=512),
    "roberta": dict(vocab_size=50265, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                    intermediate_size=3072, max_position_embeddings=514, type_vocab_size=1, pad_token_id=1,
                    layer_norm_eps=1e-5),
    # google/bigbird-roberta-base's shape: block_sparse, blocks of 64, 3 random blocks.
    "big_bird": dict(vocab_size=50358, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                     intermediate_size=3072, max_position_embeddings=4096, hidden_act="gelu_new",
                     attention_type="block_sparse", block_size=64, num_random_blocks=3),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=tuple(SHAPES), default="distilbert")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--precision", choices=("bf16-true", "bf16-mixed"), default="bf16-true")
    ap.add_argument("--checkpoint", action="store_true")
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--tag", default="", help="the bench configuration's name, echoed as \"config\"")
    args = ap.parse_args()
    import transformers as tf
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = True
    cls = {"distilbert": (tf.DistilBertConfig, tf.DistilBertForSequenceClassification),
           "bert": (tf.BertConfig, tf.BertForSequenceClassification),
           "roberta": (tf.RobertaConfig, tf.RobertaForSequenceClassification),
           "big_bird": (tf.BigBirdConfig, tf.BigBirdForSequenceClassification)}[args.model]
    # No dropout on the attention probabilities, as leantrain (its kernels have none); the rest as configured.
    no_attn_drop = {"attention_dropout": 0.0} if args.model == "distilbert" else {"attention_probs_dropout_prob": 0.0}
    cfg = cls[0](**SHAPES[args.model], **no_attn_drop, num_labels=2)
    # BigBird's block-sparse attention is its own code (transformers has no SDPA path for it).
    cfg._attn_implementation = "eager" if args.model == "big_bird" else "sdpa"
    true_bf16 = args.precision == "bf16-true"
    with torch.device("cuda"):  # created on the device, in the target dtype (no f32 copy for bf16-true)
        torch.set_default_dtype(torch.bfloat16 if true_bf16 else torch.float32)
        model = cls[1](cfg)
        torch.set_default_dtype(torch.float32)
    if args.checkpoint:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=5e-5, weight_decay=0.01, fused=True)
    step_model = torch.compile(model) if args.compile else model
    B, T = args.batch, args.seq
    pad = cfg.pad_token_id
    ids = torch.randint(0, cfg.vocab_size - 1, (args.warmup + args.steps, B, T), device="cuda")
    ids = ids + (ids >= pad).long()  # no pad token inside the rows (as leantrain's synthetic rows)
    labels = torch.randint(0, 2, (args.warmup + args.steps, B), device="cuda")

    def step(i):
        if true_bf16:
            loss = step_model(input_ids=ids[i], labels=labels[i]).loss
        else:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = step_model(input_ids=ids[i], labels=labels[i]).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    ms, loss = median_step_ms(step, args.warmup, args.steps)
    print(json.dumps({
        "system": "pytorch" + ("-compile" if args.compile else ""), "config": args.tag, "model": args.model, "precision": args.precision,
        "checkpoint": args.checkpoint, "ms_per_step": round(ms, 2), "seq_per_s": round(B / (ms / 1e3), 1),
        "peak_allocated": torch.cuda.max_memory_allocated(), "peak_reserved": torch.cuda.max_memory_reserved(),
        "final_loss": loss.item(), "batch": B, "seq": T, "steps": args.steps}), flush=True)


if __name__ == "__main__":
    main()
