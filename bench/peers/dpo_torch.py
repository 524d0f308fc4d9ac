#!/usr/bin/env python3
"""DPO against a PyTorch implementation of TRL's preference losses (issue 48; GPU machine: torch,
transformers and peft; TRL is not needed, its loss is written out below).

TRL's DPOTrainer (trl/trainer/dpo_trainer.py, dpo_loss and concatenated_forward), for one batch:
  chosen and rejected rows of each pair go through the policy as one batch; a row's log-probability
  is the sum of log_softmax(logits)[next token] over its completion tokens (prompt and padding
  masked); with h = (pc - pr) - (rc - rr) and ls the label smoothing,
    sigmoid: loss = -logsigmoid(beta h) (1 - ls) - logsigmoid(-beta h) ls
    ipo:     loss = (h - 1 / (2 beta))^2, on log-probabilities averaged over the completion's tokens
    simpo:   (CPOTrainer) h = pc - pr averaged, no reference, loss as sigmoid's of beta h - gamma
  mean over pairs; rewards = beta (policy - reference), detached; rewards/accuracies = mean of
  chosen > rejected, rewards/margins = mean of chosen - rejected.

Cases (each f32 and bf16 unless --dtypes says otherwise), on a small random LlamaForCausalLM:
  bench-full    full fine-tune: the reference is another set of weights (the policy's plus noise);
                leantrain_bench dpo computes its log-probabilities first and frees it, as a full
                fine-tune's first pass does, PyTorch holds both models
  bench-lora    LoRA (PEFT, B drawn non-zero): the reference is the base with the adapters off
  bench-*-ls    the same with --label-smoothing 0.1; bench-ipo / bench-simpo: the variants (f32)
  cli-lora      end to end: a transformers save_pretrained directory with the committed
                SentencePiece-style tokenizer, a pairs .jsonl, a PEFT adapter; `leantrain train
                --objective dpo --lora-init ADAPTER --lr 0 --steps 1 --metrics M` must report TRL's
                loss and rewards of the same pairs (tokenized by leantrain's rule, data.h)
Loss, rewards (per pair, or the means the CLI reports) and every trainable gradient are compared:
f32 within 1e-5 relative (the issue's bar; gradients by the norm of the difference over the
norm, as bench/peers/parity.py measures them), bf16 within parity.py's table (3e-2 loss and
rewards, 6e-2 gradients).

Usage: python3 bench/peers/dpo_torch.py --bench build-cuda/leantrain_bench --leantrain build-cuda/leantrain
           [--out bench/results] [--dtypes f32,bf16] [--only bench-full,cli-lora] [--commit SHA]
       python3 bench/peers/dpo_torch.py --self-test     (the parts that need no torch, on any machine)
Writes bench/results/dpo-parity-<commit>.json and exits non-zero when a case fails.
"""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
TOKENIZER_DIR = os.path.join(REPO, "tests", "data", "tokenizers", "sentencepiece")
IGNORE = -100


# ---------------------------------------------------------------- no torch needed

def trl_losses(pc, pr, rc, rr, beta, label_smoothing=0.0, loss_type="sigmoid", simpo_gamma=0.5, logsigmoid=None):
    """TRL's per-pair losses, for floats (logsigmoid=None: math) or tensors (pass F.logsigmoid)."""
    ls = logsigmoid or py_logsigmoid
    if loss_type == "simpo":
        z = beta * (pc - pr) - simpo_gamma  # CPOTrainer: beta * (pi_logratios - gamma / beta)
        return -ls(z) * (1 - label_smoothing) - ls(-z) * label_smoothing
    h = (pc - pr) - (rc - rr)
    if loss_type == "ipo":
        return (h - 1 / (2 * beta)) ** 2
    return -ls(beta * h) * (1 - label_smoothing) - ls(-beta * h) * label_smoothing


def py_logsigmoid(x):
    return x - math.log1p(math.exp(x)) if x < 0 else -math.log1p(math.exp(-x))


