#!/usr/bin/env python3
"""Fails when a C file of kvfold breaks the layout rules of .clang-format.

Every .c, .h and .def file under src/, include/, tools/, tests/ and bench/:
lines of at most ColumnLimit characters (read from the repository's
.clang-format, counted in characters, not bytes), spaces and no tabs, no
trailing spaces, LF line ends and a final newline; and no file of src/ or
tools/ over MAX_LINES lines (a file people can read in one sitting).
`clang-format --lines=A:B` reformats a region to the configuration; the tree
is not required to be clang-format's output as a whole (see
docs/ARCHITECTURE.md §9). Usage: style.py REPO_ROOT
"""
import pathlib
import re
import sys

FOLDERS = ["src", "include", "tools", "tests", "bench"]
SUFFIXES = {".c", ".h", ".def"}
MAX_LINES = 1000
SHORT = ("src", "tools")  # the product; tests and benchmarks may run longer


def config(root):
    """ColumnLimit and IndentWidth from .clang-format (a flat YAML map)."""
    text = (root / ".clang-format").read_text()
    def get(key):
        return int(re.search(rf"^{key}:\s*(\d+)", text, re.M).group(1))
    return get("ColumnLimit"), get("IndentWidth")


def check(root, path, limit, indent):
    """The file's problems, as "path:line: what"."""
    raw = path.read_bytes()
    problems = []
    if b"\r" in raw:
        problems.append(f"{path}: CR in line ends (LF only)")
    if raw and not raw.endswith(b"\n"):
        problems.append(f"{path}: no newline at the end")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return problems + [f"{path}: not UTF-8 ({e})"]
    lines = text.count("\n")
    if lines > MAX_LINES and path.relative_to(root).parts[0] in SHORT:
        problems.append(f"{path}: {lines} lines, over {MAX_LINES}: split it by concern")
    for n, line in enumerate(text.split("\n"), 1):
        if len(line) > limit:
            problems.append(f"{path}:{n}: {len(line)} characters, over {limit}")
        if "\t" in line:
            problems.append(f"{path}:{n}: a tab (indent with {indent} spaces)")
        if line != line.rstrip():
            problems.append(f"{path}:{n}: trailing whitespace")
    return problems


def main(root):
    root = pathlib.Path(root)
    limit, indent = config(root)
    files = sorted(f for d in FOLDERS for f in (root / d).rglob("*") if f.suffix in SUFFIXES and f.is_file())
    problems = [p for f in files for p in check(root, f, limit, indent)]
    for p in problems:
        print(p)
    print(f"style: {len(problems)} problems in {len(files)} files" if problems
          else f"style: {len(files)} files follow .clang-format's layout rules")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parents[2]))
