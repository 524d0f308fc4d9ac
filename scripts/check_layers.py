#!/usr/bin/env python3
"""Fails when a file of src/ or include/leantrain/ includes a header of a higher layer.

The layers, their files and the known exceptions are declared in src/layers.txt. Only quoted
includes ("dir/file.h") are checked; system headers (<...>) are not the project's.
Usage: scripts/check_layers.py [--graph]   (--graph prints the layer-to-layer include counts)
"""
import fnmatch
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPEC = "src/layers.txt"
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def die(msg):
    print(f"leantrain: error: {msg}", file=sys.stderr)
    sys.exit(2)


def read_spec():
    globs, allow = [], {}  # globs: (pattern, rank, layer); allow: (from, to) -> why
    names, rank = set(), 0
    with open(os.path.join(ROOT, SPEC)) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            where = f"{SPEC}:{n}"
            kind, _, rest = line.partition(" ")
            head, sep, tail = rest.partition(":")
            if kind == "layer" and sep:
                rank += 1
                layers = head.split()
                for name in layers:
                    if name in names:
                        die(f"{where}: layer '{name}' declared twice (keep one line per layer)")
                    names.add(name)
                for pattern in tail.split():
                    globs.append((pattern, rank, "/".join(layers)))
            elif kind == "allow" and sep and "->" in head:
                src, _, dst = (s.strip() for s in head.partition("->"))
                if not tail.strip():
                    die(f"{where}: allow {src} -> {dst} has no reason (write why after the colon)")
                allow[(src, dst)] = [tail.strip(), False]
            else:
                die(f"{where}: cannot read '{line}' (expected 'layer NAMES: GLOBS' or 'allow FILE -> INCLUDE: WHY')")
    return globs, allow


def layer_of(path, globs):
    best = None
    for pattern, rank, name in globs:
        if fnmatch.fnmatchcase(path, pattern) and (best is None or len(pattern) > len(best[0])):
            best = (pattern, rank, name)
    return best


def resolve(inc, path):
    """The repository path of a quoted include: src/ and include/ are the include directories."""
    for base in ("src", "include", os.path.dirname(path)):
        cand = os.path.normpath(os.path.join(base, inc))
        if os.path.isfile(os.path.join(ROOT, cand)):
            return cand
    return None


def main():
    globs, allow = read_spec()
    files = []
    for top in ("src", "include"):
        for d, _, names in os.walk(os.path.join(ROOT, top)):
            for name in names:
                if name.endswith((".h", ".cpp", ".cu", ".cuh", ".def", ".inc")):
                    files.append(os.path.relpath(os.path.join(d, name), ROOT))
    bad, unowned, graph = [], [], {}
    for path in sorted(files):
        own = layer_of(path, globs)
        if own is None:
            unowned.append(path)
            continue
        with open(os.path.join(ROOT, path), errors="replace") as f:
            for n, line in enumerate(f, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                target = resolve(m.group(1), path)
                dst = layer_of(target, globs) if target else None
                if dst is None:
                    continue  # not the project's file (or generated): nothing to check
                graph[(own[2], dst[2])] = graph.get((own[2], dst[2]), 0) + 1
                if dst[1] <= own[1]:
                    continue
                key = (path, m.group(1))
                if key in allow:
                    allow[key][1] = True
                    continue
                bad.append(f"{path}:{n}: includes \"{m.group(1)}\": layer {own[2]} may not include {dst[2]}, a higher layer")
    if "--graph" in sys.argv:
        for (a, b), count in sorted(graph.items()):
            print(f"{a:>28} -> {b:<28} {count}")
    for path in unowned:
        bad.append(f"{path}: in no layer (add a glob to {SPEC})")
    for (src, dst), (_, used) in allow.items():
        if not used:
            bad.append(f"{SPEC}: allow {src} -> {dst} no longer needed (remove the line)")
    for line in bad:
        print(line, file=sys.stderr)
    if bad:
        print(f"leantrain: error: layer check: {len(bad)} problem(s) above "
              f"(move the code down, pass it through a narrow interface, or, as a last resort, add an 'allow' line with the reason to {SPEC})",
              file=sys.stderr)
        return 1
    print(f"layer check: {len(files)} files, no include climbs ({len(allow)} allowed exceptions in {SPEC})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