def trl_metrics(policy, reference, beta):
    """Means over pairs of TRL's rewards, from [(chosen, rejected)] log-probabilities (reference None: SimPO)."""
    n = len(policy)
    ch = [beta * (p[0] - (reference[i][0] if reference else 0.0)) for i, p in enumerate(policy)]
    rj = [beta * (p[1] - (reference[i][1] if reference else 0.0)) for i, p in enumerate(policy)]
    return {"rewards/chosen": sum(ch) / n, "rewards/rejected": sum(rj) / n,
            "rewards/accuracies": sum(1.0 for c, r in zip(ch, rj) if c > r) / n,
            "rewards/margins": sum(c - r for c, r in zip(ch, rj)) / n}


def pair_rows(prompt, chosen, rejected, T, pad=0):
    """leantrain's sample of a pair (data.h, PairDataset): two rows of T input ids (prompt then
    completion, right-padded) and T labels (the next token where it is a completion token)."""
    ids, labels = [], []
    for comp in (chosen, rejected):
        seq = list(prompt) + list(comp)
        assert len(seq) <= T + 1, "a pair longer than the context"
        ids.append([seq[t] if t < len(seq) else pad for t in range(T)])
        labels.append([seq[t + 1] if t + 1 < len(seq) and t + 1 >= len(prompt) else IGNORE for t in range(T)])
    return ids, labels


def encode_pair(encode, eos_id, prompt, chosen, rejected, T):
    """leantrain's tokenization of a string pair (src/data/preference_pairs.cpp): the prompt with
    the tokenizer's special tokens, each completion without them and followed by EOS, cut so the
    row holds at most T + 1 tokens. encode(text, add_special) -> ids."""
    p = encode(prompt, True)
    room = T + 1 - len(p)
    c = (encode(chosen, False) + [eos_id])[:room]
    r = (encode(rejected, False) + [eos_id])[:room]
    return p, c, r


PAIRS = [  # the CLI case's data: short, varied, some completions sharing words with their prompt
    ("Name a colour:", " red", " seven"),
    ("What is 2 + 2?", " 4.", " 5, I think."),
    ("Say hello.", " Hello there!", " no"),
    ("Capital of France?", " Paris.", " It is Rome, of course."),
    ("Finish: the quick brown", " fox", " dog jumps over"),
    ("A fruit:", " apple", " a car"),
    ("Opposite of hot?", " cold", " hot again and again"),
    ("Is water wet?", " Yes, it is.", " Maybe not"),
]


def judge(value, want, tol):
    return abs(value - want) <= tol * max(abs(want), 1e-30)


def self_test():
    # The loss at h = 0 is log 2; TRL's formula against a hand value (pair 0 of tests/unit/test_dpo.cpp).
    assert abs(trl_losses(-1.0, -1.0, -2.0, -2.0, 0.1) - math.log(2)) < 1e-15
    assert abs(trl_losses(-3.0, -4.5, -3.2, -4.0, 0.1) - 0.6587595555) < 1e-9
    assert abs(trl_losses(-3.0, -4.5, -3.2, -4.0, 0.5, loss_type="ipo") - (0.7 - 1.0) ** 2) < 1e-15
    z = 2.0 * 1.5 - 0.5
    assert abs(trl_losses(-3.0, -4.5, 0, 0, 2.0, 0.1, "simpo") - (-py_logsigmoid(z) * 0.9 - py_logsigmoid(-z) * 0.1)) < 1e-15
    assert py_logsigmoid(-800.0) == -800.0 and py_logsigmoid(800.0) == 0.0
    m = trl_metrics([(-3.0, -4.5), (-2.0, -1.0), (-7.25, -7.0)], [(-3.2, -4.0), (-2.5, -1.1), (-7.0, -7.5)], 0.1)
    assert abs(m["rewards/accuracies"] - 2 / 3) < 1e-15 and abs(m["rewards/margins"] - (m["rewards/chosen"] - m["rewards/rejected"])) < 1e-15
    # The rows of tests/unit/test_dpo.cpp's DpoData.PairRowsMaskThePromptAndPadTheRest.
    ids, labels = pair_rows([5, 6, 7], [8, 9, 2], [10, 2], 8)
    assert ids == [[5, 6, 7, 8, 9, 2, 0, 0], [5, 6, 7, 10, 2, 0, 0, 0]], ids
    assert labels == [[IGNORE, IGNORE, 8, 9, 2, IGNORE, IGNORE, IGNORE], [IGNORE, IGNORE, 10, 2] + [IGNORE] * 4], labels
    enc = lambda s, special: ([1] if special else []) + [ord(ch) for ch in s]  # noqa: E731
    p, c, r = encode_pair(enc, 2, "ab", "cde", "f", 5)
    assert (p, c, r) == ([1, 97, 98], [99, 100, 101], [102, 2]), (p, c, r)  # chosen cut at T + 1 - 3 = 3
    assert judge(1.0 + 5e-6, 1.0, 1e-5) and not judge(1.0 + 2e-5, 1.0, 1e-5)
    print("dpo_torch self-test: ok")


