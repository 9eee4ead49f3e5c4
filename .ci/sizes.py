#!/usr/bin/env python3
"""Source files over a line limit and functions over a length limit (not run by CI; a measure
for reshaping).

    python3 .ci/sizes.py src [--file-limit 800] [--fn-limit 150]

A file's lines are counted without its `#[cfg(test)] mod tests` block; a function's from its
`fn` line to its closing brace (test functions left out)."""
import argparse
import os
import re

parser = argparse.ArgumentParser()
parser.add_argument("root", nargs="?", default="src")
parser.add_argument("--file-limit", type=int, default=800)
parser.add_argument("--fn-limit", type=int, default=150)
args = parser.parse_args()

fn_start = re.compile(r"^(\s*)(pub(\([a-z:]+\))?\s+)?(const\s+)?(async\s+)?(unsafe\s+)?fn\s+(\w+)")
big_files, long_fns = [], []
for d, _, fs in os.walk(args.root):
    for f in fs:
        if not f.endswith(".rs"):
            continue
        path = os.path.join(d, f)
        lines = open(path).read().split("\n")
        cut = next((i for i, l in enumerate(lines) if l.startswith("#[cfg(test)]")), len(lines))
        code = lines[:cut]
        if len(code) > args.file_limit:
            big_files.append((len(code), path))
        i = 0
        while i < len(code):
            m = fn_start.match(code[i])
            if not m:
                i += 1
                continue
            depth, started, j = 0, False, i
            while j < len(code):
                # Braces in strings and comments are rare enough at this scale to ignore.
                line = re.sub(r"//.*", "", code[j])
                depth += line.count("{") - line.count("}")
                started = started or "{" in line
                if (started and depth <= 0) or (not started and line.rstrip().endswith(";")):
                    break
                j += 1
            if j - i + 1 > args.fn_limit:
                long_fns.append((j - i + 1, f"{path}:{i + 1} {m.group(7)}"))
            i += 1
print(f"files over {args.file_limit} lines (tests apart): {len(big_files)}")
for n, p in sorted(big_files, reverse=True):
    print(f"  {n:5} {p}")
print(f"functions over {args.fn_limit} lines: {len(long_fns)}")
for n, p in sorted(long_fns, reverse=True):
    print(f"  {n:5} {p}")
