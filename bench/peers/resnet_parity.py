#!/usr/bin/env python3
"""ResNet parity with torchvision on the GPU machine (issue 17), in training mode.

For resnet50 and resnet152 (and a narrow resnet-tiny-like one with --quick), f32 and bf16:
torchvision builds the model with random weights (batch norm's weight, bias and running
statistics drawn too, so a misapplied one shows), draws a batch of 224x224 images, and saves
its state dict (parameters and buffers) and the batch as safetensors; leantrain_bench parity
--train 1 loads them by torchvision's names, runs one training-mode forward and backward and
writes logits, loss, every gradient and the buffers after the step. This script runs the same
step in PyTorch and compares logits, loss, every gradient and the running mean and variance of
every BatchNorm2d. TF32 is off on both sides (leantrain's f32 convolutions and GEMMs use none).
Each side is also measured against the arithmetic one step finer on the same weights (f32 for
bf16, f64 for f32): outside the table, leantrain passes when it is within 10% of PyTorch's own
distance from it (a batch norm weight's gradient deep in a random network cancels to a small
value that no two summation orders agree on).

Usage: python3 bench/peers/resnet_parity.py [--bench build-cuda/leantrain_bench] [--out DIR]
       [--batch 16] [--quick] [--no-f32-reference]
Writes resnet-parity-<gpu>.json with every comparison to DIR (default bench/results).
"""
import argparse, json, os, subprocess, tempfile, time

import torch
import torchvision
from safetensors.torch import save_file, load_file

MODELS = {
    "resnet50": {"layer_type": "bottleneck", "depths": [3, 4, 6, 3], "hidden_sizes": [256, 512, 1024, 2048]},
    "resnet152": {"layer_type": "bottleneck", "depths": [3, 8, 36, 3], "hidden_sizes": [256, 512, 1024, 2048]},
    "resnet18": {"layer_type": "basic", "depths": [2, 2, 2, 2], "hidden_sizes": [64, 128, 256, 512]},
}


def rel_err(a, b):
    a = a.detach().double(); b = b.detach().double()
    if not torch.isfinite(a).all():
        return float("inf")
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def build(name, dtype):
    m = getattr(torchvision.models, name)(weights=None, num_classes=1000)
    with torch.no_grad():
        g = torch.Generator().manual_seed(5)
        for mod in m.modules():
            if isinstance(mod, torch.nn.BatchNorm2d):
                c = mod.num_features
                mod.weight.copy_(1 + 0.1 * torch.randn(c, generator=g))
                mod.bias.copy_(0.1 * torch.randn(c, generator=g))
                mod.running_mean.copy_(0.1 * torch.randn(c, generator=g))
                mod.running_var.copy_(1 + 0.2 * torch.rand(c, generator=g))
    return m.to(device="cuda", dtype=dtype).train()


def step(model, images, labels, dtype):
    logits = model(images.cuda().to(dtype))
    loss = torch.nn.functional.cross_entropy(logits.float(), labels.cuda())
    loss.backward()
    return logits, loss