# ---------------------------------------------------------------- torch

LLAMA = dict(model_type="llama", vocab_size=512, hidden_size=64, intermediate_size=176, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-5,
             rope_theta=10000.0, tie_word_embeddings=False)
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
TOLERANCE = {"f32": (1e-5, 1e-5), "bf16": (3e-2, 6e-2)}  # (loss and rewards, gradients)


def rel_err(a, b):
    import torch
    a, b = a.detach().double(), b.detach().double()
    if not torch.isfinite(a).all():
        return float("inf")
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def llama(cfg, dtype):
    import torch
    import transformers as tf
    keys = {k: v for k, v in cfg.items() if k != "model_type"}
    c = tf.LlamaConfig(**keys, attention_dropout=0.0)
    try:  # the reference attention, as bench/peers/parity.py uses it
        c._attn_implementation = "eager"
    except Exception:
        pass
    m = tf.LlamaForCausalLM(c)
    with torch.no_grad():  # random norms, so a misapplied one shows
        for n, p in m.named_parameters():
            if "norm" in n:
                p.normal_(1, 0.1)
    m = m.to("cuda")
    for p in m.parameters():  # parameters only: the rotary inv_freq buffer stays f32, as leantrain keeps it
        p.data = p.data.to(dtype)
    return m


def seq_logps(model, ids, labels):
    """[R] summed log-probabilities of the labelled tokens (f32, as TRL's selective_log_softmax)."""
    import torch
    logits = model(input_ids=ids).logits.float()
    mask = labels != IGNORE
    lp = torch.gather(logits.log_softmax(-1), 2, labels.clamp_min(0).unsqueeze(-1)).squeeze(-1)
    return (lp * mask).sum(-1), mask.sum(-1)


