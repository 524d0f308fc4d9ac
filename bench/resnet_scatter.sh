#!/usr/bin/env bash
# Seed 004's ResNet-152 scatter (issue 17) on the GPU machine: memory saved against throughput lost
# for every subset of {layer1, layer2, layer3, layer4} checkpointed (16 runs, SGD with momentum),
# and beside it the optimizer comparison without checkpointing (SGD, Adam, 8-bit Adam; the seed's
# reference point is Adam). Each run: `leantrain plan` (predicted peak), then `leantrain train`
# (measured peak from --metrics-json, img/s over steps 2..N from --metrics), then, unless
# PROFILE=0, `leantrain profile --modules 'layer[1-4]'` for the single-stage points measured its
# way (each row's peak checked against its plan, plus its own SVG scatter).
#
# Out ($OUT): resnet_scatter.jsonl (one JSON line per run), resnet_scatter.md (tables),
# resnet_scatter.svg (peak MiB against img/s, the seed's axes: down and right is better), and per
# run NAME.log, NAME.plan.json, NAME.json (--metrics-json), NAME.metrics.jsonl.
#
# Run from the repo root with a prebuilt binary in $BUILD; needs libcudnn.so.9 on LD_LIBRARY_PATH
# (as bench/resnet.sh; the nvidia-cudnn-cu12 wheel's lib directory is added when it is installed).
# At ~70 img/s (bench/results/resnet-throughput-relu-out-h200.jsonl) one run is ~4 s of steps
# plus start-up: ~3-4 minutes for the 19 runs and ~1 minute for the profile on an H200.
#
# Choices (see the report of issue 17):
# - Stages are checkpointed whole: --checkpoint 'layer(1|2)' matches whole module paths, so it
#   selects exactly the modules `layer1` and `layer2` (train prints "2 modules recomputed in
#   backward: layer1, layer2"): one recomputed region per stage, as the seed's ckpt_monkey wraps
#   the top-level `layerN` Sequential of torchvision's ResNet-152. CKPT_FORM=block checkpoints
#   each bottleneck block of the chosen stages instead ('layer(1|2)\.[0-9]+', 3+8+36+3 modules):
#   the plan says it saves less for layer1/layer2 (10.4% vs 13.3%, 13.6% vs 18.7%) but far more
#   for layer3 (30.3% vs 1.0%), whose 36 blocks, recomputed as one region, come back all at once.
# - Precision bf16-mixed. The seed does not state the scatter's precision; it recommends
#   torch.autocast("cuda"), whose default is float16 (16-mixed here: the plan's bytes are the
#   same as bf16-mixed's). PRECISION=16-mixed to follow it literally.
# - Weight decay 0 for every optimizer, as torch.optim's defaults; "Adam" is --optimizer adamw
#   with no weight decay (= Adam), "8-bit Adam" is adamw8bit (block-wise 8-bit state, as
#   bitsandbytes' Adam8bit). The seed's RMSprop/Adagrad and paged optimizers have no counterpart.
# - Synthetic data: the preset's own 224x224x3 images and 10 classes (torchvision's 1000-class
#   head would add 2.0M parameters).
#
# PLAN_ONLY=1 prints each configuration's plan and stops (no device needed). Overrides for a dry
# run on a CPU machine, e.g.:
#   MODEL=resnet18 BATCH=2 DEVICE=cpu STEPS=3 OUT=/tmp/scatter-dry bash bench/resnet_scatter.sh
# (resnet-tiny cannot be planned: its 28x28 images leave layer4 1x1, and the planner's
# micro-batch-1 probe then trips BatchNorm's one-value-per-channel check.)
set -u
set -f  # the regexes below travel unquoted inside the flag strings: no globbing
BUILD=${BUILD:-build}
OUT=${OUT:-/tmp/leantrain-resnet-scatter}
MODEL=${MODEL:-resnet152}
BATCH=${BATCH:-32}
DEVICE=${DEVICE:-cuda}
PRECISION=${PRECISION:-bf16-mixed}
STEPS=${STEPS:-8}
CKPT_FORM=${CKPT_FORM:-stage}            # stage | block
PROFILE=${PROFILE:-1}                    # 0: skip the `leantrain profile` of single stages
PROFILE_MODULES=${PROFILE_MODULES:-layer[1-4]}
TIMEOUT=${TIMEOUT:-300}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
case "$CKPT_FORM" in stage | block) ;; *) echo "CKPT_FORM must be stage or block" >&2; exit 2 ;; esac
if [ "$DEVICE" != cpu ] && ! ldconfig -p 2>/dev/null | grep -q 'libcudnn\.so\.9'; then
  d=$(python3 -c 'import nvidia.cudnn, os; print(os.path.join(list(nvidia.cudnn.__path__)[0], "lib"))' 2>/dev/null) &&
    export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
