#!/usr/bin/env python3
"""DPO memory side by side, one call (issue 48): TinyLlama-1.1B's shape, random weights, LoRA.

  leantrain SFT  over 2B sequences of T tokens   (train --objective sft --batch 2B, synthetic)
  leantrain DPO  over B pairs (2B rows of T)      (train --objective dpo --batch B, synthetic pairs)
  PyTorch DPO    TRL's loss on the same shapes, holding a frozen reference model beside the policy
                 (a TRL DPOTrainer given ref_model), PEFT LoRA on the policy
  PyTorch DPO    the same with the reference as PEFT's disable_adapter() (TRL's default with a
                 peft_config), for context
  PyTorch SFT    the 2B sequences with the same LoRA, for context
every one with the same precision (bf16 weights and adapters), LoRA rank/alpha/targets, AdamW on
the adapters, no activation checkpointing, 3 steps. Peaks are allocated bytes: leantrain's from
`--metrics-json` (peak_allocated_bytes), PyTorch's torch.cuda.max_memory_allocated(), each
PyTorch run in its own process. `leantrain plan` predicts the two leantrain runs first (its
peak must equal the measured one). The bars:
  leantrain DPO peak <= 1.1 x leantrain SFT peak   (the reference costs no second model and no saved activations)
  leantrain DPO peak <  PyTorch DPO with a reference model
Writes bench/results/dpo-memory-<gpu>-<commit>.{json,md}; exits non-zero when a bar fails.

Usage: python3 bench/dpo_memory.py --leantrain build-cuda/leantrain [--pairs 4] [--seq-len 512]
           [--rank 16] [--commit SHA] [--out bench/results]
       python3 bench/dpo_memory.py --dry-run    (prints the commands; no GPU, no torch)
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINYLLAMA = dict(vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=22,
                 num_attention_heads=32, num_key_value_heads=4, max_position_embeddings=2048, rms_norm_eps=1e-5,
                 rope_theta=10000.0, tie_word_embeddings=False)
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
STEPS = 3


def leantrain_cmd(args, objective, verb="train", out=None):
    rows = 2 * args.pairs
    cmd = [args.leantrain, verb, "--model", "tinyllama-1.1b", "--data", "synthetic", "--objective", objective,
           "--batch", str(args.pairs if objective == "dpo" else rows), "--seq-len", str(args.seq_len),
           "--precision", "bf16-true", "--lora-rank", str(args.rank), "--lora-alpha", str(2 * args.rank),
           "--optimizer", "adamw", "--steps", str(STEPS), "--eval-batches", "1"]
    if verb == "train":
        cmd += ["--device", "cuda", "--log-every", "1", "--metrics-json", out]
    else:
        cmd += ["--json"]
    return cmd


def torch_child(mode, pairs, T, rank):
    """One PyTorch run in this process; prints {"peak_allocated_bytes": ...}."""
    import copy
    import torch
    import torch.nn.functional as F
    import transformers as tf
    from peft import LoraConfig, get_peft_model
    torch.manual_seed(0)
    cfg = tf.LlamaConfig(**TINYLLAMA, attention_dropout=0.0)
    with torch.device("cuda"):
        base = tf.LlamaForCausalLM(cfg).to(torch.bfloat16)
    reference = None
    if mode == "dpo-ref-model":  # TRL with ref_model: a frozen copy of the base, in eval mode
        reference = copy.deepcopy(base).eval().requires_grad_(False)
    model = get_peft_model(base, LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=TARGETS, lora_dropout=0.0,
                                            bias="none", task_type="CAUSAL_LM"), autocast_adapter_dtype=False)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    g = torch.Generator(device="cuda").manual_seed(1)
    rows = 2 * pairs
    np_ = max(1, T // 4)

    def logps(m, ids, labels):
        logits = m(input_ids=ids).logits.float()
        mask = labels != -100
        lp = torch.gather(logits.log_softmax(-1), 2, labels.clamp_min(0).unsqueeze(-1)).squeeze(-1)
        return (lp * mask).sum(-1)

    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    for _ in range(STEPS):
        seq = torch.randint(0, cfg.vocab_size, (rows, T + 1), device="cuda", generator=g)
        ids, labels = seq[:, :-1], seq[:, 1:].clone()
        if mode == "sft":
            logits = model(input_ids=ids).logits
            loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1))
        else:
            labels[:, : np_ - 1] = -100  # the prompt's quarter is masked, as leantrain's synthetic pairs
            with torch.no_grad():
                if reference is not None:
                    ref = logps(reference, ids, labels)
                else:
                    with model.disable_adapter():
                        ref = logps(model, ids, labels)
            pol = logps(model, ids, labels)
            h = (pol[0::2] - pol[1::2]) - (ref[0::2] - ref[1::2])
            loss = -F.logsigmoid(0.1 * h).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    print(json.dumps({"peak_allocated_bytes": torch.cuda.max_memory_allocated(),
                      "peak_reserved_bytes": torch.cuda.max_memory_reserved()}))


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def gib(b):
    return f"{b / 2**30:.3f} GiB"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--leantrain", default="build-cuda/leantrain")
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--commit", default="")
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--torch-child", default="")
    args = ap.parse_args()
    if args.torch_child:
        return torch_child(args.torch_child, args.pairs, args.seq_len, args.rank)
    torch_modes = ["dpo-ref-model", "dpo-adapters-off", "sft"]
    if args.dry_run:
        for obj in ("sft", "dpo"):
            print(" ".join(leantrain_cmd(args, obj, "plan")))
            print(" ".join(leantrain_cmd(args, obj, "train", f"{obj}.json")))
        for m in torch_modes:
            print(" ".join([sys.executable, __file__, "--torch-child", m, "--pairs", str(args.pairs), "--seq-len",
                            str(args.seq_len), "--rank", str(args.rank)]))
        return 0
    rows = {}
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        for obj in ("sft", "dpo"):
            rc, out, err = run(leantrain_cmd(args, obj, "plan"))
            plan = json.loads(out) if rc == 0 else None
            path = os.path.join(tmp, obj + ".json")
            rc2, out2, err2 = run(leantrain_cmd(args, obj, "train", path))
            if rc2 != 0:
                failures.append(f"leantrain {obj}: " + (err2 or out2).strip().splitlines()[-1])
                continue
            m = json.load(open(path))
            rows["leantrain " + obj] = {"peak_allocated_bytes": m["peak_allocated_bytes"],
                                        "peak_reserved_bytes": m["peak_reserved_bytes"],
                                        "plan_peak_allocated_bytes": plan["peak_allocated_bytes"] if plan else None,
                                        "categories_peak": m.get("categories_peak"), "objective": m.get("objective")}
            if plan is None:
                failures.append(f"leantrain plan {obj}: " + err.strip().splitlines()[-1])
            elif plan["peak_allocated_bytes"] != m["peak_allocated_bytes"]:
                failures.append(f"leantrain {obj}: plan {plan['peak_allocated_bytes']} != measured {m['peak_allocated_bytes']}")
        for mode in torch_modes:
            rc, out, err = run([sys.executable, os.path.abspath(__file__), "--torch-child", mode, "--pairs", str(args.pairs),
                                "--seq-len", str(args.seq_len), "--rank", str(args.rank)])
            if rc != 0:
                failures.append(f"torch {mode}: " + err.strip().splitlines()[-1])
                continue
            rows["torch " + mode] = json.loads(out.strip().splitlines()[-1])
    bars = {}
    if "leantrain sft" in rows and "leantrain dpo" in rows:
        ratio = rows["leantrain dpo"]["peak_allocated_bytes"] / rows["leantrain sft"]["peak_allocated_bytes"]
        bars["dpo_over_sft"] = {"value": ratio, "bar": 1.1, "ok": ratio <= 1.1}
    if "leantrain dpo" in rows and "torch dpo-ref-model" in rows:
        a, b = rows["leantrain dpo"]["peak_allocated_bytes"], rows["torch dpo-ref-model"]["peak_allocated_bytes"]
        bars["dpo_below_torch_with_reference_model"] = {"leantrain": a, "torch": b, "ok": a < b}
    for k, v in bars.items():
        if not v["ok"]:
            failures.append(f"bar {k} fails: {v}")
    try:
        import torch
        gpu = torch.cuda.get_device_name(0)
    except Exception:
        gpu = "unknown"
    commit = args.commit or subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                           cwd=REPO).stdout.strip()
    result = {"commit": commit, "gpu": gpu, "pairs": args.pairs, "seq_len": args.seq_len, "lora_rank": args.rank,
              "precision": "bf16-true", "steps": STEPS, "runs": rows, "bars": bars, "failures": failures}
    os.makedirs(args.out, exist_ok=True)
    tag = gpu.replace("NVIDIA ", "").replace(" ", "-").lower()
    base = os.path.join(args.out, f"dpo-memory-{tag}-{commit}")
    with open(base + ".json", "w") as f:
        json.dump(result, f, indent=1)
    lines = [f"# DPO memory, TinyLlama-1.1B shape, LoRA r{args.rank}, bf16, {args.pairs} pairs x {args.seq_len} tokens ({gpu}, {commit})",
             "", "| run | peak allocated | plan |", "|---|---|---|"]
    for k, v in rows.items():
        plan = v.get("plan_peak_allocated_bytes")
        lines.append(f"| {k} | {gib(v['peak_allocated_bytes'])} | {gib(plan) if plan else ''} |")
    lines.append("")
    for k, v in bars.items():
        lines.append(f"- {k}: {json.dumps(v)}")
    for f in failures:
        lines.append(f"- FAILED: {f}")
    with open(base + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main() or 0)
