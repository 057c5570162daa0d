#!/usr/bin/env python3
"""Fails when an #include points upward in kvfold's layers.

src/ is layered, each folder using only itself and the folders before it:
    core -> io -> tok -> kv -> attn -> model -> session
and the CLI (tools/kvfold) uses the library through include/kvfold.h only,
never a header under src/. Usage: layers.py REPO_ROOT
"""
import pathlib
import re
import sys

LAYERS = ["core", "io", "tok", "kv", "attn", "model", "session"]
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def layer_of(path):
    """The layer of a header named as included ("kv/cache.h", "kv/rules.def"), or None."""
    head = path.split("/", 1)[0]
    return LAYERS.index(head) if head in LAYERS and "/" in path else None


def main(root):
    root = pathlib.Path(root)
    problems = []
    for f in sorted((root / "src").rglob("*")):
        if f.suffix not in (".c", ".h", ".def"):
            continue
        rel = f.relative_to(root / "src")
        if rel.parts[0] not in LAYERS:
            problems.append(f"{f}: not in a layer folder ({', '.join(LAYERS)})")
            continue
        own = LAYERS.index(rel.parts[0])
        for inc in INCLUDE.findall(f.read_text()):
            if inc == "kvfold.h":
                continue
            to = layer_of(inc)
            if to is None and "/" in inc:
                problems.append(f"{f}: includes \"{inc}\", which is in no layer")
            elif to is not None and to > own:
                problems.append(f"{f}: {LAYERS[own]} includes \"{inc}\" from the later layer {LAYERS[to]}")
    for f in sorted((root / "tools").rglob("*.[ch]")):
        for inc in INCLUDE.findall(f.read_text()):
            if layer_of(inc) is not None:
                problems.append(f"{f}: the CLI includes the library's internal \"{inc}\" (use kvfold.h)")
    for p in problems:
        print(p)
    print(f"layers: {len(problems)} upward or internal includes" if problems else "layers: every include points down")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parents[2]))
