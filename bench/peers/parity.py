#!/usr/bin/env python3
"""Parity with PyTorch on the GPU machine.

LoRA: PEFT's adapter (r 16, alpha 32, all 7 linear names of TinyLlama's shape) against
leantrain_bench parity --adapter: logits, adapter gradients, 50 adapter-only AdamW steps.

For each model (HF GPT2LMHeadModel, LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM,
Gemma3ForCausalLM (text), Qwen3_5ForCausalLM (text) and torchvision
VisionTransformer, small ones and full-size ones) and each dtype (f32, bf16): PyTorch draws random weights and a batch, saves both
as safetensors, leantrain (build-cuda/leantrain_bench parity) loads them and writes its logits,
loss and every parameter gradient, and this script compares them with PyTorch's. Then both run
50 AdamW steps on the same batches and the loss curves are compared.

Usage: python3 bench/peers/parity.py [--bench build-cuda/leantrain_bench] [--out DIR] [--quick] [--commit SHA]
Writes one JSON with every comparison to DIR (default bench/results).
"""
import argparse, json, os, subprocess, sys, tempfile, time

import torch
from safetensors.torch import save_file, load_file


# Relative errors a case may show: logits, worst gradient, and the curve's largest absolute gap.
TOLERANCES = {"f32": (1e-4, 1e-3, 1e-3), "bf16": (3e-2, 6e-2, 5e-2)}


def rel_err(a, b):
    a = a.detach().double(); b = b.detach().double()
    if not torch.isfinite(a).all():
        return float("inf")
    return float((a - b).detach().norm() / b.norm().clamp_min(1e-30))


# A key projection's bias adds q . b_k to every score of a query's row, which the softmax cancels:
# its exact gradient is zero, and what both sides compute is rounding noise, so its error is
# measured against the gradient of the key weight beside it instead of its own (near-zero) norm.
KEY_BIASES = ("attention.self.key.bias", "attention.k_lin.bias")


# The Gated DeltaNet's decay parameters, one per value head: a head whose decay is strong forgets
# its state within a step, so their exact gradient nearly vanishes (1e-10 against 1e-3 for the
# layer's other projections, measured in f64), and what f32 computes there is rounding noise of the
# sums behind it on either side (tests/unit/test_qwen35.cpp's DecayGradientNoiseFloor: leantrain f32
# against its f64 within 1e-4 of their norm wherever it is not tiny, up to 4x its own norm where it
# is). Their error is measured against the larger of their own gradient's norm and 1% of the
# layer's beta projection's (in_proj_b: the same heads' gate, with no decay factor in its gradient).
# The decay's own projection, in_proj_a, gets the same vanishing gradient times per-token factors
# (the same test: 1.2% off in f32 where its norm is 1.4e-4 of in_proj_b's), so it is judged alike.
DECAY_PARAMS = ("linear_attn.A_log", "linear_attn.dt_bias", "linear_attn.in_proj_a.weight")


def grad_err(name, got, want, params):
    if name.endswith(KEY_BIASES):
        w = params[name[:-len("bias")] + "weight"].grad.float()
        return float((got.double() - want.double()).norm() / w.double().norm().clamp_min(1e-30))
    sib = None
    if name.endswith(DECAY_PARAMS):
        sib = params.get(name[:name.rindex("linear_attn.")] + "linear_attn.in_proj_b.weight")
    if sib is not None and sib.grad is not None:
        den = max(float(want.double().norm()), 0.01 * float(sib.grad.double().norm()), 1e-30)
        return float((got.double() - want.double()).norm()) / den
    return rel_err(got, want)


def judge_by_f32_reference(res, tol):
    """A bf16 metric outside the table only counts when leantrain is also farther from f32 arithmetic
    than PyTorch's bf16 is, metric by metric: logits within the table and a gradient that both sides
    get as far from f32 (a bias gradient summed over thousands of tokens) is a pass."""
    fl, fg = res["f32_ref_logits_rel_err"], res["f32_ref_grad_worst_rel_err"]
    logits_ok = res["logits_rel_err"] <= tol[0] or fl["leantrain_bf16"] <= fl["torch_bf16"]
    grads_ok = res["grad_worst_rel_err"] <= tol[1] or fg["leantrain_bf16"] <= fg["torch_bf16"]
    return logits_ok and grads_ok


def gpt2_model(cfg, dtype):
    from transformers import GPT2Config, GPT2LMHeadModel
    c = GPT2Config(n_embd=cfg["n_embd"], n_layer=cfg["n_layer"], n_head=cfg["n_head"],
                   n_positions=cfg["n_positions"], vocab_size=cfg["vocab_size"],
                   resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, activation_function="gelu_new")
    try:
        c._attn_implementation = "eager"
    except Exception:
        pass
    return GPT2LMHeadModel(c).to(device="cuda", dtype=dtype)


TOKEN_KINDS = ("gpt2", "llama")  # "llama" covers every decoder model_type (llama, qwen2, qwen3, mistral, gemma3_text, qwen3_5_text)


def vit_model(cfg, dtype):
    from torchvision.models.vision_transformer import VisionTransformer
    m = VisionTransformer(image_size=cfg["image_size"], patch_size=cfg["patch_size"],
                          num_layers=cfg["num_hidden_layers"], num_heads=cfg["num_attention_heads"],
                          hidden_dim=cfg["hidden_size"], mlp_dim=cfg["intermediate_size"],
                          num_classes=cfg["num_labels"], dropout=0.0, attention_dropout=0.0)
    # torchvision zero-inits the head; give it random weights so its gradients carry information.
    with torch.no_grad():
        m.heads.head.weight.normal_(0, 0.02)
    return m.to(device="cuda", dtype=dtype)


