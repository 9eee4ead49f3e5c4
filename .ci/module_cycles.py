#!/usr/bin/env python3
"""Import cycles between the crate's source files (not run by CI; a measure for reshaping).

    python3 .ci/module_cycles.py src

Each file's `crate::a::b`, `super::..` and `self::..` paths (in `use` lines and in code, test
modules left out) are resolved to the file that defines the module they name; the strongly
connected groups of that graph with more than one file are the cycles. Comments, doc links
included, are not imports. Paths are read as text:
a module reached only through a re-export of its parent counts as the parent."""
import os
import re
import sys
from collections import defaultdict

root = sys.argv[1] if len(sys.argv) > 1 else "src"
files = {}
for d, _, fs in os.walk(root):
    for f in fs:
        if f.endswith(".rs"):
            p = os.path.join(d, f)
            rel = os.path.relpath(p, root)[:-3].split(os.sep)
            if rel[-1] in ("mod", "lib", "main"):
                rel = rel[:-1]
            files[tuple(rel)] = p

def owner(path):
    parts = tuple(path)
    while parts and parts not in files:
        parts = parts[:-1]
    return parts if parts in files else None

edges = defaultdict(set)
pat = re.compile(r"crate((?:::[a-z_][a-z0-9_]*)+)")
for mod, p in files.items():
    text = open(p).read()
    text = re.split(r"#\[cfg\(test\)\]\s*mod tests", text)[0]
    # Comments (doc links included) name modules without importing them.
    text = re.sub(r"//[^\n]*", "", text)
    for m in pat.finditer(text):
        target = owner(m.group(1).strip(":").split("::"))
        if target is not None and target != mod and target != ():
            edges[mod].add(target)
    # super:: and self:: paths, relative to this module (a mod.rs / lib.rs is its folder's module)
    is_dir_module = os.path.basename(p) in ("mod.rs", "lib.rs", "main.rs")
    parent = mod[:-1] if mod else ()
    for m in re.finditer(r"\b(super|self)((?:::[a-z_][a-z0-9_]*)+)", text):
        base = parent if m.group(1) == "super" else mod
        target = owner(list(base) + m.group(2).strip(":").split("::"))
        if target is not None and target != mod and target != ():
            edges[mod].add(target)
    for m in re.finditer(r"use (super|self)::\{([^;]*)\};", text, re.S):
        base = parent if m.group(1) == "super" else mod
        for item in re.findall(r"([a-z_][a-z0-9_]*(?:::[a-z_][a-z0-9_]*)*)", m.group(2)):
            target = owner(list(base) + item.split("::"))
            if target is not None and target != mod and target != ():
                edges[mod].add(target)
    # use crate::{a::b, c}
    for m in re.finditer(r"use crate::\{([^;]*)\};", text, re.S):
        for item in re.findall(r"([a-z_][a-z0-9_]*(?:::[a-z_][a-z0-9_]*)*)", m.group(1)):
            target = owner(item.split("::"))
            if target is not None and target != mod and target != ():
                edges[mod].add(target)

# Tarjan's strongly connected components.
sys.setrecursionlimit(10000)
index, low, stack, on_stack, cycles = {}, {}, [], set(), []


def connect(v):
    index[v] = low[v] = len(index)
    stack.append(v)
    on_stack.add(v)
    for w in edges.get(v, ()):
        if w not in index:
            connect(w)
            low[v] = min(low[v], low[w])
        elif w in on_stack:
            low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        group = []
        while True:
            w = stack.pop()
            on_stack.discard(w)
            group.append(w)
            if w == v:
                break
        if len(group) > 1:
            cycles.append(group)


for v in list(files):
    if v not in index:
        connect(v)
print(f"{len(files)} files, {sum(len(e) for e in edges.values())} import edges, {len(cycles)} cycles (strongly connected groups of files)")
for c in sorted(cycles, key=len, reverse=True):
    print(f"  {len(c)} files: " + ", ".join(sorted("/".join(m) for m in c))[:400])
