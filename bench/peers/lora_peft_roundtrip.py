#!/usr/bin/env python3
"""LoRA adapters both ways with PEFT (issue 15; GPU machine, or any machine with torch,
transformers and peft).

For each model (small random GPT2LMHeadModel, LlamaForCausalLM with grouped-query attention,
ViTForImageClassification), from a transformers save_pretrained directory:
  1. `leantrain train --model DIR --lora-rank 4 --lora-alpha 8 --steps 3 --save ADAPTER` trains
     adapters (B no longer zero) and writes PEFT's adapter_config.json + adapter_model.safetensors;
  2. PeftModel.from_pretrained(base, ADAPTER) must load it with no missing or unexpected keys, and
     its logits must equal `leantrain eval --model DIR --adapter ADAPTER` on the same inputs;
  3. `leantrain merge` must give a model whose logits (from_pretrained) equal PEFT's
     merge_and_unload() model's.
Exits non-zero when any check fails; prints one JSON line per model.

Usage: python3 bench/peers/lora_peft_roundtrip.py --leantrain build-cuda/leantrain --workdir /tmp/lora-rt
           [--device cuda|cpu] [--models gpt2,llama,vit] [--tol 1e-4]
"""
import argparse, json, os, shutil, subprocess, sys

import torch
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_roundtrip import B, T, build, inputs, reference, rel_err, run  # noqa: E402


def check(args, kind):
    from peft import PeftModel
    row, failures = {"model": kind}, []
    work = os.path.join(args.workdir, kind)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    base_dir, adapter, merged = (os.path.join(work, n) for n in ("base", "adapter", "merged"))
    torch.manual_seed(1234)
    model, cls = build(kind)
    model.float().save_pretrained(base_dir, safe_serialization=True)
    x = inputs(kind, torch.Generator().manual_seed(99))
    in_path, out_path = os.path.join(work, "inputs.safetensors"), os.path.join(work, "logits.safetensors")
    save_file({k: v.contiguous() for k, v in x.items()}, in_path)

    data = ["--data", "synthetic", "--batch", str(B), "--eval-batches", "1"] + ([] if kind == "vit" else ["--seq-len", str(T)])
    rc, out = run([args.leantrain, "train", "--model", base_dir, "--steps", "3", "--lr", "1e-2", "--lora-rank", "4",
                   "--lora-alpha", "8", "--save", adapter, "--device", args.device] + data)
    if rc != 0:
        return {**row, "ok": False, "failures": ["leantrain train failed: " + out.strip().splitlines()[-1]]}
    row["adapter_config"] = json.load(open(os.path.join(adapter, "adapter_config.json")))

    base = cls.from_pretrained(base_dir).float().eval()
    peft = PeftModel.from_pretrained(base, adapter)
    # Every tensor of the file went somewhere: PEFT warns about unexpected keys; check by name.
    saved = set(load_file(os.path.join(adapter, "adapter_model.safetensors")))
    params = {n.replace(".default", "").replace("modules_to_save.", "") for n, _ in peft.named_parameters()}
    row["keys_not_in_peft_model"] = sorted(k for k in saved if k not in params)
    if row["keys_not_in_peft_model"]:
        failures.append(f"{len(row['keys_not_in_peft_model'])} adapter tensors have no place in PEFT's model")
    peft_logits, _ = reference(peft, kind, x)
    rc, out = run([args.leantrain, "eval", "--model", base_dir, "--adapter", adapter, "--inputs", in_path, "--out", out_path,
                   "--device", args.device])
    if rc != 0:
        failures.append("leantrain eval --adapter failed: " + out.strip().splitlines()[-1])
    else:
        row["adapter_logits_rel_err"] = rel_err(load_file(out_path)["logits"], peft_logits)
        if row["adapter_logits_rel_err"] > args.tol:
            failures.append(f"logits with the adapter differ: rel err {row['adapter_logits_rel_err']:.3e}")
    base_logits, _ = reference(cls.from_pretrained(base_dir).float(), kind, x)
    row["adapter_changes_logits"] = rel_err(peft_logits, base_logits)
    if row["adapter_changes_logits"] < 1e-4:
        failures.append("the adapter leaves the logits unchanged: the check would not see a wrong adapter")

    rc, out = run([args.leantrain, "merge", "--model", base_dir, "--adapter", adapter, "--out", merged])
    if rc != 0:
        failures.append("leantrain merge failed: " + out.strip().splitlines()[-1])
    else:
        mine, _ = reference(cls.from_pretrained(merged).float(), kind, x)
        theirs, _ = reference(peft.merge_and_unload(), kind, x)
        row["merged_logits_rel_err"] = rel_err(mine, theirs)
        if row["merged_logits_rel_err"] > args.tol:
            failures.append(f"merged logits differ from PEFT's merge_and_unload: rel err {row['merged_logits_rel_err']:.3e}")
    row.pop("adapter_config")
    return {**row, "ok": not failures, "failures": failures}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--leantrain", required=True)
    ap.add_argument("--workdir", default="/tmp/lora-rt")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--models", default="gpt2,llama,vit")
    ap.add_argument("--tol", type=float, default=1e-4)
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    rows = [check(args, k) for k in args.models.split(",")]
    for r in rows:
        print(json.dumps(r), flush=True)
    shutil.rmtree(args.workdir, ignore_errors=True)
    sys.exit(0 if all(r["ok"] for r in rows) else 1)


if __name__ == "__main__":
    main()