def llama_model(cfg, dtype):
    import transformers as tf
    # model_type -> (config class, model class): every family leantrain reads as "llama".
    classes = {"llama": ("LlamaConfig", "LlamaForCausalLM"), "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"),
               "qwen3": ("Qwen3Config", "Qwen3ForCausalLM"), "mistral": ("MistralConfig", "MistralForCausalLM"),
               "gemma3_text": ("Gemma3TextConfig", "Gemma3ForCausalLM"),
               "qwen3_moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM"), "mixtral": ("MixtralConfig", "MixtralForCausalLM"),
               "qwen3_5_text": ("Qwen3_5TextConfig", "Qwen3_5ForCausalLM")}
    conf_cls, model_cls = (getattr(tf, n) for n in classes[cfg["model_type"]])
    keys = {k: v for k, v in cfg.items() if k not in ("batch", "seq", "model_type")}
    c = conf_cls(**keys, attention_dropout=0.0)
    try:
        c._attn_implementation = "eager"
    except Exception:
        pass
    # Experts as transformers' reference loop (index_add_ per expert, which leantrain's combine
    # follows): the grouped_mm default needs 16-byte strides, which the odd bf16 shapes do not have.
    if cfg["model_type"] in ("qwen3_moe", "mixtral"):
        c._experts_implementation = "eager"
    m = model_cls(c)
    # Zero-initialised biases and ones-initialised norms get random values, so that their
    # gradients carry information and a misapplied bias or norm shows. Gemma's and Qwen3.5's norms
    # scale by (1 + w) and initialise w to zeros: random around 0 there (but Qwen3.5's gated norm of
    # the Gated DeltaNet, linear_attn.norm, scales by w: around 1). The DeltaNet's A_log (log-uniform)
    # and dt_bias (ones, made random here) and its convolution keep transformers' init otherwise.
    unit_offset_norms = cfg["model_type"] in ("gemma3_text", "qwen3_5_text")
    with torch.no_grad():
        for n, p in m.named_parameters():
            if n.endswith(".bias"):
                p.normal_(0, 0.02)
            elif n.endswith("linear_attn.norm.weight") or n.endswith("dt_bias"):
                p.normal_(1, 0.1)
            elif "norm" in n:
                p.normal_(0 if unit_offset_norms else 1, 0.1)
            elif n.endswith(".mlp.gate.weight"):
                # MoE routers: logits spread wide, so that no token's top-k is a near-tie that the
                # two sides' GEMM rounding could break differently (in bf16 above all).
                p.normal_(0, 0.5)
    m = m.to(device="cuda")
    # Parameters only: model.to(dtype) would also round the rotary inv_freq buffer to bf16
    # (transformers' from_pretrained(torch_dtype=...) keeps it f32, as leantrain does).
    for p in m.parameters():
        p.data = p.data.to(dtype)
    return m


ENCODER_KINDS = ("bert", "roberta", "distilbert", "big_bird")  # *ForSequenceClassification, batches right-padded


def encoder_model(cfg, dtype):
    import transformers as tf
    kind = cfg["model_type"]
    cls = {"bert": (tf.BertConfig, tf.BertForSequenceClassification),
           "roberta": (tf.RobertaConfig, tf.RobertaForSequenceClassification),
           "distilbert": (tf.DistilBertConfig, tf.DistilBertForSequenceClassification),
           "big_bird": (tf.BigBirdConfig, tf.BigBirdForSequenceClassification)}[kind]
    keys = {k: v for k, v in cfg.items() if k not in ("batch", "seq", "model_type", "eval")}
    if kind == "distilbert":
        keys.update(dropout=0.0, attention_dropout=0.0, seq_classif_dropout=0.0)
    else:
        keys.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    c = cls[0](**keys)
    try:
        c._attn_implementation = "eager"
    except Exception:
        pass
    m = cls[1](c)
    if cfg.get("eval"):  # BigBird block_sparse: eval mode has no random blocks (all block 0), so both sides agree
        m.eval()
    with torch.no_grad():  # random biases and norms, so that a misapplied one shows
        for n, p in m.named_parameters():
            if n.endswith(".bias"):
                p.normal_(0, 0.02)
            elif "LayerNorm" in n or "layer_norm" in n:
                p.normal_(1, 0.1)
    return m.to(device="cuda", dtype=dtype)


def make_model(kind, cfg, dtype):
    if kind in ENCODER_KINDS:
        return encoder_model(dict(cfg, model_type=kind), dtype)
    return {"gpt2": gpt2_model, "llama": llama_model, "vit": vit_model}[kind](cfg, dtype)


def batches(kind, cfg, n, b, gen):
    if kind in ENCODER_KINDS:  # row r of a batch ends in r * T / (2 b) pads (row 0 none); no real token is the pad
        T, pad = cfg["seq"], cfg["pad_token_id"]
        ids = torch.randint(0, cfg["vocab_size"] - 1, (n, b, T), generator=gen)
        ids = ids + (ids >= pad).long()
        for r in range(b):
            k = r * T // (2 * b)
            if k:
                ids[:, r, T - k:] = pad
        return {"input_ids": ids, "labels": torch.randint(0, cfg["num_labels"], (n, b), generator=gen)}
    if kind in TOKEN_KINDS:
        T = cfg["seq"]
        ids = torch.randint(0, cfg["vocab_size"], (n, b, T + 1), generator=gen)
        return {"input_ids": ids[..., :-1].clone(), "labels": ids[..., 1:].clone()}  # clone: never views of one buffer
    C, H = 3, cfg["image_size"]
    return {"images": torch.randn(n, b, C, H, H, generator=gen),
            "labels": torch.randint(0, cfg["num_labels"], (n, b), generator=gen)}


