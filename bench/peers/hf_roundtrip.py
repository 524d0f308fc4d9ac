#!/usr/bin/env python3
"""Hugging Face checkpoint directories both ways, against transformers (GPU machine).

For each model (a small random GPT2LMHeadModel, LlamaForCausalLM with grouped-query attention,
ViTForImageClassification):
  1. transformers draws random weights (every tensor perturbed, so that biases and norms are not
     all zeros and ones and a swapped tensor shows) and saves them with
     save_pretrained(max_shard_size="20KB"): a sharded directory with model.safetensors.index.json;
  2. `leantrain eval --model DIR` loads that directory and writes its logits and loss, which are
     compared with transformers' on the same inputs;
  3. `leantrain train --model DIR --steps 1 --lr 0 --save OUT --save-shard-size 20KB` loads it,
     trains one step that changes nothing and saves OUT; transformers' from_pretrained(OUT) must
     load it with no missing, unexpected or mismatched keys, every weight bit-identical to the
     original, and the same logits.
Exits non-zero when any check fails; prints one summary line per model (and --json writes them).

Usage: python3 bench/peers/hf_roundtrip.py --leantrain build-cuda/leantrain --workdir /tmp/hf-rt
           [--device cuda|cpu] [--models gpt2,llama,vit] [--tol 1e-5] [--json out.json]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

import torch
from safetensors.torch import load_file, save_file

VOCAB, T, B = 256, 16, 2
IMAGE, CHANNELS, CLASSES = 32, 3, 10


def eager(cfg):
    # The reference attention, as bench/peers/parity.py uses it.
    try:
        cfg._attn_implementation = "eager"
    except Exception:
        pass
    return cfg


def build(kind):
    import transformers as tf
    if kind == "gpt2":
        cfg = tf.GPT2Config(vocab_size=VOCAB, n_positions=64, n_embd=64, n_layer=2, n_head=4,
                            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        return tf.GPT2LMHeadModel(eager(cfg)), tf.GPT2LMHeadModel
    if kind == "llama":
        cfg = tf.LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                             tie_word_embeddings=False)
        return tf.LlamaForCausalLM(eager(cfg)), tf.LlamaForCausalLM
    if kind == "vit":
        cfg = tf.ViTConfig(image_size=IMAGE, patch_size=8, num_channels=CHANNELS, hidden_size=64, num_hidden_layers=2,
                           num_attention_heads=4, intermediate_size=128, num_labels=CLASSES)
        return tf.ViTForImageClassification(eager(cfg)), tf.ViTForImageClassification
    raise SystemExit(f"unknown model {kind}")


def inputs(kind, gen):
    if kind == "vit":
        return {"pixel_values": torch.randn(B, CHANNELS, IMAGE, IMAGE, generator=gen),
                "labels": torch.randint(0, CLASSES, (B,), generator=gen)}
    return {"input_ids": torch.randint(0, VOCAB, (B, T), generator=gen)}


@torch.no_grad()
def reference(model, kind, x):
    model.eval()
    if kind == "vit":
        out = model(pixel_values=x["pixel_values"], labels=x["labels"])
    else:
        out = model(input_ids=x["input_ids"], labels=x["input_ids"])
    return out.logits.float(), float(out.loss)


def rel_err(a, b):
    a, b = a.double(), b.double()
    if not torch.isfinite(a).all():
        return float("inf")
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return p.returncode, p.stdout


def shard_count(d):
    index = os.path.join(d, "model.safetensors.index.json")
    if not os.path.exists(index):
        return 1 if os.path.exists(os.path.join(d, "model.safetensors")) else 0
    with open(index) as f:
        return len(set(json.load(f)["weight_map"].values()))


def check_model(args, kind):
    row = {"model": kind, "ok": False}
    work = os.path.join(args.workdir, kind)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    hf_dir, lt_out = os.path.join(work, "hf"), os.path.join(work, "leantrain-save")
    torch.manual_seed(1234)
    model, cls = build(kind)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.02 * torch.randn_like(p))
    model = model.float().eval()
    model.save_pretrained(hf_dir, max_shard_size="20KB", safe_serialization=True)
    row["hf_shards"] = shard_count(hf_dir)
    failures = []
    if row["hf_shards"] < 2:
        failures.append(f"save_pretrained wrote {row['hf_shards']} weight file(s), expected shards")

    gen = torch.Generator().manual_seed(99)
    x = inputs(kind, gen)
    in_path, out_path = os.path.join(work, "inputs.safetensors"), os.path.join(work, "logits.safetensors")
    save_file({k: v.contiguous() for k, v in x.items()}, in_path)
    ref_logits, ref_loss = reference(model, kind, x)

    # 2. transformers' sharded directory, loaded by leantrain.
    rc, out = run([args.leantrain, "eval", "--model", hf_dir, "--inputs", in_path, "--out", out_path,
                   "--device", args.device])
    if rc != 0:
        failures.append("leantrain eval failed: " + (out.strip().splitlines()[-1] if out.strip() else f"exit {rc}"))
    else:
        got = load_file(out_path)
        row["load_logits_rel_err"] = rel_err(got["logits"], ref_logits)
        row["load_loss_abs_err"] = abs(float(got["loss"]) - ref_loss)
        if row["load_logits_rel_err"] > args.tol:
            failures.append(f"logits after loading differ: rel err {row['load_logits_rel_err']:.3e}")
        if row["load_loss_abs_err"] > args.tol * max(1.0, abs(ref_loss)):
            failures.append(f"loss after loading differs: {float(got['loss'])} vs {ref_loss}")

    # 3. leantrain's save of it, loaded by transformers.
    data = ["--data", "synthetic", "--batch", str(B), "--eval-batches", "1"]
    if kind != "vit":
        data += ["--seq-len", str(T)]
    rc, out = run([args.leantrain, "train", "--model", hf_dir, "--steps", "1", "--lr", "0", "--save", lt_out,
                   "--save-shard-size", "20KB", "--device", args.device] + data)
    if rc != 0:
        failures.append("leantrain train --model DIR failed: " + (out.strip().splitlines()[-1] if out.strip() else f"exit {rc}"))
    else:
        row["leantrain_shards"] = shard_count(lt_out)
        if row["leantrain_shards"] < 2:
            failures.append(f"--save-shard-size 20KB wrote {row['leantrain_shards']} weight file(s)")
        back, info = cls.from_pretrained(lt_out, output_loading_info=True)
        back = back.float().eval()
        for key in ("missing_keys", "unexpected_keys", "mismatched_keys"):
            if info.get(key):
                failures.append(f"from_pretrained {key}: {list(info[key])[:3]}")
        want, have = model.state_dict(), back.state_dict()
        differ = [k for k in want if k not in have or not torch.equal(want[k], have[k])]
        row["weights_bit_identical"] = not differ
        if differ:
            failures.append(f"{len(differ)} weights differ after the round trip, e.g. {differ[0]}")
        logits, loss = reference(back, kind, x)
        row["roundtrip_logits_rel_err"] = rel_err(logits, ref_logits)
        if row["roundtrip_logits_rel_err"] > args.tol:
            failures.append(f"logits after the round trip differ: rel err {row['roundtrip_logits_rel_err']:.3e}")
    row["failures"] = failures
    row["ok"] = not failures
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--leantrain", required=True, help="the leantrain binary")
    ap.add_argument("--workdir", required=True, help="scratch directory (its per-model subdirectories are replaced)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", help="leantrain's --device")
    ap.add_argument("--models", default="gpt2,llama,vit")
    ap.add_argument("--tol", type=float, default=1e-5, help="relative error allowed on f32 logits")
    ap.add_argument("--json", help="write the rows to this file")
    args = ap.parse_args()
    args.leantrain = os.path.abspath(args.leantrain)
    os.makedirs(args.workdir, exist_ok=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    import transformers
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, leantrain on {args.device}")
    rows = []
    for kind in args.models.split(","):
        try:
            row = check_model(args, kind)
        except Exception as e:  # a failure of this model's check, not of the script
            row = {"model": kind, "ok": False, "failures": [f"{type(e).__name__}: {e}"]}
        rows.append(row)
        parts = [f"{kind:6s} {'ok  ' if row['ok'] else 'FAIL'}"]
        for k in ("hf_shards", "load_logits_rel_err", "load_loss_abs_err", "leantrain_shards", "weights_bit_identical",
                  "roundtrip_logits_rel_err"):
            if k in row:
                v = row[k]
                parts.append(f"{k} {v:.2e}" if isinstance(v, float) else f"{k} {v}")
        print(" | ".join(parts))
        for f in row.get("failures", []):
            print(f"    {f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
    bad = [r["model"] for r in rows if not r["ok"]]
    print("all round trips match" if not bad else f"FAILED: {', '.join(bad)}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
