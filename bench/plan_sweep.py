#!/usr/bin/env python3
"""A randomized plan-vs-measured sweep: the exact plan, checked on configurations nobody chose.

Draws N valid configurations at random (seeded: a failing line reproduces) from every model family
and preset leantrain has, at small and odd shapes, crossed with the memory techniques (precision,
optimizer, checkpoint policy, micro-batches, fused step, chunked loss, activation and optimizer /
parameter offload, the disk tier, NF4 + LoRA, step counts 1-7). For each it runs `leantrain plan
--json` (the dry run on meta) and, unless --plan-only, `leantrain train --device cuda
--metrics-json` with the same flags, and prints one line: the four differences predicted - measured
(device allocated, device reserved, pinned host, disk) and the command. A figure the plan calls
bounded (its JSON's "bounds" object) passes when the run stays at or under the bound.

    python3 bench/plan_sweep.py --seed 1 --n 60 --bin build/leantrain [--out DIR] [--plan-only]
    python3 bench/plan_sweep.py --seed 1 --only 17 --bin ...        # one configuration again

A configuration the plan refuses (a combination leantrain says cannot combine) is drawn again; the
refusals are counted in the summary. Exit status: 0 when every configuration is exact or within
its printed bound, 1 otherwise.
"""
import argparse
import json
import os
import random
import shlex
import subprocess
import sys
import tempfile
import time

FIGURES = (("alloc", "peak_allocated_bytes"), ("reserved", "peak_reserved_bytes"),
           ("pinned", "peak_pinned_host_bytes"), ("disk", "peak_disk_bytes"))


def pick(rng, items, weights=None):
    return rng.choices(items, weights=weights, k=1)[0]


def divisors(n, at_most=None):
    return [d for d in range(1, n + 1) if n % d == 0 and (at_most is None or d <= at_most)]


# ---- one model, at a small or odd shape ------------------------------------------------------

def vit_model(rng, work, idx):
    if rng.random() < 0.4 or SMALL:
        return {"family": "vit", "flags": ["--model", "vit-tiny" if SMALL else pick(rng, ["vit-tiny", "vit-b-16"]), "--depth", str(rng.randint(1, 3))]}, "vit"
    patch = pick(rng, [4, 7, 8, 14, 16])
    image = patch * rng.randint(2, 9)
    heads = rng.randint(1, 6)
    hd = pick(rng, [8, 16, 24, 32, 40, 64])
    cfg = {"model_type": "vit", "image_size": image, "patch_size": patch, "num_channels": pick(rng, [1, 3]),
           "hidden_size": heads * hd, "num_hidden_layers": rng.randint(1, 4), "num_attention_heads": heads,
           "intermediate_size": rng.randint(16, 512), "num_labels": rng.randint(2, 37), "layer_norm_eps": 1e-6}
    return {"family": "vit", "config": cfg}, "vit"


def gpt2_model(rng, work, idx):
    if rng.random() < 0.5:
        heads = rng.randint(1, 8)
        dim = heads * pick(rng, [8, 16, 32, 48, 64])
        return {"family": "gpt2", "flags": ["--model", pick(rng, ["gpt2-tiny", "gpt2-124m"]), "--depth", str(rng.randint(1, 3)),
                                            "--dim", str(dim), "--heads", str(heads)]}, "gpt2"
    return {"family": "gpt2", "flags": ["--model", "gpt2-tiny" if SMALL else pick(rng, ["gpt2-tiny", "gpt2-124m"]),
                                        "--depth", str(rng.randint(1, 3))]}, "gpt2"


def llama_model(rng, work, idx):
    r = rng.random()
    if r < 0.3 or SMALL:
        preset = "llama-tiny" if SMALL else pick(rng, ["llama-tiny", "smollm2-135m", "tinyllama-1.1b", "qwen2-0.5b", "llama3.2-1b"])
        return {"family": "llama", "flags": ["--model", preset, "--depth", str(rng.randint(1, 3))]}, "llama"
    kind = pick(rng, ["llama", "qwen2", "mistral"])
    kv = rng.randint(1, 4)
    heads = kv * rng.randint(1, 4)
    hd = pick(rng, [8, 16, 32, 64, 128])
    cfg = {"model_type": kind, "vocab_size": rng.randint(200, 3000), "hidden_size": heads * hd,
           "intermediate_size": rng.randint(16, 700), "num_hidden_layers": rng.randint(1, 4),
           "num_attention_heads": heads, "num_key_value_heads": kv, "max_position_embeddings": 1024,
           "rms_norm_eps": 1e-6, "rope_theta": pick(rng, [10000.0, 500000.0, 1000000.0]),
           "tie_word_embeddings": rng.random() < 0.5}
    if kind == "mistral":
        cfg["sliding_window"] = None  # (a window is not supported yet: issue 44)
    return {"family": "llama", "config": cfg}, "llama"


