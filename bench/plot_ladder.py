#!/usr/bin/env python3
"""Plot the memory ladder (BENCHMARKS.md section 1) as a self-contained SVG, standard library only.

Reads either a results file as committed (bench/results/ladder-*.json: an object with "gpu",
"commit", "model" and "runs") or the JSON lines bench/ladder.sh writes ($OUT/ladder.jsonl: one
run per line, no metadata; pass --gpu/--commit). Draws two panels over the rungs: peak allocated
GiB (log scale) and img/s (log scale), leantrain and PyTorch side by side; the leantrain-only
rungs (8-bit AdamW, fused step) sit on a shaded band.

  python3 bench/plot_ladder.py bench/results/ladder-vitl16-h200-c68e6ec.json --pytorch-label "PyTorch 2.11" \
      -o docs/ladder-vitl16-h200.svg
  python3 bench/plot_ladder.py $OUT/ladder.jsonl --gpu "NVIDIA H200" --commit abc1234 -o $OUT/ladder.svg
"""
import argparse
import json
import math
import sys
from xml.sax.saxutils import escape

GIB = float(1 << 30)
# What each rung adds (BENCHMARKS.md, bench/ladder.sh); unknown rung ids are shown as they are.
RUNG_LABELS = {
    "1": ("1", "fp32, Adam", "batch 64"),
    "2": ("2", "16-mixed", ""),
    "3": ("3", "bf16-true", ""),
    "4": ("4", "+ batch 16", ""),
    "5": ("5", "+ micro-", "batch 4"),
    "6": ("6", "+ SGD", ""),
    "7": ("7", "+ checkpoint", "blocks"),
    "8": ("8", "+ micro-", "batch 1"),
    "5ws32": ("5'", "rung 5, 32 MiB", "GEMM workspace"),
    "7buf": ("7'", "rung 7 with a", "gradient buffer"),
    "8buf": ("8'", "rung 8 with a", "gradient buffer"),
    "8bit": ("8-bit", "rung 5 with", "AdamW 8-bit"),
    "fused": ("fused", "fused step,", "batch 1, no GEMM workspace"),
}
LEANTRAIN_ONLY = {"5ws32", "7buf", "8buf", "8bit", "fused"}
COLORS = {"leantrain": "#1f6fb4", "pytorch": "#ee7f2d"}
NAMES = {"leantrain": "leantrain", "pytorch": "PyTorch"}


def load(path):
    text = open(path).read()
    meta = {}
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        doc = None
    if isinstance(doc, dict) and "runs" in doc:
        meta = {k: doc.get(k) for k in ("gpu", "commit", "model", "command")}
        runs = doc["runs"]
    elif isinstance(doc, list):
        runs = doc
    else:  # JSON lines; bench/ladder.sh also echoes non-JSON noise at times: skip it
        runs = []
        for line in text.splitlines():
            line = line.strip()
            if line.startswith("{"):
                try:
                    runs.append(json.loads(line))
                except json.JSONDecodeError:
                    pass
    return meta, runs


def figures(runs):
    """rung id -> system -> {"gib": float|None, "ips": float|None, "err": str|None}, rung order."""
    out, order = {}, []
    for r in runs:
        system = r.get("system")
        if system not in COLORS:
            continue
        rung = str(r.get("rung"))
        if rung not in out:
            out[rung] = {}
            order.append(rung)
        peak = r.get("peak_allocated_bytes", r.get("peak_allocated"))
        ips = r.get("img_per_s")
        err = None
        if r.get("rc", 0) not in (0, None) or peak is None:
            err = "failed" if r.get("rc", 0) not in (0, None) else "no figure"
        out[rung][system] = {"gib": peak / GIB if peak else None, "ips": ips, "err": err}
    # Known rungs in ladder order, then anything else in file order.
    known = [k for k in RUNG_LABELS if k in out]
    return out, known + [k for k in order if k not in RUNG_LABELS]


def nice_log_ticks(lo, hi):
    """1-2-5 ticks covering [lo, hi]; returns (axis_lo, axis_hi, ticks)."""
    e0, e1 = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    cands = [m * 10 ** e for e in range(e0 - 1, e1 + 1) for m in (1, 2, 5)]
    below = [c for c in cands if c <= lo]
    above = [c for c in cands if c >= hi]
    a_lo, a_hi = (max(below) if below else lo), (min(above) if above else hi)
    return a_lo, a_hi, [c for c in cands if a_lo <= c <= a_hi]