def random_batch(gen, B, T, vocab):
    import torch
    ids, labels = [], []
    for _ in range(B):
        np_ = int(torch.randint(1, T // 2, (1,), generator=gen))
        mk = lambda: torch.randint(0, vocab, (int(torch.randint(1, T + 1 - np_, (1,), generator=gen)),), generator=gen).tolist()  # noqa: E731
        prompt = torch.randint(0, vocab, (np_,), generator=gen).tolist()
        i, l = pair_rows(prompt, mk(), mk(), T)
        ids.append(i)
        labels.append(l)
    return torch.tensor(ids), torch.tensor(labels)


def torch_dpo(policy, reference_fn, ids, labels, beta, ls, loss_type, gamma):
    """TRL's loss of a batch [B, 2, T]: one [2B, T] policy forward; reference_fn(ids2, labels2) -> [2B] or None."""
    import torch
    import torch.nn.functional as F
    B, _, T = ids.shape
    ids2, lab2 = ids.reshape(2 * B, T).cuda(), labels.reshape(2 * B, T).cuda()
    pol, count = seq_logps(policy, ids2, lab2)
    with torch.no_grad():
        ref = reference_fn(ids2, lab2) if loss_type != "simpo" else None
    if loss_type in ("ipo", "simpo"):
        pol = pol / count
        ref = ref / count if ref is not None else None
    pol, ref = pol.view(B, 2), (ref.view(B, 2) if ref is not None else None)
    zero = torch.zeros_like(pol[:, 0])
    losses = trl_losses(pol[:, 0], pol[:, 1], ref[:, 0] if ref is not None else zero, ref[:, 1] if ref is not None else zero,
                        beta, ls, loss_type, gamma, logsigmoid=F.logsigmoid)
    loss = losses.mean()
    r = ref if ref is not None else torch.zeros_like(pol)
    rewards = beta * (pol - r).detach()
    return loss, pol.detach(), r, rewards


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def bench_case(args, name, dtype_name, lora, loss_type="sigmoid", ls=0.0, beta=0.1, gamma=0.5, tmp="."):
    import torch
    from safetensors.torch import load_file, save_file
    dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[dtype_name]
    torch.manual_seed(1234)
    policy = llama(LLAMA, dtype)
    base_w = {k: v.detach().contiguous().cpu() for k, v in policy.named_parameters()}
    gen = torch.Generator().manual_seed(99)
    ids, labels = random_batch(gen, 4, 48, LLAMA["vocab_size"])
    paths = {k: os.path.join(tmp, f"{name}-{dtype_name}-{k}") for k in ("w", "rw", "b", "cfg", "out", "adapter")}
    save_file(base_w, paths["w"] + ".safetensors")
    save_file({"input_ids": ids.contiguous(), "labels": labels.contiguous()}, paths["b"] + ".safetensors")
    with open(paths["cfg"] + ".json", "w") as f:
        json.dump({**json.loads(policy.config.to_json_string()), **LLAMA}, f)
    cmd = [args.bench, "dpo", "--config", paths["cfg"] + ".json", "--weights", paths["w"] + ".safetensors",
           "--batch", paths["b"] + ".safetensors", "--dtype", dtype_name, "--device", "cuda", "--loss", loss_type,
           "--beta", str(beta), "--label-smoothing", str(ls), "--simpo-gamma", str(gamma), "--out", paths["out"] + ".safetensors"]
    if lora:
        from peft import LoraConfig, get_peft_model
        model = get_peft_model(policy, LoraConfig(r=8, lora_alpha=16, target_modules=LORA_TARGETS, lora_dropout=0.0,
                                                  bias="none", task_type="CAUSAL_LM"), autocast_adapter_dtype=False)
        with torch.no_grad():
            g = torch.Generator().manual_seed(7)
            for n, p in model.named_parameters():
                if "lora_B" in n:
                    p.copy_((torch.randn(p.shape, generator=g) * 0.05).to(p.dtype))
        model.save_pretrained(paths["adapter"])
        cmd += ["--adapter", paths["adapter"]]

        def reference_fn(i2, l2):
            with model.disable_adapter():
                return seq_logps(model, i2, l2)[0]
        trained = {n: p for n, p in model.named_parameters() if p.requires_grad}
        key = lambda n: "grad." + n.replace("base_model.model.", "", 1).replace(".default.", ".")  # noqa: E731
    else:
        model = policy
        ref = llama(LLAMA, dtype)  # PyTorch holds the reference model, as TRL does
        with torch.no_grad():
            g = torch.Generator().manual_seed(5)
            for n, p in ref.named_parameters():
                p.copy_(base_w[n].to(p.device, torch.float32).add(torch.randn(p.shape, generator=g).to(p.device) * 0.01).to(p.dtype))
        ref.eval()
        save_file({k: v.detach().contiguous().cpu() for k, v in ref.named_parameters()}, paths["rw"] + ".safetensors")
        cmd += ["--ref-weights", paths["rw"] + ".safetensors"]

        def reference_fn(i2, l2):
            return seq_logps(ref, i2, l2)[0]
        trained = dict(model.named_parameters())
        key = lambda n: "grad." + n  # noqa: E731
    rc, out = run(cmd)
    if rc != 0:
        return {"case": name, "dtype": dtype_name, "ok": False, "error": out[-2000:]}
    ours = load_file(paths["out"] + ".safetensors")
    loss, pol, refl, rewards = torch_dpo(model, reference_fn, ids, labels, beta, ls, loss_type, gamma)
    loss.backward()
    res = {"case": name, "dtype": dtype_name, "loss_type": loss_type, "beta": beta, "label_smoothing": ls,
           "loss_torch": float(loss), "loss_leantrain": float(ours["loss"][0])}
    res["loss_rel_err"] = abs(res["loss_leantrain"] - res["loss_torch"]) / max(abs(res["loss_torch"]), 1e-30)
    res["rewards_rel_err"] = max(rel_err(ours["rewards_chosen"].cuda(), rewards[:, 0]),
                                 rel_err(ours["rewards_rejected"].cuda(), rewards[:, 1]))
    res["policy_logps_rel_err"] = rel_err(ours["policy_logps"].cuda(), pol)
    worst, worst_name, missing = 0.0, None, []
    for n, p in trained.items():
        if key(n) not in ours:
            missing.append(n)
            continue
        e = rel_err(ours[key(n)].cuda().reshape(p.shape), p.grad.float())
        if e > worst:
            worst, worst_name = e, n
    res.update(grad_worst_rel_err=worst, grad_worst_param=worst_name, grads_missing=missing, num_trained=len(trained))
    tol = TOLERANCE[dtype_name]
    res["tolerances"] = {"loss_and_rewards": tol[0], "grads": tol[1]}
    res["ok"] = (res["loss_rel_err"] <= tol[0] and res["rewards_rel_err"] <= tol[0] and worst <= tol[1] and not missing)
    return res


def cli_case(args, dtype_name, tmp):
    """leantrain train --objective dpo end to end against TRL's loss on the same tokenized pairs."""
    import torch
    import transformers as tf
    from peft import LoraConfig, get_peft_model
    from tokenizers import Tokenizer
    T, beta = 40, 0.1
    work = os.path.join(tmp, f"cli-{dtype_name}")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    model_dir, adapter = os.path.join(work, "model"), os.path.join(work, "adapter")
    torch.manual_seed(4321)
    cfg = dict(LLAMA, vocab_size=4096)
    base = llama(cfg, torch.float32)
    base.save_pretrained(model_dir, safe_serialization=True)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        if os.path.exists(os.path.join(TOKENIZER_DIR, f)):
            shutil.copy(os.path.join(TOKENIZER_DIR, f), model_dir)
    model = get_peft_model(base, LoraConfig(r=8, lora_alpha=16, target_modules=LORA_TARGETS, lora_dropout=0.0,
                                            bias="none", task_type="CAUSAL_LM"), autocast_adapter_dtype=False)
    with torch.no_grad():
        g = torch.Generator().manual_seed(8)
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.copy_(torch.randn(p.shape, generator=g) * 0.05)
    model.save_pretrained(adapter)
    data = os.path.join(work, "pairs.jsonl")
    with open(data, "w") as f:
        for p, c, r in PAIRS:
            f.write(json.dumps({"prompt": p, "chosen": c, "rejected": r}) + "\n")
    metrics = os.path.join(work, "metrics.jsonl")
    precision = {"f32": "32-true", "bf16": "bf16-true"}[dtype_name]
    rc, out = run([args.leantrain, "train", "--model", model_dir, "--data", data, "--objective", "dpo", "--beta", str(beta),
                   "--lora-rank", "8", "--lora-alpha", "16", "--lora-init", adapter, "--steps", "1", "--lr", "0",
                   "--batch", str(len(PAIRS)), "--seq-len", str(T), "--precision", precision, "--device", "cuda",
                   "--metrics", metrics])
    if rc != 0:
        return {"case": "cli-lora", "dtype": dtype_name, "ok": False, "error": out[-2000:]}
    step = json.loads(open(metrics).readline())
    tok = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    eos_token = json.load(open(os.path.join(model_dir, "tokenizer_config.json")))["eos_token"]
    eos = tok.token_to_id(eos_token if isinstance(eos_token, str) else eos_token["content"])
    encode = lambda s, special: tok.encode(s, add_special_tokens=special).ids  # noqa: E731
    ids, labels = [], []
    for p, c, r in PAIRS:
        i, l = pair_rows(*encode_pair(encode, eos, p, c, r, T), T)
        ids.append(i)
        labels.append(l)
    dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[dtype_name]
    for prm in model.parameters():
        prm.data = prm.data.to(dtype)

    def reference_fn(i2, l2):
        with model.disable_adapter():
            return seq_logps(model, i2, l2)[0]
    loss, pol, ref, _ = torch_dpo(model, reference_fn, torch.tensor(ids), torch.tensor(labels), beta, 0.0, "sigmoid", 0.5)
    want = {"loss": float(loss), **trl_metrics(pol.tolist(), ref.tolist(), beta)}
    tol = TOLERANCE[dtype_name][0]
    res = {"case": "cli-lora", "dtype": dtype_name, "pairs": len(PAIRS), "torch": want,
           "leantrain": {k: step.get(k) for k in want}}
    # Means near zero (a margin) are compared against the rewards' scale instead of their own.
    scale = max(abs(want["rewards/chosen"]), abs(want["rewards/rejected"]), 1e-12)
    errs = {}
    for k, v in want.items():
        got = step.get(k)
        if got is None:
            errs[k] = float("inf")
        elif k == "rewards/accuracies":
            errs[k] = abs(got - v)
        else:
            errs[k] = abs(got - v) / max(abs(v), scale if k.startswith("rewards") else 1e-30)
    res["rel_err"] = errs
    # Accuracies count pairs: in bf16 a near-tie may fall the other way (one pair of the eight).
    acc_tol = 0.0 if dtype_name == "f32" else 1.0 / len(PAIRS)
    res["ok"] = all(e <= (tol if k != "rewards/accuracies" else acc_tol) for k, e in errs.items())
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", default="build-cuda/leantrain_bench")
    ap.add_argument("--leantrain", default="build-cuda/leantrain")
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--dtypes", default="f32,bf16")
    ap.add_argument("--only", default="")
    ap.add_argument("--commit", default="")
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    self_test()
    dtypes = args.dtypes.split(",")
    only = set(args.only.split(",")) if args.only else None
    cases = []
    for d in dtypes:
        cases += [("bench-full", d, dict(lora=False)), ("bench-lora", d, dict(lora=True)),
                  ("bench-full-ls", d, dict(lora=False, ls=0.1)), ("bench-lora-ls", d, dict(lora=True, ls=0.1))]
    if "f32" in dtypes:
        cases += [("bench-ipo", "f32", dict(lora=False, loss_type="ipo", beta=0.5)),
                  ("bench-simpo", "f32", dict(lora=True, loss_type="simpo", beta=2.0, gamma=0.5))]
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, d, kw in cases:
            if only and name not in only:
                continue
            results.append(bench_case(args, name, d, tmp=tmp, **kw))
            print(json.dumps(results[-1]), flush=True)
        for d in dtypes:
            if only and "cli-lora" not in only:
                continue
            results.append(cli_case(args, d, tmp))
            print(json.dumps(results[-1]), flush=True)
    commit = args.commit or subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                           cwd=REPO).stdout.strip()
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, f"dpo-parity-{commit}.json")
    with open(path, "w") as f:
        json.dump({"commit": commit, "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
                   "results": results}, f, indent=1)
    bad = [r["case"] + "/" + r["dtype"] for r in results if not r.get("ok")]
    print(f"dpo parity: {len(results) - len(bad)}/{len(results)} cases ok -> {path}" + (f"; failed: {bad}" if bad else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main() or 0)