def qwen35_model(rng, work, idx):
    """Qwen3.5 (issue 44): Gated DeltaNet and gated-attention layers; a kind "llama" run (causal,
    its layers under model.layers)."""
    if rng.random() < 0.5 or SMALL:
        return {"family": "qwen3_5", "flags": ["--model", "qwen3.5-tiny", "--depth", str(rng.randint(1, 4))]}, "llama"
    kv = rng.randint(1, 2)
    heads = kv * rng.randint(1, 3)
    hd = pick(rng, [8, 16, 32, 64])
    lk = rng.randint(1, 3)
    cfg = {"model_type": "qwen3_5_text", "vocab_size": rng.randint(200, 3000), "hidden_size": pick(rng, [16, 24, 32, 48]),
           "intermediate_size": rng.randint(16, 200), "num_hidden_layers": rng.randint(1, 4),
           "num_attention_heads": heads, "num_key_value_heads": kv, "head_dim": hd,
           "linear_num_key_heads": lk, "linear_num_value_heads": lk * rng.randint(1, 2),
           "linear_key_head_dim": pick(rng, [4, 8, 16]), "linear_value_head_dim": pick(rng, [3, 8, 16]),
           "linear_conv_kernel_dim": pick(rng, [2, 4]), "full_attention_interval": rng.randint(1, 3),
           "max_position_embeddings": 1024, "tie_word_embeddings": rng.random() < 0.5,
           "rope_parameters": {"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25 if hd >= 16 else 0.5}}
    return {"family": "qwen3_5", "config": cfg}, "llama"


def encoder_model(rng, work, idx):
    preset = pick(rng, ["bert-tiny", "roberta-tiny", "distilbert-tiny", "bigbird-tiny"] + ([] if SMALL else ["bert-base-uncased"]))
    flags = ["--model", preset]
    if preset.endswith("-base-uncased"):
        flags += ["--depth", str(rng.randint(1, 2))]
    return {"family": "encoder", "flags": flags}, "encoder"


def resnet_model(rng, work, idx):
    preset = "resnet-tiny" if SMALL else pick(rng, ["resnet-tiny", "resnet18", "resnet50", "resnet152"], [4, 3, 3, 1])
    return {"family": "resnet", "flags": ["--model", preset]}, "resnet"


FAMILIES = [("vit", vit_model, 3), ("gpt2", gpt2_model, 3), ("llama", llama_model, 4),
            ("encoder", encoder_model, 1), ("resnet", resnet_model, 2), ("qwen3_5", qwen35_model, 2)]


def checkpoint_regex(kind, rng):
    if kind == "gpt2":
        return r"transformer\.h\.[0-%d]" % rng.randint(0, 2)
    if kind == "llama":
        return r"model\.layers\.[0-%d]" % rng.randint(0, 2)
    if kind == "vit":
        return r"encoder\.layers\.encoder_layer_[0-%d]" % rng.randint(0, 2)
    if kind == "resnet":
        return pick(rng, ["layer[23]", "layer(1|2)", "layer4"])
    return r".*layer\.0"


# ---- the techniques --------------------------------------------------------------------------

SMALL = False  # --small: presets and shapes a CPU trains in a second


def draw(rng, idx, work, families):
    fams = [(f, w) for f, _, w in FAMILIES if not families or f in families]
    fam = pick(rng, [f for f, _ in fams], [w for _, w in fams])
    model, kind = dict((f, m) for f, m, _ in FAMILIES)[fam](rng, work, idx)
    flags = list(model.get("flags", []))
    config_json = model.get("config")
    causal = kind in ("gpt2", "llama")
    if kind in ("gpt2", "llama", "encoder"):
        lens = [7, 16, 33, 64] if SMALL else [7, 16, 33, 64, 77, 100, 128, 200, 256, 300, 512, 600]
        if kind == "encoder":
            lens = [n for n in lens if n <= 256]  # (the tiny encoders have 256 or 512 positions)
        flags += ["--seq-len", str(pick(rng, lens))]
    batch = pick(rng, [1, 2, 3, 4, 6, 8, 12, 16, 24]) if kind != "resnet" else pick(rng, [2, 4, 6, 8, 12, 24])
    flags += ["--batch", str(batch)]
    if rng.random() < 0.35 and batch > 1:
        # (batch norm needs two samples a channel: a ResNet's micro-batch is 2 or more)
        mb = pick(rng, [d for d in divisors(batch) if d < batch and (kind != "resnet" or d > 1)] or [batch])
        flags += ["--micro-batch", str(mb)]
    precision = pick(rng, ["32-true", "16-mixed", "bf16-mixed", "16-true", "bf16-true"], [2, 2, 3, 1, 3])
    flags += ["--precision", precision]
    if precision.endswith("-true") and rng.random() < 0.25:
        flags += ["--master-weights", "fp32"]
    opt = pick(rng, ["adamw", "sgd", "lion", "adamw8bit", "lion8bit"], [4, 2, 1, 2, 1])
    flags += ["--optimizer", opt]
    bf16_state = opt in ("adamw", "lion") and rng.random() < 0.2
    if bf16_state:
        flags += ["--state-dtype", "bf16"]
    # A ResNet has no transformer blocks: only a regex over its stages selects anything.
    ck = pick(rng, ["none", "regex"]) if kind == "resnet" else \
        pick(rng, ["none", "blocks", "every", "regex", "selective"], [3, 3, 1, 1, 1])
    if ck == "every":
        flags += ["--checkpoint", "every:%d" % rng.randint(1, 3)]
    elif ck == "regex":
        flags += ["--checkpoint", checkpoint_regex(kind, rng)]
    elif ck != "none":
        flags += ["--checkpoint", ck]
    if ck != "none" and rng.random() < 0.25:
        flags += ["--offload-activations"]
    fused = rng.random() < 0.15 and precision != "16-mixed"
    if fused:
        flags += ["--fused-step"]
    if causal and rng.random() < 0.3:
        flags += ["--loss-chunk", str(pick(rng, [17, 64, 100, 256, 1000, 4096]))]
    r = rng.random()
    master = "--master-weights" in flags
    if r < 0.14 and not (fused or bf16_state or master):  # (combinations offload refuses)
        flags += ["--offload", "optimizer"]
        if rng.random() < 0.3:
            flags += ["--offload-dir", "{work}/nvme"]
            if rng.random() < 0.5:
                flags += ["--host-memory-limit", pick(rng, ["64KiB", "1MiB", "16MiB"])]
    elif r < 0.22 and ck != "none" and not (fused or bf16_state or master):
        flags += ["--offload", "params"]
    if causal and rng.random() < 0.15:
        flags += ["--quantize", "nf4", "--lora-rank", str(pick(rng, [2, 4, 8, 16]))]
    elif rng.random() < 0.12:
        flags += ["--lora-rank", str(pick(rng, [1, 4, 8]))]
    flags += ["--workers", str(rng.randint(1, 3)), "--steps", str(rng.randint(1, 7)), "--seed", str(rng.randint(0, 99))]
    return {"index": idx, "family": fam, "flags": flags, "config": config_json}


def materialize(entry, work):
    """The flags as they run: a drawn config.json written to the work directory."""
    flags = [f.replace("{work}", work) for f in entry["flags"]]
    if entry.get("config") is not None:
        path = os.path.join(work, "config-%d.json" % entry["index"])
        with open(path, "w") as f:
            json.dump(entry["config"], f)
        flags = ["--config", path] + flags
    if any(f == "--offload-dir" for f in flags):
        os.makedirs(os.path.join(work, "nvme"), exist_ok=True)
    # A low learning rate: a 16-true run at the default 2e-3 can diverge (NaN) before its last step,
    # and a diverged run has no figures to compare. (Not drawn: the seeds' draws stay as they were.)
    return ["--data", "synthetic", "--eval-batches", "1", "--log-every", "0", "--lr", "1e-4"] + flags


def display(entry):
    s = " ".join(shlex.quote(f) for f in entry["flags"])
    if entry.get("config") is not None:
        s = "--config <%s> " % json.dumps(entry["config"], separators=(",", ":")) + s
    return s


def run(cmd, timeout):
    t0 = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        return p.returncode, p.stdout, p.stderr, time.time() - t0
    except subprocess.TimeoutExpired:
        return 124, "", "timed out after %d s" % timeout, time.time() - t0


def last_line(text):
    lines = [l for l in text.strip().splitlines() if l.strip()]
    return lines[-1][:300] if lines else ""


def compare(plan, measured):
    """Per figure: (difference, verdict); verdict 'exact', 'bounded' (run <= the plan's stated bound) or 'MISS'."""
    bounds = plan.get("bounds", {})
    out = {}
    for short, key in FIGURES:
        p, m = plan.get(key, 0), measured.get(key, 0)
        d = p - m
        b = bounds.get(key)
        if d == 0:
            out[short] = (d, "exact")
        elif b is not None and m <= b.get("upper_bytes", p):
            out[short] = (d, "bounded")
        else:
            out[short] = (d, "MISS")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--n", type=int, default=60)
    ap.add_argument("--only", type=int, action="append", help="run only these indices (repeatable)")
    ap.add_argument("--bin", default="build/leantrain")
    ap.add_argument("--out", help="directory for sweep.jsonl (one JSON line per configuration)")
    ap.add_argument("--plan-only", action="store_true", help="draw and plan only (no GPU): checks the sampler")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                    help="where the runs go (cpu: the plan of a cpu run against it; small shapes only)")
    ap.add_argument("--families", default="", help="comma-separated subset of vit,gpt2,llama,encoder,resnet,qwen3_5")
    ap.add_argument("--small", action="store_true", help="the smallest shapes only (CPU runs in the tests)")
    ap.add_argument("--timeout", type=int, default=120, help="seconds per plan or run")
    ap.add_argument("--max-draws", type=int, default=0, help="give up after this many draws (default 20 N)")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    global SMALL
    SMALL = a.small
    families = [f for f in a.families.split(",") if f]
    work = tempfile.mkdtemp(prefix="plan-sweep-")
    if a.out:
        os.makedirs(a.out, exist_ok=True)
    out = open(os.path.join(a.out, "sweep-seed%d.jsonl" % a.seed), "w") if a.out else None
    refused, refusals = 0, {}
    verdicts = {"exact": 0, "bounded": 0, "MISS": 0, "run failed": 0}
    idx, draws, t_start = 0, 0, time.time()
    max_draws = a.max_draws or 20 * a.n
    while idx < a.n and draws < max_draws:
        draws += 1
        entry = draw(rng, idx, work, families)
        flags = materialize(entry, work)
        # The plan decides validity: a refused combination is drawn again (same rng stream, so
        # indices and draws reproduce from the seed alone).
        pj = os.path.join(work, "plan.json")
        rc, so, se, pt = run([a.bin, "plan", *flags, "--device-type", a.device, "--json"], a.timeout)
        if rc != 0:
            refused += 1
            why = last_line(se or so)
            key = why.split("error: ", 1)[-1][:90]
            refusals[key] = refusals.get(key, 0) + 1
            continue
        this = idx
        idx += 1
        if a.only and this not in a.only:
            continue
        plan = json.loads(so)
        row = {"index": this, "seed": a.seed, "family": entry["family"], "command": display(entry),
               "plan_seconds": round(pt, 2)}
        for short, key in FIGURES:
            row["plan_" + short] = plan.get(key, 0)
        if plan.get("bounds"):
            row["bounds"] = plan["bounds"]
        if a.plan_only:
            print("%3d plan  alloc %13d reserved %13d pinned %12d disk %10d  %5.1fs  %s" % (
                this, row["plan_alloc"], row["plan_reserved"], row["plan_pinned"], row["plan_disk"], pt, row["command"]), flush=True)
        else:
            mj = os.path.join(work, "run-%d.json" % this)
            rc, so, se, rt = run([a.bin, "train", *flags, "--device", a.device, "--metrics-json", mj], a.timeout)
            row["run_seconds"] = round(rt, 2)
            if rc != 0 or not os.path.exists(mj):
                verdicts["run failed"] += 1
                row["verdict"] = "run failed"
                row["error"] = last_line(se or so)
                print("%3d RUN FAILED (exit %d): %s  %s" % (this, rc, row["error"], row["command"]), flush=True)
            else:
                measured = json.load(open(mj))
                cmp = compare(plan, measured)
                for short, key in FIGURES:
                    row["run_" + short] = measured.get(key, 0)
                    row["diff_" + short] = cmp[short][0]
                worst = "MISS" if any(v == "MISS" for _, v in cmp.values()) else \
                    "bounded" if any(v == "bounded" for _, v in cmp.values()) else "exact"
                verdicts[worst] += 1
                row["verdict"] = worst
                print("%3d %-7s alloc %+d reserved %+d pinned %+d disk %+d  (%.0fs)  %s" % (
                    this, worst, *(cmp[s][0] for s, _ in FIGURES), rt, row["command"]), flush=True)
        if out:
            out.write(json.dumps(row) + "\n")
            out.flush()
    wall = time.time() - t_start
    summary = {"seed": a.seed, "configurations": idx, "draws": draws, "refused_draws": refused,
               "wall_seconds": round(wall, 1), **({} if a.plan_only else verdicts)}
    print("summary: " + json.dumps(summary))
    if refusals:
        print("refused draws by reason: " + json.dumps(dict(sorted(refusals.items(), key=lambda kv: -kv[1]))))
    if out:
        out.write(json.dumps({"summary": summary, "refusals": refusals}) + "\n")
    if idx < a.n:
        print("only %d of %d configurations drawn in %d draws" % (idx, a.n, draws))
        return 1
    return 0 if a.plan_only or (verdicts["MISS"] == 0 and verdicts["run failed"] == 0) else 1


if __name__ == "__main__":
    sys.exit(main())