def torch_loss(kind, model, batch, i, dtype):
    if kind in ENCODER_KINDS:
        ids = batch["input_ids"][i].cuda()
        logits = model(input_ids=ids, attention_mask=(ids != model.config.pad_token_id).long()).logits
        return logits, torch.nn.functional.cross_entropy(logits.float(), batch["labels"][i].cuda())
    if kind in TOKEN_KINDS:
        # MoE models with output_router_logits: the load-balancing loss as transformers adds it to a
        # loss with labels (router_aux_loss_coef * aux_loss); labels here are already shifted, so the
        # cross-entropy is ours and the aux loss transformers' own.
        cfg = getattr(model, "config", None)
        aux = bool(getattr(cfg, "output_router_logits", False))
        out = model(input_ids=batch["input_ids"][i].cuda(), output_router_logits=True) if aux else \
            model(input_ids=batch["input_ids"][i].cuda())
        logits = out.logits
        loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]),
                                                 batch["labels"][i].cuda().reshape(-1))
        if aux:
            loss = loss + cfg.router_aux_loss_coef * out.aux_loss.float()
    else:
        logits = model(batch["images"][i].cuda().to(dtype))
        loss = torch.nn.functional.cross_entropy(logits.float(), batch["labels"][i].cuda())
    return logits, loss


def run_case(args, name, kind, cfg, dtype_name, steps, lr, tmp):
    dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[dtype_name]
    tol = TOLERANCES[dtype_name]
    torch.manual_seed(1234)
    model = make_model(kind, cfg, dtype)
    params = {k: v for k, v in model.named_parameters()}
    weights = {k: v.detach().contiguous().cpu() for k, v in params.items()}
    gen = torch.Generator().manual_seed(99)
    b = cfg["batch"]
    data = batches(kind, cfg, max(steps, 1), b, gen)
    paths = {k: os.path.join(tmp, f"{name}-{dtype_name}-{k}") for k in ("w", "b", "cfg", "out")}
    save_file(weights, paths["w"] + ".safetensors")
    save_file(data, paths["b"] + ".safetensors")
    with open(paths["cfg"] + ".json", "w") as f:
        keys = {k: v for k, v in cfg.items() if k not in ("batch", "seq", "eval")}
        if kind == "llama" or kind in ENCODER_KINDS:  # every field transformers writes, defaults included: a real config.json's keys
            keys = {**json.loads(model.config.to_json_string()), **keys}
        json.dump(keys, f)
    cmd = [args.bench, "parity", "--kind", kind, "--config", paths["cfg"] + ".json",
           "--weights", paths["w"] + ".safetensors", "--batches", paths["b"] + ".safetensors",
           "--dtype", dtype_name, "--device", args.leantrain_device, "--steps", str(steps), "--lr", str(lr),
           "--out", paths["out"] + ".safetensors"]
    if args.dump_step:
        cmd += ["--dump-step", str(args.dump_step)]
    t0 = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    lt_time = time.time() - t0
    if proc.returncode != 0:
        return {"case": name, "dtype": dtype_name, "ok": False, "error": (proc.stderr or proc.stdout)[-2000:]}
    ours = load_file(paths["out"] + ".safetensors")

    # PyTorch: forward/backward on batch 0.
    logits, loss = torch_loss(kind, model, data, 0, dtype)
    loss.backward()
    res = {"case": name, "dtype": dtype_name, "leantrain_seconds": round(lt_time, 2)}
    res["logits_rel_err"] = rel_err(ours["logits"].float().reshape(logits.shape).cuda(), logits.float())
    res["loss_torch"] = float(loss)
    res["loss_leantrain"] = float(ours["loss"].reshape(-1)[0])
    worst, worst_name, missing = 0.0, None, []
    for k, p in params.items():
        key = "grad." + k
        if p.grad is None:  # no path from the loss (BigBird's pooler, which leantrain does not build)
            continue
        if key not in ours:
            missing.append(k)
            continue
        e = grad_err(k, ours[key].float().reshape(p.shape).cuda(), p.grad.float(), params)
        if e > worst:
            worst, worst_name = e, k
    res["grad_worst_rel_err"] = worst
    res["grad_worst_param"] = worst_name
    res["grads_missing"] = missing
    res["num_params"] = len(params)

    # Gradients apart by more than the table: which side is nearer exact arithmetic? leantrain's
    # model in f64 on the CPU answers (its chunked delta rule and every other op equal their
    # token-by-token f64 references to 1e-10 there, tests/unit/test_qwen35.cpp): transformers'
    # chunked delta rule computes in f32 whatever the model's dtype, so it has no f64 of its own.
    small = sum(p.numel() for p in params.values()) < 50_000_000  # the CPU's f64 run stays short
    if worst > tol[1] and args.f64_arbiter and kind == "llama" and small:
        w64 = paths["w"] + "-f64.safetensors"
        save_file({k: v.double() for k, v in weights.items()}, w64)
        out64 = paths["out"] + "-f64.safetensors"
        cmd64 = list(cmd)
        for flag, value in (("--dtype", "f64"), ("--device", "cpu"), ("--steps", "0"), ("--weights", w64),
                            ("--out", out64)):
            cmd64[cmd64.index(flag) + 1] = value
        proc64 = subprocess.run(cmd64, capture_output=True, text=True)
        if proc64.returncode == 0:
            exact = load_file(out64)
            wt, wo, wname = 0.0, 0.0, None
            for k, p in params.items():
                if p.grad is None or "grad." + k not in exact:
                    continue
                ref = exact["grad." + k].double().reshape(p.shape)
                et = rel_err(p.grad.float().cpu(), ref)
                eo = rel_err(ours["grad." + k].double().reshape(p.shape), ref)
                wt = max(wt, et)
                if eo > wo:
                    wo, wname = eo, k
            res["f64_ref_grad_worst_rel_err"] = {"torch": wt, "leantrain": wo, "leantrain_worst_param": wname}
        else:
            res["f64_ref_error"] = (proc64.stderr or proc64.stdout)[-500:]

    # bf16: how far each side is from f32 arithmetic on the same (bf16) weights and batch. Deep
    # models drift apart in bf16 whoever rounds differently; the f32 run says which side is closer.
    if dtype_name == "bf16" and args.f32_reference:
        torch_grads = {k: p.grad.float() for k, p in params.items() if p.grad is not None}
        torch_logits = logits.float()
        del model, params, logits, loss
        torch.cuda.empty_cache()
        ref = make_model(kind, cfg, torch.float32)
        ref.load_state_dict({k: v.float().cuda() for k, v in weights.items()}, strict=False)
        rlogits, rloss = torch_loss(kind, ref, data, 0, torch.float32)
        rloss.backward()
        rparams = dict(ref.named_parameters())
        ours_logits = ours["logits"].float().reshape(rlogits.shape).cuda()
        res["f32_ref_logits_rel_err"] = {"torch_bf16": rel_err(torch_logits, rlogits), "leantrain_bf16": rel_err(ours_logits, rlogits)}
        wt, wo = 0.0, 0.0
        for k, p in rparams.items():
            if "grad." + k not in ours or p.grad is None:
                continue
            wt = max(wt, grad_err(k, torch_grads[k], p.grad.float(), rparams))
            wo = max(wo, grad_err(k, ours["grad." + k].float().reshape(p.shape).cuda(), p.grad.float(), rparams))
        res["f32_ref_grad_worst_rel_err"] = {"torch_bf16": wt, "leantrain_bf16": wo}
        del ref, rparams, rlogits, rloss
        torch.cuda.empty_cache()

    # 50 AdamW steps on the same batches.
    if steps > 0:
        torch.manual_seed(1234)
        model = make_model(kind, cfg, dtype)
        model.load_state_dict({k: v.cuda() for k, v in weights.items()}, strict=False)
        opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
        curve = []
        for i in range(steps):
            opt.zero_grad(set_to_none=True)
            _, l = torch_loss(kind, model, data, i, dtype)
            l.backward()
            if i + 1 == args.dump_step:  # step K-1's gradients, then the parameters after K steps
                res["dump_grad_rel_err"] = worst_rel(model, ours, "stepgrad.", lambda p: p.grad)
            opt.step()
            curve.append(float(l))
            if i + 1 == args.dump_step:
                res["dump_param_rel_err"] = worst_rel(model, ours, "param.", lambda p: p.detach())
        ours_curve = [float(x) for x in ours["losses"].reshape(-1)]
        res["curve_torch"] = curve
        res["curve_leantrain"] = ours_curve
        res["curve_max_abs_diff"] = max(abs(a - b) for a, b in zip(curve, ours_curve)) if ours_curve else None
    res["tolerances"] = {"logits": tol[0], "grads": tol[1], "curve_abs": tol[2]}
    close = res["logits_rel_err"] <= tol[0] and res["grad_worst_rel_err"] <= tol[1]
    if not close and "f32_ref_logits_rel_err" in res:
        close = judge_by_f32_reference(res, tol)
        res["ok_by_f32_reference"] = close
    if not close and "f64_ref_grad_worst_rel_err" in res:
        # Gradients that both sides get only so near exact arithmetic (in the dtype of the run): a pass
        # when leantrain's are within the table of the f64 result, or nearer it than PyTorch's.
        f64, fl = res["f64_ref_grad_worst_rel_err"], res.get("f32_ref_logits_rel_err")
        logits_ok = res["logits_rel_err"] <= tol[0] or (fl is not None and fl["leantrain_bf16"] <= fl["torch_bf16"])
        close = logits_ok and (f64["leantrain"] <= tol[1] or f64["leantrain"] <= f64["torch"])
        res["ok_by_f64_reference"] = close
    res["ok"] = (close and not missing and
                 (steps == 0 or (res["curve_max_abs_diff"] is not None and res["curve_max_abs_diff"] <= tol[2])))
    return res