def fmt_tick(v):
    return ("%g" % v) if v < 1000 else "{:,}".format(int(v))


def fmt_val(v, unit):
    if unit == "GiB":
        return "%.2f" % v
    return "%.0f" % v if v >= 10 else "%.1f" % v


class Svg:
    def __init__(self, w, h):
        self.w, self.h, self.parts = w, h, []

    def add(self, s):
        self.parts.append(s)

    def text(self, x, y, s, size=12, anchor="start", weight="normal", fill="#222", extra=""):
        self.add('<text x="%.1f" y="%.1f" font-size="%g" text-anchor="%s" font-weight="%s" fill="%s"%s>%s</text>'
                 % (x, y, size, anchor, weight, fill, extra, escape(s)))

    def line(self, x1, y1, x2, y2, stroke="#ccc", width=1, dash=None):
        d = ' stroke-dasharray="%s"' % dash if dash else ""
        self.add('<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="%g"%s/>'
                 % (x1, y1, x2, y2, stroke, width, d))

    def rect(self, x, y, w, h, fill, extra="", title=None):
        tail = "><title>%s</title></rect>" % escape(title) if title else "/>"
        self.add('<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"%s%s' % (x, y, w, h, fill, extra, tail))

    def render(self):
        head = ('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" '
                'font-family="DejaVu Sans, Helvetica, Arial, sans-serif">\n' % (self.w, self.h, self.w, self.h))
        return head + '<rect width="100%" height="100%" fill="white"/>\n' + "\n".join(self.parts) + "\n</svg>\n"


