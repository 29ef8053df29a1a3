#!/usr/bin/env python3
"""check-layers.py: the folders of the library and the programs form layers that only point
down. Reads every #include "..." of the C, header and CUDA files under the folders below and
fails (exit 1) when a file includes one of a higher layer, or when two folders include each
other, unless the edge is in KNOWN (each with the reason it is still there).

  scripts/check-layers.py           check; print violations
  scripts/check-layers.py --graph   also print the folder graph (for docs/architecture.md)

Tests, benchmarks, fuzz targets and examples sit above everything and are not checked."""
import os
import re
import sys

# lowest first; folders on one line share a layer and must not include each other
LAYERS = [
    ["common"],
    ["kernels"],
    ["kernels/cpu", "kernels/cuda"],
    ["runtime/format"],
    ["runtime/tokenizer"],
    ["runtime/model"],
    ["runtime/kv"],
    ["runtime/engine"],
    ["runtime/policies"],
    ["runtime/session"],
    ["runtime/backend"],
    ["runtime/api", "include"],
    ["calibrate"],
    ["mapgen", "eval"],
    ["runtime/serve"],
    ["runtime/cli"],
]
# edges that still point up, each with why; remove a line when its edge is gone
KNOWN = {
}

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
rank = {f: i for i, layer in enumerate(LAYERS) for f in layer}


def edges():
    out = {}
    for folder in rank:
        d = os.path.join(ROOT, folder)
        if not os.path.isdir(d):
            continue
        for name in sorted(os.listdir(d)):
            if not name.endswith((".c", ".h", ".cu")):
                continue
            path = os.path.join(d, name)
            text = open(path, encoding="utf-8", errors="replace").read()
            for inc in re.findall(r'^\s*#\s*include\s+"([^"]+)"', text, re.M):
                local = os.path.join(d, inc)
                target = os.path.relpath(os.path.dirname(os.path.normpath(local if os.path.exists(local) else os.path.join(ROOT, inc))), ROOT)
                if target == folder or target not in rank:
                    continue
                out.setdefault((folder, target), []).append(f"{folder}/{name} -> {inc}")
    return out


def main():
    e = edges()
    bad = []
    for (a, b), where in sorted(e.items()):
        up = rank[b] > rank[a] or (rank[b] == rank[a] and (b, a) in e)
        if up and (a, b) not in KNOWN:
            bad.append(f"{a} -> {b} points up ({where[0]}{' and %d more' % (len(where) - 1) if len(where) > 1 else ''})")
    if "--graph" in sys.argv:
        for f in [f for layer in LAYERS for f in layer]:
            below = sorted({b for (a, b) in e if a == f}, key=lambda x: (rank[x], x))
            print(f"{f:18} -> {', '.join(below) if below else '(nothing)'}")
    for (a, b), why in KNOWN.items():
        if (a, b) in e and rank[b] > rank[a]:
            print(f"check-layers: known upward edge {a} -> {b}: {why}")
    stale = [k for k in KNOWN if k not in e]
    for a, b in stale:
        print(f"check-layers: {a} -> {b} is gone: remove it from KNOWN")
    for b in bad:
        print(f"check-layers: {b}", file=sys.stderr)
    if bad or stale:
        return 1
    known = sum(1 for k in KNOWN if k in e)
    print(f"check-layers: {len(e)} folder edges, every one points down" + (f" but the {known} known above" if known else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