def worst_rel(model, ours, prefix, get):
    """The five parameters whose tensors (get(p)) differ most from leantrain's (prefix + name), relative."""
    errs = []
    for k, p in model.named_parameters():
        t = get(p)
        if t is None or prefix + k not in ours:
            continue
        o = ours[prefix + k].float().reshape(p.shape).cuda()
        errs.append((rel_err(o, t.float()), k))
    return sorted(errs, reverse=True)[:5]


def gemma3_rope_keys(theta, local_theta, full_scaling):
    """Gemma 3's two RoPE bases as the installed transformers reads them: rope_parameters per layer type
    (transformers 5) or rope_theta + rope_local_base_freq + rope_scaling (4.5x). leantrain reads both."""
    import transformers as tf
    if int(tf.__version__.split(".")[0]) >= 5:
        full = dict(rope_type="default", rope_theta=theta)
        if full_scaling:
            full.update(full_scaling, rope_theta=theta)
        return dict(rope_parameters={"full_attention": full,
                                     "sliding_attention": dict(rope_type="default", rope_theta=local_theta)})
    return dict(rope_theta=theta, rope_local_base_freq=local_theta, rope_scaling=full_scaling)


LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def run_lora_case(args, name, cfg, dtype_name, steps, lr, tmp):
    """LoRA on a frozen base, PEFT against leantrain (issue 15): PEFT writes its adapter
    (save_pretrained: adapter_config.json + adapter_model.safetensors, B drawn non-zero so the
    update shows), leantrain_bench parity --adapter reads that directory; logits, loss and every
    adapter gradient are compared, then `steps` AdamW steps on the adapters only."""
    from peft import LoraConfig, get_peft_model
    dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[dtype_name]
    torch.manual_seed(1234)
    base = make_model("llama", {k: v for k, v in cfg.items() if not k.startswith("lora_")}, dtype)
    weights = {k: v.detach().contiguous().cpu() for k, v in base.named_parameters()}
    lcfg = LoraConfig(r=cfg["lora_r"], lora_alpha=cfg["lora_alpha"], target_modules=LORA_TARGETS, lora_dropout=0.0,
                      bias="none", task_type="CAUSAL_LM")
    # autocast_adapter_dtype=False: adapters in the base's dtype on both sides (PEFT's default
    # upcasts bf16 adapters to f32; leantrain keeps them in the run's parameter dtype).
    model = get_peft_model(base, lcfg, autocast_adapter_dtype=False)
    with torch.no_grad():
        g = torch.Generator(device="cpu").manual_seed(7)
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.copy_((torch.randn(p.shape, generator=g) * 0.02).to(p.dtype))
    adapter_dir = os.path.join(tmp, f"{name}-{dtype_name}-adapter")
    model.save_pretrained(adapter_dir)
    start = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    gen = torch.Generator().manual_seed(99)
    data = batches("llama", cfg, max(steps, 1), cfg["batch"], gen)
    paths = {k: os.path.join(tmp, f"{name}-{dtype_name}-{k}") for k in ("w", "b", "cfg", "out")}
    save_file(weights, paths["w"] + ".safetensors")
    save_file(data, paths["b"] + ".safetensors")
    keys = {k: v for k, v in cfg.items() if k not in ("batch", "seq", "lora_r", "lora_alpha")}
    with open(paths["cfg"] + ".json", "w") as f:
        json.dump({**json.loads(base.config.to_json_string()), **keys}, f)
    cmd = [args.bench, "parity", "--kind", "llama", "--config", paths["cfg"] + ".json",
           "--weights", paths["w"] + ".safetensors", "--batches", paths["b"] + ".safetensors",
           "--dtype", dtype_name, "--device", args.leantrain_device, "--steps", str(steps), "--lr", str(lr),
           "--adapter", adapter_dir, "--out", paths["out"] + ".safetensors"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        return {"case": name, "dtype": dtype_name, "ok": False, "error": (proc.stderr or proc.stdout)[-2000:]}
    ours = load_file(paths["out"] + ".safetensors")
    logits, loss = torch_loss("llama", model, data, 0, dtype)
    loss.backward()
    res = {"case": name, "dtype": dtype_name, "lora": {"r": cfg["lora_r"], "alpha": cfg["lora_alpha"],
                                                        "targets": LORA_TARGETS, "adapter_dtype": dtype_name}}
    res["logits_rel_err"] = rel_err(ours["logits"].float().reshape(logits.shape).cuda(), logits.float())
    res["loss_torch"], res["loss_leantrain"] = float(loss), float(ours["loss"].reshape(-1)[0])
    worst, worst_name, missing, count = 0.0, None, [], 0
    for n, p in model.named_parameters():
        if not p.requires_grad:
            continue
        count += 1
        # PEFT: base_model.model.<path>.lora_A.default.weight; leantrain: <path>.lora_A.weight
        key = "grad." + n.replace("base_model.model.", "", 1).replace(".default.", ".")
        if key not in ours:
            missing.append(n)
            continue
        e = rel_err(ours[key].float().reshape(p.shape).cuda(), p.grad.float())
        if e > worst:
            worst, worst_name = e, n
    extra = [k for k in ours if k.startswith("grad.") and ".lora_" not in k]
    res.update(grad_worst_rel_err=worst, grad_worst_param=worst_name, grads_missing=missing,
               grads_of_frozen_params=extra, num_adapter_params=count)
    # bf16: as run_case, how far each side is from f32 arithmetic on the same weights, adapter and
    # batch (PEFT's adapter directory loaded onto an f32 copy of the base).
    if dtype_name == "bf16" and args.f32_reference:
        from peft import PeftModel
        torch_grads = {n: p.grad.float() for n, p in model.named_parameters() if p.requires_grad}
        torch_logits = logits.float()
        ref_base = make_model("llama", {k: v for k, v in cfg.items() if not k.startswith("lora_")}, torch.float32)
        ref_base.load_state_dict({k: v.float().cuda() for k, v in weights.items()}, strict=False)
        ref = PeftModel.from_pretrained(ref_base, adapter_dir, is_trainable=True).float()
        rlogits, rloss = torch_loss("llama", ref, data, 0, torch.float32)
        rloss.backward()
        wt, wo = 0.0, 0.0
        for n, p in ref.named_parameters():
            key = "grad." + n.replace("base_model.model.", "", 1).replace(".default.", ".")
            if not p.requires_grad or n not in torch_grads or key not in ours:
                continue
            wt = max(wt, rel_err(torch_grads[n], p.grad.float()))
            wo = max(wo, rel_err(ours[key].float().reshape(p.shape).cuda(), p.grad.float()))
        res["f32_ref_logits_rel_err"] = {"torch_bf16": rel_err(torch_logits, rlogits.float()),
                                         "leantrain_bf16": rel_err(ours["logits"].float().reshape(rlogits.shape).cuda(),
                                                                   rlogits.float())}
        res["f32_ref_grad_worst_rel_err"] = {"torch_bf16": wt, "leantrain_bf16": wo}
        del ref, ref_base, rlogits, rloss
        torch.cuda.empty_cache()
    if steps > 0:
        with torch.no_grad():
            for n, p in model.named_parameters():
                if p.requires_grad:
                    p.copy_(start[n])
        trainable = [p for p in model.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(trainable, lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
        curve = []
        for i in range(steps):
            opt.zero_grad(set_to_none=True)
            _, l = torch_loss("llama", model, data, i, dtype)
            l.backward()
            opt.step()
            curve.append(float(l))
        ours_curve = [float(x) for x in ours["losses"].reshape(-1)]
        res.update(curve_torch=curve, curve_leantrain=ours_curve,
                   curve_max_abs_diff=max(abs(a - b) for a, b in zip(curve, ours_curve)) if ours_curve else None)
    tol = TOLERANCES[dtype_name]
    res["tolerances"] = {"logits": tol[0], "grads": tol[1], "curve_abs": tol[2]}
    close = res["logits_rel_err"] <= tol[0] and worst <= tol[1]
    if not close and "f32_ref_logits_rel_err" in res:
        # Outside the table only counts when leantrain is also farther from f32 than PyTorch's bf16 is.
        fl, fg = res["f32_ref_logits_rel_err"], res["f32_ref_grad_worst_rel_err"]
        close = fl["leantrain_bf16"] <= fl["torch_bf16"] and fg["leantrain_bf16"] <= fg["torch_bf16"]
        res["ok_by_f32_reference"] = close
    res["ok"] = (close and not missing and not extra and
                 (steps == 0 or (res.get("curve_max_abs_diff") is not None and res["curve_max_abs_diff"] <= tol[2])))
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", default="build-cuda/leantrain_bench")
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--quick", action="store_true", help="small models only")
    ap.add_argument("--only", default="", help="comma-separated case names (default: all)")
    ap.add_argument("--dtypes", default="f32,bf16")
    ap.add_argument("--dump-step", type=int, default=0,
                    help="K > 0: also compare every parameter after K AdamW steps and the gradients of step K "
                         "(the five worst, relative), to find where a curve leaves PyTorch's")
    ap.add_argument("--commit", default="",
                    help="the binaries' commit, for the output's name and its 'commit' field (default: this "
                         "checkout's HEAD, which on the GPU machine may not be the commit the carried binaries "
                         "were built from)")
    ap.add_argument("--leantrain-device", default="cuda",
                    help="where leantrain's side runs (cpu: its reference kernels against transformers on the GPU)")
    ap.add_argument("--no-f64-arbiter", dest="f64_arbiter", action="store_false",
                    help="gradients outside the table: skip the f64 run of leantrain on the CPU that says which side is nearer exact")
    ap.add_argument("--no-f32-reference", dest="f32_reference", action="store_false",
                    help="bf16 cases: skip the f32 run that says which side is closer to f32 arithmetic")
    args = ap.parse_args()
    # Full f32 on the PyTorch side: its cuDNN convolutions and matmuls may otherwise use TF32.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    cases = [
        ("gpt2-small", "gpt2", dict(n_embd=128, n_layer=2, n_head=4, n_positions=128, vocab_size=512, batch=4, seq=64), 50),
        ("vit-small", "vit", dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                                  image_size=32, patch_size=8, num_labels=10, layer_norm_eps=1e-6, batch=8), 50),
    ]
    # LLaMA family: the acceptance shapes of issue 12 (GQA 4/2 at T 77; Qwen2 with q/k/v biases;
    # llama3 RoPE scaling with head dim 128 at T 300, original length 256 so every band is used).
    llama_small = dict(model_type="llama", vocab_size=512, hidden_size=64, intermediate_size=176, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-5,
                       rope_theta=10000.0, tie_word_embeddings=False, batch=4, seq=77)
    cases += [
        ("llama-small", "llama", llama_small, 50),
        ("qwen2-small", "llama", dict(llama_small, model_type="qwen2", rope_theta=1e6, rms_norm_eps=1e-6,
                                      tie_word_embeddings=True), 50),
        ("llama3-rope-d128", "llama", dict(llama_small, hidden_size=256, intermediate_size=512, num_attention_heads=2,
                                           num_key_value_heads=1, head_dim=128, max_position_embeddings=1024,
                                           rope_theta=500000.0, batch=2, seq=300,
                                           rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                                                             high_freq_factor=4.0,
                                                             original_max_position_embeddings=256)), 20),
    ]
    # Qwen3 (issue 44): q_norm / k_norm, head_dim 24 over width 40 (q is 120 wide, not the width), 5 query
    # heads on 1 key/value head, T 77; tied, then untied with attention_bias on q, k, v and o.
    qwen3_small = dict(model_type="qwen3", vocab_size=509, hidden_size=40, intermediate_size=88, num_hidden_layers=2,
                       num_attention_heads=5, num_key_value_heads=1, head_dim=24, max_position_embeddings=256,
                       rms_norm_eps=1e-6, rope_theta=1e6, tie_word_embeddings=True, use_sliding_window=False,
                       batch=3, seq=77)
    cases += [
        ("qwen3-small", "llama", qwen3_small, 50),
        ("qwen3-small-bias-untied", "llama", dict(qwen3_small, attention_bias=True, tie_word_embeddings=False), 50),
        # use_sliding_window: layer 1 (from max_window_layers 1 on) attends to 16 keys at T 77.
        ("qwen3-small-window", "llama", dict(qwen3_small, use_sliding_window=True, sliding_window=16,
                                             max_window_layers=1), 50),
        # Mistral's sliding_window on every layer, shorter than T.
        ("mistral-small-window", "llama", dict(llama_small, model_type="mistral", sliding_window=16), 50),
    ]
    # Gemma 3 text (issue 44): (1 + w) norms in f32, four norms a layer, GeGLU (gelu_pytorch_tanh), the
    # embedding scaled by sqrt(hidden), query_pre_attn_scalar, q/k norms, layer_types sliding/full with a
    # window (9) shorter than T (77) and the sliding layers' own RoPE base, linear rope_scaling on the full
    # layers, final_logit_softcapping; tied head. rope_theta / rope_local_base_freq (transformers 4.5x); a
    # transformers 5 build reads them from rope_parameters instead (see gemma3_rope_keys).
    gemma3_small = dict(model_type="gemma3_text", vocab_size=515, hidden_size=48, intermediate_size=72,
                        num_hidden_layers=3, num_attention_heads=3, num_key_value_heads=1, head_dim=32,
                        query_pre_attn_scalar=24, max_position_embeddings=256, rms_norm_eps=1e-6,
                        sliding_window=9, layer_types=["sliding_attention", "sliding_attention", "full_attention"],
                        hidden_activation="gelu_pytorch_tanh", final_logit_softcapping=None,
                        attn_logit_softcapping=None, tie_word_embeddings=True, batch=3, seq=77,
                        **gemma3_rope_keys(1e6, 1e4, dict(rope_type="linear", factor=8.0)))
    cases += [
        # The window covers T: every other part of Gemma 3 apart from the window.
        ("gemma3-small-window-covers-t", "llama", dict(gemma3_small, sliding_window=128), 50),
        ("gemma3-small", "llama", gemma3_small, 50),
        ("gemma3-small-softcap", "llama", dict(gemma3_small, sliding_window=128, final_logit_softcapping=30.0), 50),
    ]
    # Mixture of experts (issue 45), with the load-balancing loss on: Qwen3-MoE (q/k norms, head_dim 24
    # over width 40, 7 experts of 20, top 3 renormalised, layer 1 dense (mlp_only_layers), untied) and
    # Mixtral (5 experts of 36, top 2, grouped queries); odd sizes throughout, T 77.
    qwen3_moe_small = dict(model_type="qwen3_moe", vocab_size=509, hidden_size=40, intermediate_size=88,
                           moe_intermediate_size=20, num_hidden_layers=3, num_attention_heads=5, num_key_value_heads=1,
                           head_dim=24, num_experts=7, num_experts_per_tok=3, norm_topk_prob=True, mlp_only_layers=[1],
                           decoder_sparse_step=1, output_router_logits=True, router_aux_loss_coef=0.01,
                           max_position_embeddings=256, rms_norm_eps=1e-6, rope_theta=1e6, tie_word_embeddings=False,
                           use_sliding_window=False, batch=3, seq=77)
    mixtral_small = dict(model_type="mixtral", vocab_size=511, hidden_size=48, intermediate_size=36, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, num_local_experts=5, num_experts_per_tok=2,
                         output_router_logits=True, router_aux_loss_coef=0.02, router_jitter_noise=0.0,
                         max_position_embeddings=256, rms_norm_eps=1e-5, rope_theta=1e6, sliding_window=None,
                         tie_word_embeddings=False, batch=3, seq=77)
    cases += [
        ("qwen3-moe-small", "llama", qwen3_moe_small, 50),
        # norm_topk_prob off (the weights are the raw top-k probabilities) and no aux loss.
        ("qwen3-moe-small-plain", "llama", dict(qwen3_moe_small, norm_topk_prob=False, output_router_logits=False,
                                                mlp_only_layers=[]), 50),
        ("mixtral-small", "llama", mixtral_small, 50),
    ]
    # Qwen3.5 text (issue 44): both layer kinds (Gated DeltaNet and gated attention with (1 + w) q/k norms
    # and partial rotary: 8 of 32 dims), T 77 (a chunk of 64 and one of 13), DeltaNet 2 key heads of 16
    # on 4 value heads of 12 (grouped), a 4-tap convolution; tied. Then untied at T 130 with value heads
    # equal to key heads and an attention layer first.
    qwen35_small = dict(model_type="qwen3_5_text", vocab_size=509, hidden_size=48, intermediate_size=88,
                        num_hidden_layers=4, num_attention_heads=3, num_key_value_heads=1, head_dim=32,
                        layer_types=["linear_attention", "linear_attention", "full_attention", "linear_attention"],
                        linear_num_key_heads=2, linear_key_head_dim=16, linear_num_value_heads=4,
                        linear_value_head_dim=12, linear_conv_kernel_dim=4, max_position_embeddings=512,
                        rms_norm_eps=1e-6, rope_parameters=dict(rope_type="default", rope_theta=1e6,
                                                                partial_rotary_factor=0.25),
                        tie_word_embeddings=True, batch=3, seq=77)
    cases += [
        ("qwen3_5-small", "llama", qwen35_small, 50),
        ("qwen3_5-small-untied-t130", "llama",
         dict(qwen35_small, num_hidden_layers=3, layer_types=["full_attention", "linear_attention", "linear_attention"],
              linear_num_value_heads=2, tie_word_embeddings=False, batch=2, seq=130), 50),
    ]
    # BERT family (issue 17): padded batches, every family's head; hidden_act gelu (erf).
    enc_small = dict(vocab_size=500, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                     max_position_embeddings=96, num_labels=3, batch=4, seq=77)
    cases += [
        ("bert-small", "bert", dict(enc_small, pad_token_id=0), 50),
        ("roberta-small", "roberta", dict(enc_small, pad_token_id=1, type_vocab_size=1, layer_norm_eps=1e-5), 50),
        ("distilbert-small", "distilbert", dict(vocab_size=500, dim=64, n_layers=2, n_heads=4, hidden_dim=128,
                                                max_position_embeddings=96, num_labels=3, pad_token_id=0, batch=4,
                                                seq=77), 50),
        # BigBird: full attention in training mode; block-sparse (blocks of 16, one random block,
        # 200 positions padded to 13 blocks) in eval mode, where transformers' random blocks are fixed.
        ("bigbird-full-small", "big_bird", dict(enc_small, pad_token_id=0, hidden_act="gelu_new",
                                                attention_type="original_full"), 50),
        ("bigbird-sparse-small", "big_bird", dict(enc_small, pad_token_id=0, hidden_act="gelu_new",
                                                  attention_type="block_sparse", block_size=16, num_random_blocks=1,
                                                  max_position_embeddings=256, seq=200, eval=True), 50),
    ]
    if not args.quick:
        cases += [
            ("bert-base", "bert", dict(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                                       intermediate_size=3072, max_position_embeddings=512, num_labels=2,
                                       pad_token_id=0, batch=4, seq=128), 0),
            ("distilbert-base", "distilbert", dict(vocab_size=30522, dim=768, n_layers=6, n_heads=12, hidden_dim=3072,
                                                   max_position_embeddings=512, num_labels=2, pad_token_id=0, batch=4,
                                                   seq=512), 0),
            ("bigbird-base-sparse", "big_bird", dict(vocab_size=50358, hidden_size=768, num_hidden_layers=12,
                                                     num_attention_heads=12, intermediate_size=3072,
                                                     max_position_embeddings=4096, num_labels=2, pad_token_id=0,
                                                     hidden_act="gelu_new", attention_type="block_sparse",
                                                     block_size=64, num_random_blocks=3, batch=2, seq=1000,
                                                     eval=True), 0),
            ("smollm2-135m", "llama", dict(model_type="llama", vocab_size=49152, hidden_size=576, intermediate_size=1536,
                                           num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
                                           max_position_embeddings=8192, rms_norm_eps=1e-5, rope_theta=100000.0,
                                           tie_word_embeddings=True, batch=2, seq=256), 0),
            ("tinyllama-1.1b", "llama", dict(model_type="llama", vocab_size=32000, hidden_size=2048,
                                             intermediate_size=5632, num_hidden_layers=22, num_attention_heads=32,
                                             num_key_value_heads=4, max_position_embeddings=2048, rms_norm_eps=1e-5,
                                             rope_theta=10000.0, tie_word_embeddings=False, batch=1, seq=128,
                                             dtypes=("bf16",)), 0),
            # Real-size bf16 shapes of issue 44 (random init): Qwen3-1.7B and Gemma-3-1B (window 512 < T 1024).
            ("qwen3-1.7b", "llama", dict(model_type="qwen3", vocab_size=151936, hidden_size=2048,
                                         intermediate_size=6144, num_hidden_layers=28, num_attention_heads=16,
                                         num_key_value_heads=8, head_dim=128, max_position_embeddings=40960,
                                         rms_norm_eps=1e-6, rope_theta=1e6, tie_word_embeddings=True,
                                         use_sliding_window=False, batch=1, seq=256, dtypes=("bf16",)), 0),
            ("gemma3-1b", "llama", dict(model_type="gemma3_text", vocab_size=262144, hidden_size=1152,
                                        intermediate_size=6912, num_hidden_layers=26, num_attention_heads=4,
                                        num_key_value_heads=1, head_dim=256, query_pre_attn_scalar=256,
                                        max_position_embeddings=32768, rms_norm_eps=1e-6, sliding_window=512,
                                        layer_types=[("full_attention" if (i + 1) % 6 == 0 else "sliding_attention")
                                                     for i in range(26)],
                                        hidden_activation="gelu_pytorch_tanh", final_logit_softcapping=None,
                                        attn_logit_softcapping=None, tie_word_embeddings=True, batch=1, seq=1024,
                                        dtypes=("bf16",), **gemma3_rope_keys(1e6, 1e4, None)), 0),
            # Qwen3.5-2B's text tower (random init, bf16): 18 DeltaNet and 6 attention layers, T 300 (4 chunks and 44).
            ("qwen3_5-2b", "llama", dict(model_type="qwen3_5_text", vocab_size=248320, hidden_size=2048,
                                         intermediate_size=6144, num_hidden_layers=24, num_attention_heads=8,
                                         num_key_value_heads=2, head_dim=256, linear_num_key_heads=16,
                                         linear_key_head_dim=128, linear_num_value_heads=16, linear_value_head_dim=128,
                                         linear_conv_kernel_dim=4, full_attention_interval=4,
                                         max_position_embeddings=262144, rms_norm_eps=1e-6,
                                         rope_parameters=dict(rope_type="default", rope_theta=1e7,
                                                              partial_rotary_factor=0.25),
                                         tie_word_embeddings=True, batch=1, seq=300, dtypes=("bf16",)), 0),
            ("gpt2-124m", "gpt2", dict(n_embd=768, n_layer=12, n_head=12, n_positions=1024, vocab_size=50257, batch=2, seq=256), 0),
            ("vit-b-16", "vit", dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
                                     image_size=224, patch_size=16, num_labels=1000, layer_norm_eps=1e-6, batch=2), 0),
        ]
    # LoRA (issue 15): TinyLlama's shape (every layer), T 128, r 16 alpha 32 on the 7 linear names.
    tinyllama = dict(model_type="llama", vocab_size=32000, hidden_size=2048, intermediate_size=5632,
                     num_hidden_layers=22, num_attention_heads=32, num_key_value_heads=4, max_position_embeddings=2048,
                     rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False, batch=1, seq=128)
    lora_cases = [("lora-tinyllama", dict(tinyllama, lora_r=16, lora_alpha=32), 50)]
    if args.quick:  # the same recipe on the small LLaMA
        lora_cases = [("lora-llama-small", dict(llama_small, lora_r=16, lora_alpha=32), 50)]
    only = set(filter(None, args.only.split(",")))
    cases = [c for c in cases if not only or c[0] in only]
    lora_cases = [c for c in lora_cases if not only or c[0] in only]
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, kind, cfg, steps in cases:
            cfg = dict(cfg)
            dts = cfg.pop("dtypes", tuple(args.dtypes.split(",")))
            for dt in dts:
                r = run_case(args, name, kind, cfg, dt, steps, 1e-3, tmp)
                results.append(r)
                brief = {k: r.get(k) for k in ("case", "dtype", "ok", "logits_rel_err", "grad_worst_rel_err",
                                               "grad_worst_param", "curve_max_abs_diff", "f32_ref_logits_rel_err",
                                               "f32_ref_grad_worst_rel_err", "f64_ref_grad_worst_rel_err",
                                               "f64_ref_error", "dump_grad_rel_err", "dump_param_rel_err",
                                               "error") if k in r or k == "ok"}
                print(json.dumps(brief), flush=True)
        for name, cfg, steps in lora_cases:
            for dt in args.dtypes.split(","):
                r = run_lora_case(args, name, cfg, dt, steps, 1e-3, tmp)
                results.append(r)
                print(json.dumps({k: r.get(k) for k in ("case", "dtype", "ok", "logits_rel_err", "grad_worst_rel_err",
                                                        "grad_worst_param", "curve_max_abs_diff", "error")}), flush=True)
    commit = args.commit or subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                           text=True).stdout.strip()
    doc = {"gpu": torch.cuda.get_device_name(0), "commit": commit, "torch": torch.__version__, "results": results}
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, f"parity-{commit or 'nocommit'}.json")
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
    ok = sum(r.get("ok", False) for r in results)
    print(f"parity: {ok} passed, {len(results) - ok} failed -> {path}")
    sys.exit(0 if ok == len(results) else 1)


if __name__ == "__main__":
    main()