def panel(svg, data, rungs, key, unit, title, top, height, left, width):
    vals = [d[key] for r in rungs for d in data[r].values() if d[key]]
    if not vals:
        svg.text(left + width / 2, top + height / 2, "no %s figures" % unit, anchor="middle")
        return
    a_lo, a_hi, ticks = nice_log_ticks(min(vals), max(vals))
    ly0, ly1 = math.log10(a_lo), math.log10(a_hi)

    def y(v):
        return top + height - (math.log10(v) - ly0) / (ly1 - ly0) * height

    svg.text(left, top - 10, title, size=13, weight="bold")
    for t in ticks:
        svg.line(left, y(t), left + width, y(t), stroke="#e4e4e4")
        svg.text(left - 6, y(t) + 4, fmt_tick(t), size=11, anchor="end", fill="#555")
    svg.line(left, top, left, top + height, stroke="#888")
    svg.line(left, top + height, left + width, top + height, stroke="#888")
    slot = width / len(rungs)
    bar = min(33.0, slot * 0.39)
    for i, r in enumerate(rungs):
        cx = left + slot * (i + 0.5)
        systems = [s for s in ("leantrain", "pytorch") if s in data[r] or r not in LEANTRAIN_ONLY]
        for j, s in enumerate(systems):
            x = cx + (j - len(systems) / 2.0) * bar
            d = data[r].get(s)
            if d is None:
                svg.text(x + bar / 2, top + height - 4, "—", size=11, anchor="middle", fill="#999")
                continue
            v = d[key]
            if not v or d["err"]:
                svg.text(x + bar / 2, top + height - 4, "×", size=13, anchor="middle", fill="#c00",
                         extra=' font-weight="bold"')
                continue
            svg.rect(x + 1, y(v), bar - 2, top + height - y(v), COLORS[s],
                     title="%s, rung %s: %s %s" % (NAMES[s], r, fmt_val(v, unit), unit))
            svg.text(x + bar / 2, y(v) - 4, fmt_val(v, unit), size=9.5, anchor="middle", fill="#333")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("results", help="bench/results/ladder-*.json or a ladder.jsonl")
    ap.add_argument("-o", "--output", required=True, help="SVG file to write")
    ap.add_argument("--gpu", help="GPU name (default: from the results file)")
    ap.add_argument("--commit", help="commit the binaries were built from (default: from the results file)")
    ap.add_argument("--model", help="model line under the title (default: from the results file)")
    ap.add_argument("--pytorch-label", default="PyTorch", help="legend name of the peer (e.g. 'PyTorch 2.11')")
    args = ap.parse_args()
    NAMES["pytorch"] = args.pytorch_label.strip() or "PyTorch"

    meta, runs = load(args.results)
    data, rungs = figures(runs)
    if not rungs:
        sys.exit("plot_ladder.py: no leantrain or PyTorch runs in %s" % args.results)
    gpu = args.gpu or meta.get("gpu") or "unknown GPU"
    commit = args.commit or meta.get("commit") or "unknown commit"
    model = args.model or meta.get("model") or "ViT-L/16 224x224x3, 10 classes, synthetic images, 6 optimizer steps"

    left, right, width = 70, 20, max(600, 86 * len(rungs))
    W = left + width + right
    top1, h1, gap, h2 = 120, 250, 110, 170
    H = top1 + h1 + gap + h2 + 95
    svg = Svg(W, H)
    svg.text(left, 28, "%s memory ladder: leantrain vs PyTorch, %s, commit %s" % (model.split(" ")[0], gpu, commit),
             size=16, weight="bold")
    svg.text(left, 48, model + "; each rung adds one technique to the one before", size=11.5, fill="#555")

    # Whole-ladder reduction factors, as the README states them.
    lt = [data[r]["leantrain"]["gib"] for r in rungs if data[r].get("leantrain") and data[r]["leantrain"]["gib"]]
    pt = [data[r]["pytorch"]["gib"] for r in rungs if data[r].get("pytorch") and data[r]["pytorch"]["gib"]]
    notes = []
    if "1" in data and data["1"].get("leantrain", {}).get("gib") and lt:
        notes.append("leantrain %.2f → %.2f GiB (%.1f× less)" % (data["1"]["leantrain"]["gib"], min(lt),
                                                               data["1"]["leantrain"]["gib"] / min(lt)))
    if "1" in data and data["1"].get("pytorch", {}).get("gib") and pt:
        notes.append("PyTorch %.2f → %.2f GiB (%.1f× less)" % (data["1"]["pytorch"]["gib"], min(pt),
                                                             data["1"]["pytorch"]["gib"] / min(pt)))
    if notes:
        svg.text(left, 66, "; ".join(notes), size=11.5, fill="#555")

    # Legend.
    lx = left
    for s in ("leantrain", "pytorch"):
        svg.rect(lx, 78, 12, 12, COLORS[s])
        svg.text(lx + 17, 89, NAMES[s], size=12)
        lx += 130
    svg.rect(lx, 78, 12, 12, "#f1f1f1", extra=' stroke="#ccc"')
    svg.text(lx + 17, 89, "leantrain only (no PyTorch rung)", size=12)
    svg.text(lx + 245, 89, "× failed run", size=12, fill="#c00")

    # Shade the leantrain-only rungs across both panels.
    slot = width / len(rungs)
    for i, r in enumerate(rungs):
        if r in LEANTRAIN_ONLY:
            svg.rect(left + slot * i + 1, top1 - 4, slot - 2, h1 + gap + h2 + 4, "#f1f1f1")
            svg.text(left + slot * (i + 0.5), top1 + 10, "leantrain", size=10, anchor="middle", fill="#777")
            svg.text(left + slot * (i + 0.5), top1 + 22, "only", size=10, anchor="middle", fill="#777")

    panel(svg, data, rungs, "gib", "GiB", "Peak allocated memory, GiB (log scale; lower is better)", top1, h1, left, width)
    # Rung labels under the memory panel (shared by both panels).
    for i, r in enumerate(rungs):
        cx = left + slot * (i + 0.5)
        lab = RUNG_LABELS.get(r, (r, "", ""))
        svg.text(cx, top1 + h1 + 16, lab[0], size=12, anchor="middle", weight="bold")
        svg.text(cx, top1 + h1 + 30, lab[1], size=10.5, anchor="middle", fill="#444")
        svg.text(cx, top1 + h1 + 43, lab[2], size=10.5, anchor="middle", fill="#444")
    panel(svg, data, rungs, "ips", "img/s", "Throughput, images/s (log scale; higher is better)", top1 + h1 + gap, h2,
          left, width)
    for k, line in enumerate((
            "Peak: torch.cuda.max_memory_allocated() for PyTorch, leantrain's peak allocated bytes (same meaning:",
            "live tensor bytes as the allocator rounds them, CUDA context excluded). From bench/ladder.sh",
            "(bench/gpu_session.sh ladder); rungs 7 and 8 accumulate breadth-first (--fused-step); 7' and 8' with a gradient buffer.")):
        svg.text(left, H - 52 + 14 * k, line, size=10.5, fill="#555")
    with open(args.output, "w") as f:
        f.write(svg.render())
    print("wrote %s (%d rungs)" % (args.output, len(rungs)))


if __name__ == "__main__":
    main()