PLAN_DEVICE=(--device "$DEVICE")
[ "$DEVICE" = cpu ] && PLAN_DEVICE+=(--device-type cpu)   # the CPU allocator's bytes, not a GPU's

COMMON="--model $MODEL --data synthetic --batch $BATCH --precision $PRECISION --weight-decay 0"
SGD="--optimizer sgd --momentum 0.9 --lr 0.01"
# name ; group ; checkpointed stages ; baseline ; flags (";": the regexes hold "|")
CONFIGS=()
for s in "" 1 2 3 4 12 13 14 23 24 34 123 124 134 234 1234; do
  if [ -z "$s" ]; then
    CONFIGS+=("ckpt-none;checkpoint;-;ckpt-none;$SGD --checkpoint none")
    continue
  fi
  alt=$(echo "$s" | sed 's/./&|/g; s/|$//')     # 12 -> 1|2
  if [ ${#s} -eq 1 ]; then re="layer$s"; else re="layer($alt)"; fi
  [ "$CKPT_FORM" = block ] && re="$re\\.[0-9]+"
  stages=$(echo "$s" | sed 's/./layer&,/g; s/,$//')
  CONFIGS+=("ckpt-$s;checkpoint;$stages;ckpt-none;$SGD --checkpoint $re")
done
CONFIGS+=(
  "opt-adam;optimizer;-;opt-adam;--optimizer adamw --lr 1e-3 --checkpoint none"
  "opt-sgd;optimizer;-;opt-adam;$SGD --checkpoint none"
  "opt-adam8bit;optimizer;-;opt-adam;--optimizer adamw8bit --lr 1e-3 --checkpoint none"
)

JSONL="$OUT/resnet_scatter.jsonl"
: >"$JSONL"
echo "resnet_scatter: $MODEL batch $BATCH $PRECISION on $DEVICE, $STEPS steps a run, stages checkpointed per $CKPT_FORM, ${#CONFIGS[@]} runs -> $OUT"
t_all=$SECONDS
i=0
for entry in "${CONFIGS[@]}"; do
  i=$((i + 1))
  IFS=';' read -r name group stages baseline flags <<<"$entry"
  rm -f "$OUT/$name.json" "$OUT/$name.metrics.jsonl" "$OUT/$name.plan.json"
  # shellcheck disable=SC2086
  timeout "$TIMEOUT" ./"$BUILD"/leantrain plan $COMMON $flags "${PLAN_DEVICE[@]}" --steps "$STEPS" --eval-batches 1 --json \
    >"$OUT/$name.plan.json" 2>"$OUT/$name.plan.err"
  prc=$?
  if [ -n "${PLAN_ONLY:-}" ]; then  # PLAN_ONLY=1: the plans alone (no device needed), then stop
    python3 - "$OUT/$name.plan.json" "$name" "${flags##*--checkpoint }" <<'PY' || echo "$name: plan failed: $(tail -c 300 "$OUT/$name.plan.err")"
import json, sys
p = json.load(open(sys.argv[1]))
print(f"{sys.argv[2]:<14} {sys.argv[3]:<24} plan peak {p['peak_allocated_bytes'] / 2**20:9.1f} MiB"
      f"  {p['peak_allocated_bytes']:>12} B  recompute {p['recompute_flops'] / 1e12:.3f} TFLOP")
PY
    continue
  fi
  t0=$SECONDS
  # shellcheck disable=SC2086
  timeout "$TIMEOUT" ./"$BUILD"/leantrain train $COMMON $flags --device "$DEVICE" --steps "$STEPS" --eval-batches 1 \
    --log-every "$STEPS" --metrics-json "$OUT/$name.json" --metrics "$OUT/$name.metrics.jsonl" >"$OUT/$name.log" 2>&1
  rc=$?
  python3 - "$JSONL" "$OUT" "$i/${#CONFIGS[@]}" "$name" "$group" "$stages" "$baseline" "$COMMON $flags" "$rc" "$prc" \
    "$((SECONDS - t0))" "$BATCH" "$CKPT_FORM" <<'PY'
import json, re, sys
jsonl, out, idx, name, group, stages, baseline, flags, rc, prc, wall, batch, form = sys.argv[1:]
row = {"system": "leantrain", "config": name, "group": group, "stages": stages.split(",") if stages != "-" else [],
       "checkpoint": re.search(r"--checkpoint (\S+)", flags).group(1), "checkpoint_form": form,
       "optimizer": re.search(r"--optimizer (\S+)", flags).group(1), "flags": flags,
       "baseline": baseline, "rc": int(rc), "plan_rc": int(prc), "wall_s": int(wall)}
def tail(path, n):
    try: return open(path, errors="replace").read()[-n:]
    except OSError: return ""
try:  # the plan (kept even when the run fails)
    p = json.load(open(f"{out}/{name}.plan.json"))
    row.update(plan_peak_bytes=p["peak_allocated_bytes"], plan_peak_reserved_bytes=p["peak_reserved_bytes"],
               plan_step_seconds=p.get("predicted_step_seconds"), plan_recompute_flops=p.get("recompute_flops"))
except Exception as e:
    row["plan_error"] = tail(f"{out}/{name}.plan.err", 400) + " " + repr(e)
try:
    log = open(f"{out}/{name}.log", errors="replace").read()
    m = re.search(r"activation checkpointing \(.*\): (\d+) modules? recomputed in backward: (.*)", log)
    row["modules_recomputed"] = int(m.group(1)) if m else 0
    if m: row["modules_recomputed_list"] = m.group(2).strip()
    # did the regex select the stages asked for (whole stages; or blocks of those stages only: the
    # log lists the first few blocks, then "...")?
    got = [x.strip() for x in m.group(2).split(",")] if m else []
    want = row["stages"]
    row["selection_ok"] = (got == want if form == "stage" else
                           {g.split(".")[0] for g in got if g != "..."} <= set(want) and len(got) >= len(want))
    j = json.load(open(f"{out}/{name}.json"))
    row.update(peak_allocated_bytes=j["peak_allocated_bytes"], peak_reserved_bytes=j["peak_reserved_bytes"],
               categories_peak=j["categories_peak"], num_alloc_retries=j.get("num_alloc_retries"),
               steady_items_per_s=j.get("steady_items_per_s"))
    secs = [json.loads(l)["seconds"] for l in open(f"{out}/{name}.metrics.jsonl") if '"loss"' in l]
    row["step_seconds"] = [round(s, 4) for s in secs]
    row["img_per_s"] = round((len(secs) - 1) * int(batch) / sum(secs[1:]), 2)
    if "plan_peak_bytes" in row:
        row["plan_equals_measured"] = row["plan_peak_bytes"] == row["peak_allocated_bytes"]
        row["plan_reserved_equals_measured"] = row["plan_peak_reserved_bytes"] == row["peak_reserved_bytes"]
except Exception as e:
    row["error"] = f"rc {rc}{' (timeout)' if rc in ('124', '137') else ''}: " + tail(f"{out}/{name}.log", 800) + " " + repr(e)
base = None  # memory saved / throughput lost against the baseline row (run earlier, or this one)
for l in [*open(jsonl), json.dumps(row)]:
    r = json.loads(l)
    if r.get("config") == baseline and "peak_allocated_bytes" in r: base = r
if base and "peak_allocated_bytes" in row:
    row["memory_saved_pct"] = round(100 * (1 - row["peak_allocated_bytes"] / base["peak_allocated_bytes"]), 2)
    row["throughput_lost_pct"] = round(100 * (1 - row["img_per_s"] / base["img_per_s"]), 2)
if base and "plan_peak_bytes" in row and "plan_peak_bytes" in base:
    row["plan_memory_saved_pct"] = round(100 * (1 - row["plan_peak_bytes"] / base["plan_peak_bytes"]), 2)
open(jsonl, "a").write(json.dumps(row) + "\n")
what = ",".join(row["stages"]) or row["optimizer"]
if "error" in row:
    print(f"[{idx:>5}] {name:<14} {what:<28} ERROR rc {rc} ({wall}s): {row['error'][-200:]!r}")
else:
    f = lambda k, fmt: format(row[k], fmt) if row.get(k) is not None else "-"
    print(f"[{idx:>5}] {name:<14} {what:<28} peak {row['peak_allocated_bytes'] / 2**20:9.1f} MiB"
          f"  plan==measured {row.get('plan_equals_measured')}  {row['img_per_s']:8.2f} img/s"
          f"  saved {f('memory_saved_pct', '6.1f')}%  lost {f('throughput_lost_pct', '6.1f')}% vs {baseline}  ({wall}s)")
PY
done

[ -n "${PLAN_ONLY:-}" ] && exit 0

if [ "$PROFILE" != 0 ]; then
  # Single stages the way `leantrain profile` measures them (a fresh run per module, 2 warm-up +
  # 5 timed steps, median step time, measured peak checked against its plan); optimizer: SGD.
  t0=$SECONDS
  # shellcheck disable=SC2086
  timeout "$TIMEOUT" ./"$BUILD"/leantrain profile $COMMON $SGD --device "$DEVICE" --modules "$PROFILE_MODULES" \
    --warmup-steps 2 --timed-steps 5 --json "$OUT/profile.json" --svg "$OUT/profile.svg" >"$OUT/profile.log" 2>&1
  rc=$?
  python3 - "$JSONL" "$OUT" "$rc" "$((SECONDS - t0))" "$PROFILE_MODULES" <<'PY'
import json, sys
jsonl, out, rc, wall, modules = sys.argv[1:]
try:
    j = json.load(open(f"{out}/profile.json"))
    b = j["baseline"]
    with open(jsonl, "a") as f:
        for r in [b, *j["rows"]]:
            none = r is b
            row = {"system": "leantrain-profile", "config": "profile-" + ("baseline" if none else r["module"]),
                   "group": "profile", "stages": [] if none else [r["module"]], "checkpoint": r["checkpoint"],
                   "optimizer": "sgd", "baseline": "profile-baseline",
                   "peak_allocated_bytes": r["peak_allocated_bytes_measured"],
                   "plan_peak_bytes": r["peak_allocated_bytes_predicted"],
                   "plan_equals_measured": r["peak_allocated_bytes_measured"] == r["peak_allocated_bytes_predicted"],
                   "bytes_saved": r["bytes_saved_measured"], "step_ms_median": r["step_ms_median"],
                   "ms_added": r["ms_added"], "img_per_s": round(r["items_per_s"], 2), "pareto": r.get("pareto"),
                   "suggested": r.get("suggested"), "timing_drifted": j.get("timing_drifted"), "wall_s": int(wall)}
            if none: row["step_ms_first_last"] = [j.get("baseline_first_ms"), j.get("baseline_last_ms")]
            row["memory_saved_pct"] = round(100 * r["bytes_saved_measured"] / b["peak_allocated_bytes_measured"], 2)
            if b.get("items_per_s"):
                row["throughput_lost_pct"] = round(100 * (1 - r["items_per_s"] / b["items_per_s"]), 2)
            f.write(json.dumps(row) + "\n")
    print(f"[profile] {len(j['rows'])} rows of '{modules}' ({wall}s): "
          + "; ".join(f"{r['module']} saved {r['bytes_saved_measured'] / 2**20:.1f} MiB, {r['ms_added']:+.1f} ms" for r in j["rows"]))
except Exception as e:
    err = open(f"{out}/profile.log", errors="replace").read()[-800:]
    open(jsonl, "a").write(json.dumps({"system": "leantrain-profile", "config": "profile", "group": "profile",
                                       "rc": int(rc), "error": f"rc {rc}: {err} {e!r}"}) + "\n")
    print(f"[profile] ERROR rc {rc} ({wall}s): {err[-200:]!r}")
PY
fi

python3 - "$JSONL" "$OUT" "$MODEL" "$BATCH" "$PRECISION" "$DEVICE" "$STEPS" "$CKPT_FORM" <<'PY'
import json, sys
jsonl, out, model, batch, precision, device, steps, form = sys.argv[1:]
rows = [json.loads(l) for l in open(jsonl)]
mib = lambda b: f"{b / 2**20:.1f}" if b is not None else "-"
pct = lambda r, k: f"{r[k]:.1f}" if r.get(k) is not None else "-"
def line(r, what):
    if "error" in r and "peak_allocated_bytes" not in r:
        return f"| {r['config']} | {what} | error: {r['error'][-120:].replace('|', '/').replace(chr(10), ' ')} | | | | |"
    eq = {True: "yes", False: f"no ({mib(r.get('plan_peak_bytes'))})", None: "-"}[r.get("plan_equals_measured")]
    return (f"| {r['config']} | {what} | {mib(r.get('peak_allocated_bytes'))} | {eq} | {r.get('img_per_s', '-')} | "
            f"{pct(r, 'memory_saved_pct')} | {pct(r, 'throughput_lost_pct')} |")
head = "| config | {} | peak MiB | plan == measured | img/s | memory saved % | throughput lost % |\n|---|---|---|---|---|---|---|"
md = [f"# Seed 004's ResNet scatter: {model}, batch {batch}, {precision}, synthetic images, {device} (bench/resnet_scatter.sh)", "",
      f"{steps} steps a run; img/s over steps 2..{steps}; peak = peak allocated bytes (--metrics-json), plan = `leantrain plan`'s"
      " predicted peak allocated. Seed 004 (torchvision, PyTorch): layer1+layer2 save ~34% for ~10% throughput; layer3 and"
      " layer4 are poor trade-offs; bitsandbytes 8-bit Adam saves 7-10% of the peak against Adam.", "",
      f"## Activation checkpointing (SGD, momentum 0.9; stages checkpointed {'whole, one region each' if form == 'stage' else 'per bottleneck block'};"
      " saved/lost against ckpt-none)", "", head.format("checkpointed stages")]
md += [line(r, ",".join(r.get("stages", [])) or "none") for r in rows if r.get("group") == "checkpoint"]
md += ["", "## Optimizers (no checkpointing; saved/lost against Adam, the seed's reference)", "", head.format("optimizer")]
md += [line(r, r.get("optimizer", "-")) for r in rows if r.get("group") == "optimizer"]
prof = [r for r in rows if r.get("group") == "profile"]
if prof:
    md += ["", "## `leantrain profile` of single stages (2 warm-up + 5 timed steps, median; against its own baseline)", "",
           head.format("checkpointed")]
    md += [line(r, ",".join(r.get("stages", [])) or "none") for r in prof]
    if any(r.get("timing_drifted") for r in prof):
        md.append("\nprofile: the baseline's first and last medians differ by more than 10%: its times are unreliable.")
ok = [r for r in rows if r.get("group") in ("checkpoint", "optimizer") and "peak_allocated_bytes" in r]
by = {r["config"]: r for r in ok}
if "ckpt-none" in by and "opt-sgd" in by:  # the same configuration run twice: the timing noise
    a, b = by["ckpt-none"]["img_per_s"], by["opt-sgd"]["img_per_s"]
    md += ["", f"timing noise: ckpt-none and opt-sgd are the same run: {a} and {b} img/s ({100 * (b - a) / a:+.1f}%)."]
bad = [r["config"] for r in ok if r.get("selection_ok") is False]
if bad: md += ["", "checkpoint regex selected other modules than the stages named: " + ", ".join(bad) + " (see modules_recomputed_list)"]
n_eq = sum(1 for r in ok if r.get("plan_equals_measured"))
md += ["", f"plan == measured (peak allocated, to the byte): {n_eq} of {len(ok)} runs;"
       f" {sum(1 for r in rows if r.get('group') in ('checkpoint', 'optimizer')) - len(ok)} runs failed."]
open(f"{out}/resnet_scatter.md", "w").write("\n".join(md) + "\n")

# The seed's chart: peak memory (y) against throughput (x), one labelled point per run.
pts = [r for r in ok if r.get("img_per_s")]
if pts:
    W, H, L, B, T, R = 760, 480, 70, 50, 30, 150
    xs = [r["img_per_s"] for r in pts]; ys = [r["peak_allocated_bytes"] / 2**20 for r in pts]
    x0, x1 = min(xs) * 0.95, max(xs) * 1.05; y0, y1 = min(ys) * 0.95, max(ys) * 1.05
    sx = lambda x: L + (x - x0) / (x1 - x0 or 1) * (W - L - R); sy = lambda y: H - B - (y - y0) / (y1 - y0 or 1) * (H - B - T)
    s = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="11">',
         f'<rect width="{W}" height="{H}" fill="white"/>',
         f'<text x="{L}" y="18" font-size="13">{model} B{batch} {precision} on {device}: peak memory vs throughput (down and right is better)</text>',
         f'<line x1="{L}" y1="{H - B}" x2="{W - R}" y2="{H - B}" stroke="black"/><line x1="{L}" y1="{T}" x2="{L}" y2="{H - B}" stroke="black"/>',
         f'<text x="{(L + W - R) / 2}" y="{H - 12}" text-anchor="middle">img/s (steps 2..{steps})</text>',
         f'<text x="16" y="{(T + H - B) / 2}" transform="rotate(-90 16 {(T + H - B) / 2})" text-anchor="middle">peak allocated MiB</text>']
    for k in range(5):
        xv = x0 + (x1 - x0) * k / 4; yv = y0 + (y1 - y0) * k / 4
        s.append(f'<text x="{sx(xv):.1f}" y="{H - B + 15}" text-anchor="middle">{xv:.1f}</text>')
        s.append(f'<text x="{L - 6}" y="{sy(yv) + 4:.1f}" text-anchor="end">{yv:.0f}</text>')
    for r, x, y in zip(pts, xs, ys):
        opt = r["group"] == "optimizer"
        label = r["optimizer"] if opt else (r["checkpoint"] if r["stages"] else "none")
        s.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="4" fill="{"#d62728" if opt else "#1f77b4"}">'
                 f'<title>{r["config"]}: {y:.1f} MiB, {x} img/s</title></circle>')
        s.append(f'<text x="{sx(x) + 6:.1f}" y="{sy(y) - 5:.1f}">{label.replace("&", "&amp;").replace("<", "&lt;")}</text>')
    s.append("</svg>")
    open(f"{out}/resnet_scatter.svg", "w").write("\n".join(s) + "\n")
print("\n".join(md))
PY
echo "resnet_scatter: done in $((SECONDS - t_all))s: $JSONL, $OUT/resnet_scatter.md, $OUT/resnet_scatter.svg"