def run_case(args, name, dtype_name, tmp):
    dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[dtype_name]
    torch.manual_seed(1234)
    model = build(name, dtype)
    state = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    gen = torch.Generator().manual_seed(99)
    images = torch.randn(1, args.batch, 3, 224, 224, generator=gen)
    labels = torch.randint(0, 1000, (1, args.batch), generator=gen)
    paths = {k: os.path.join(tmp, f"{name}-{dtype_name}-{k}") for k in ("w", "b", "cfg", "out")}
    save_file(state, paths["w"] + ".safetensors")
    save_file({"images": images, "labels": labels}, paths["b"] + ".safetensors")
    cfg = {"model_type": "resnet", **MODELS[name], "embedding_size": 64, "num_channels": 3, "num_labels": 1000,
           "image_size": 224}
    with open(paths["cfg"] + ".json", "w") as f:
        json.dump(cfg, f)
    cmd = [args.bench, "parity", "--kind", "resnet", "--train", "1", "--config", paths["cfg"] + ".json",
           "--weights", paths["w"] + ".safetensors", "--batches", paths["b"] + ".safetensors",
           "--dtype", dtype_name, "--device", "cuda", "--steps", "0", "--out", paths["out"] + ".safetensors"]
    t0 = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    res = {"case": name, "dtype": dtype_name, "batch": args.batch, "leantrain_seconds": round(time.time() - t0, 2)}
    if proc.returncode != 0:
        return {**res, "ok": False, "error": (proc.stderr or proc.stdout)[-2000:]}
    ours = load_file(paths["out"] + ".safetensors")

    logits, loss = step(model, images[0], labels[0], dtype)
    res["logits_rel_err"] = rel_err(ours["logits"].float().reshape(logits.shape).cuda(), logits.float())
    res["loss_torch"], res["loss_leantrain"] = float(loss), float(ours["loss"].reshape(-1)[0])
    params = dict(model.named_parameters())
    worst, worst_name, missing = 0.0, None, []
    for k, p in params.items():
        if "grad." + k not in ours:
            missing.append(k)
            continue
        e = rel_err(ours["grad." + k].float().reshape(p.shape).cuda(), p.grad.float())
        if e > worst:
            worst, worst_name = e, k
    bworst, bworst_name = 0.0, None
    for k, b in model.named_buffers():
        if not b.is_floating_point():
            continue
        if "buffer." + k not in ours:
            missing.append(k)
            continue
        # The change of the running statistic in this step: what the update formula decides.
        before = state[k].float().cuda()
        e = rel_err(ours["buffer." + k].float().cuda() - before, b.float() - before)
        if e > bworst:
            bworst, bworst_name = e, k
    res.update(grad_worst_rel_err=worst, grad_worst_param=worst_name, buffer_update_worst_rel_err=bworst,
               buffer_worst=bworst_name, missing=missing, num_params=len(params))

    # The arithmetic one step finer (f32 for bf16, f64 for f32) on the same weights and batch: a
    # gradient that cancels to a small value (a batch norm's weight deep in a random network) differs
    # between any two summation orders, so what counts is which side is closer to the finer one.
    if args.f32_reference:
        ref_dtype, ref_name = (torch.float32, "f32") if dtype_name == "bf16" else (torch.float64, "f64")
        torch_grads = {k: p.grad.double() for k, p in params.items()}
        torch_buffers = {k: b.double() for k, b in model.named_buffers() if b.is_floating_point()}
        torch_logits = logits.double()
        del model, params, logits, loss
        torch.cuda.empty_cache()
        ref = build(name, ref_dtype)
        ref.load_state_dict({k: v.to(ref_dtype).cuda() if v.is_floating_point() else v.cuda() for k, v in state.items()})
        rlogits, _ = step(ref, images[0], labels[0], ref_dtype)
        wt, wo = 0.0, 0.0
        for k, p in ref.named_parameters():
            wt = max(wt, rel_err(torch_grads[k], p.grad))
            wo = max(wo, rel_err(ours["grad." + k].double().reshape(p.shape).cuda(), p.grad))
        res["ref_dtype"] = ref_name
        res["f32_ref_logits_rel_err"] = {"torch_" + dtype_name: rel_err(torch_logits, rlogits),
                                         "leantrain_" + dtype_name: rel_err(
                                             ours["logits"].double().reshape(rlogits.shape).cuda(), rlogits)}
        res["f32_ref_grad_worst_rel_err"] = {"torch_" + dtype_name: wt, "leantrain_" + dtype_name: wo}
        bt, bo = 0.0, 0.0
        for k, b in ref.named_buffers():
            if b.is_floating_point() and "buffer." + k in ours:
                before = state[k].double().cuda()
                bt = max(bt, rel_err(torch_buffers[k] - before, b.double() - before))
                bo = max(bo, rel_err(ours["buffer." + k].double().cuda() - before, b.double() - before))
        res["ref_buffer_update_worst_rel_err"] = {"torch_" + dtype_name: bt, "leantrain_" + dtype_name: bo}
        del ref
        torch.cuda.empty_cache()

    tol = {"f32": (1e-4, 1e-3, 1e-4), "bf16": (3e-2, 6e-2, 3e-2)}[dtype_name]
    res["tolerances"] = {"logits": tol[0], "grads": tol[1], "buffer_updates": tol[2]}
    close = res["logits_rel_err"] <= tol[0] and worst <= tol[1]
    if not close and "f32_ref_logits_rel_err" in res:
        fl, fg = res["f32_ref_logits_rel_err"], res["f32_ref_grad_worst_rel_err"]
        lt, pt = "leantrain_" + dtype_name, "torch_" + dtype_name
        # Within 10% of PyTorch's own distance (the rounding of two different summation orders).
        close = fl[lt] <= 1.1 * fl[pt] and fg[lt] <= 1.1 * fg[pt]
        res["ok_by_finer_reference"] = close
    buffers_close = bworst <= tol[2]
    if not buffers_close and "ref_buffer_update_worst_rel_err" in res:
        rb = res["ref_buffer_update_worst_rel_err"]
        buffers_close = rb["leantrain_" + dtype_name] <= 1.1 * rb["torch_" + dtype_name]
        res["buffers_ok_by_finer_reference"] = buffers_close
    res["ok"] = close and buffers_close and not missing
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", default="build-cuda/leantrain_bench")
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--quick", action="store_true", help="resnet18 only")
    ap.add_argument("--no-f32-reference", dest="f32_reference", action="store_false")
    args = ap.parse_args()
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    names = ["resnet18"] if args.quick else ["resnet50", "resnet152"]
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            for dt in ("f32", "bf16"):
                r = run_case(args, name, dt, tmp)
                print(json.dumps({k: v for k, v in r.items() if k != "missing"}), flush=True)
                results.append(r)
    gpu = torch.cuda.get_device_name().replace(" ", "-").lower()
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, f"resnet-parity-{gpu}.json")
    with open(path, "w") as f:
        json.dump({"torch": torch.__version__, "torchvision": torchvision.__version__, "results": results}, f, indent=1)
    print("wrote", path, "-", sum(r.get("ok", False) for r in results), "of", len(results), "ok")


if __name__ == "__main__":
    main()
