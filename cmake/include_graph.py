#!/usr/bin/env python3
"""The include graph of kvlab by folder, and the layering rules it must obey.

    python3 cmake/include_graph.py [ROOT]            # the graph: one line per folder edge
    python3 cmake/include_graph.py [ROOT] --fine     # every sub-folder its own node
    python3 cmake/include_graph.py [ROOT] --check    # exit 1 naming every violation

Reads the `#include "..."` lines of the C++/CUDA sources (.h .cuh .cu .cpp) under
reference/ sim/ gpu/ experiments/ (the repository root is the include root, so the path of
an include names the layer it comes from). Nodes: reference, sim, gpu, gpu/runtime (the
runtime sub-layer above gpu/ and sim/) and each sub-folder of experiments/ (experiments/
itself for its top-level files); --fine splits every layer into its sub-folders.

The rules (README.md, "Layers"):
  1. reference/ includes nothing outside reference/ (it is the truth everything mirrors);
  2. sim/ includes nothing from gpu/ (the control plane is CUDA-free);
  3. gpu/ outside gpu/runtime/ includes nothing from sim/ nor from gpu/runtime/ (kernels
     know no control plane; the runtime layer sits above both);
  4. nothing outside experiments/ includes experiments/, nothing includes analysis/;
  5. the folders of experiments/ include each other without a cycle;
  6. the driver reaches the GPU only through its device interface (experiments/device/
     device.h): outside experiments/cuda/ (its CUDA backend) nothing in experiments/ includes
     gpu/ or tests KVLAB_HAVE_CUDA (a build links the CUDA backend or the stub library
     experiments/stub/ instead). The Python package's bindings (experiments/python/) bind the
     kernels themselves and are exempt.
"""
import argparse
import os
import re
import sys
from collections import defaultdict

LAYERS = ("reference", "sim", "gpu", "experiments")
SOURCE_EXT = (".h", ".cuh", ".cu", ".cpp")
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)


def node_of(path, fine=False):
    """The graph node of a repository-relative path (file or include target)."""
    parts = path.split("/")
    top = parts[0]
    if len(parts) < 3:  # a file directly in a layer folder: gpu/dispatch.cuh, experiments/main.cpp
        return top
    if fine or top == "experiments" or (top == "gpu" and parts[1] == "runtime"):
        return top + "/" + parts[1]
    return top


def scan(root):
    """[(source path, included path, line number)] for every quoted include of the layers."""
    edges = []
    for layer in LAYERS:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, layer)):
            dirnames.sort()
            for name in sorted(filenames):
                if not name.endswith(SOURCE_EXT):
                    continue
                full = os.path.join(dirpath, name)
                rel = os.path.relpath(full, root).replace(os.sep, "/")
                with open(full, encoding="utf-8", errors="replace") as f:
                    text = f.read()
                if layer == "experiments" and "KVLAB_HAVE_CUDA" in text and not rel.startswith(
                        ("experiments/cuda/", "experiments/python/")):
                    line = text.count("\n", 0, text.index("KVLAB_HAVE_CUDA")) + 1
                    edges.append((rel, "#if KVLAB_HAVE_CUDA", line))
                for m in INCLUDE_RE.finditer(text):
                    target = m.group(1)
                    if target.split("/")[0] not in LAYERS + ("analysis", "tests"):
                        continue  # a system or generated header ("kvlab_git_info.h")
                    edges.append((rel, target, text.count("\n", 0, m.start()) + 1))
    return edges


def folder_graph(edges, fine=False):
    """{(from node, to node): count} without self edges."""
    g = defaultdict(int)
    for src, dst, _ in edges:
        if dst.startswith("#"):
            continue  # a directive, not an include
        a, b = node_of(src, fine), node_of(dst, fine)
        if a != b:
            g[(a, b)] += 1
    return dict(g)


def cycles(graph, prefix):
    """Strongly connected components (> 1 node) among the nodes starting with prefix."""
    nodes = sorted({n for e in graph for n in e if n.startswith(prefix)})
    adj = {n: sorted(b for (a, b) in graph if a == n and b.startswith(prefix)) for n in nodes}
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]

    def visit(v):  # Tarjan
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in adj[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for n in nodes:
        if n not in index:
            visit(n)
    return sorted(out)


def violations(edges):
    """Human-readable rule violations, one per offending include (plus one per cycle)."""
    bad = []
    for src, dst, line in edges:
        s, d = src.split("/"), dst.split("/")
        where = f"{src}:{line}: includes {dst}"
        runtime = len(s) > 2 and s[0] == "gpu" and s[1] == "runtime"
        backend = len(s) > 2 and s[0] == "experiments" and s[1] in ("cuda", "python")
        if dst == "#if KVLAB_HAVE_CUDA":
            bad.append(f"{src}:{line}: tests KVLAB_HAVE_CUDA (the driver links the CUDA backend "
                       "experiments/cuda/ or the stub library experiments/stub/ instead)")
        elif s[0] == "experiments" and not backend and d[0] == "gpu":
            bad.append(f"{where} (the driver reaches the GPU through experiments/device/device.h; "
                       "only experiments/cuda/ includes gpu/)")
        elif s[0] == "reference" and d[0] != "reference":
            bad.append(f"{where} (reference/ includes nothing outside reference/)")
        elif s[0] == "sim" and d[0] == "gpu":
            bad.append(f"{where} (sim/ includes nothing from gpu/)")
        elif s[0] == "gpu" and not runtime and d[0] == "sim":
            bad.append(f"{where} (gpu/ outside gpu/runtime/ includes nothing from sim/)")
        elif s[0] == "gpu" and not runtime and d[:2] == ["gpu", "runtime"]:
            bad.append(f"{where} (gpu/ outside gpu/runtime/ includes nothing from gpu/runtime/)")
        elif d[0] == "experiments" and s[0] != "experiments":
            bad.append(f"{where} (only experiments/ includes experiments/)")
        elif d[0] == "analysis":
            bad.append(f"{where} (nothing includes analysis/)")
    graph = folder_graph(edges)
    for comp in cycles(graph, "experiments"):
        inner = sorted(f"{a} -> {b} ({n})" for (a, b), n in graph.items()
                       if a in comp and b in comp)
        bad.append("include cycle between " + ", ".join(comp) + ": " + "; ".join(inner))
    return bad


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("root", nargs="?", default=os.path.join(os.path.dirname(__file__), ".."))
    ap.add_argument("--check", action="store_true", help="exit 1 on a layering violation")
    ap.add_argument("--fine", action="store_true", help="every sub-folder its own node")
    args = ap.parse_args(argv)
    root = os.path.abspath(args.root)
    if not all(os.path.isdir(os.path.join(root, layer)) for layer in LAYERS):
        print(f"include_graph: {root} is not a kvlab source tree (needs {', '.join(LAYERS)})",
              file=sys.stderr)
        return 2
    edges = scan(root)
    if args.check:
        bad = violations(edges)
        for b in bad:
            print(b)
        n = sum(1 for e in edges if not e[1].startswith("#"))
        print(f"include_graph: {n} includes, {len(bad)} layering violations")
        return 1 if bad else 0
    graph = folder_graph(edges, args.fine)
    for (a, b), n in sorted(graph.items()):
        print(f"{a} -> {b} ({n})")
    loops = cycles(graph, "")
    print("cycles: " + ("; ".join(" <-> ".join(c) for c in loops) if loops else "none"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
