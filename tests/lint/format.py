#!/usr/bin/env python3
"""Fails when a line a change touches is not laid out as .clang-format says.

The touched lines are those of the C files (.c, .h) under src/, include/,
tools/, tests/ and bench/ that differ from HEAD's parent: the lines HEAD's
own commit wrote and those the working tree and the index change on top of
it (`git diff -U0 HEAD~1`), plus every line of a new file git does not
ignore yet. With no parent (a root commit, a shallow clone) only the
uncommitted changes count. `clang-format --style=file --lines=A:B` lays out
those ranges, as `git clang-format` would; where that changes a line, the
test prints file:line, the lines as they are and as clang-format writes
them. The rest of the tree keeps its layout, and a region between
`// clang-format off` and `// clang-format on` (a hand-laid table, an error
message) is left as it is. So the tree converges on one format change by
change, with no commit that reformats everything (docs/ARCHITECTURE.md §9).

Skips (exit 0, "skipped: ...") without git, without clang-format 14 or
newer, or outside a git work tree (a source tarball). KVF_CLANG_FORMAT names
the binary; otherwise clang-format-14, then clang-format, from PATH.
Usage: format.py REPO_ROOT
"""
import difflib
import os
import pathlib
import re
import shutil
import subprocess
import sys

FOLDERS = ("src", "include", "tools", "tests", "bench")
SUFFIXES = (".c", ".h")
MIN_MAJOR = 14  # the oldest clang-format that reads every option of .clang-format
HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@")


def skip(why):
    print(f"format: skipped: {why}")
    return 0


def git(root, *args):
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, encoding="utf-8", errors="replace")


def find_clang_format():
    """(the clang-format to run, None), or (None, why there is none)."""
    names = [os.environ["KVF_CLANG_FORMAT"]] if os.environ.get("KVF_CLANG_FORMAT") else [
        f"clang-format-{MIN_MAJOR}", "clang-format"]
    for name in names:
        exe = shutil.which(name)
        if not exe:
            continue
        out = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout
        m = re.search(r"version (\d+)\.", out)
        if m and int(m.group(1)) >= MIN_MAJOR:
            return exe, None
        said = out.strip().splitlines()[0] if out.strip() else "of no version it names"
        return None, f"{exe} is {said}; .clang-format needs clang-format {MIN_MAJOR} or newer"
    return None, f"no {' or '.join(names)} on PATH (scripts/setup.sh installs it)"


def touched(root):
    """{path relative to root: [(first, last), ...]} of the touched lines, and what they are against."""
    base = "HEAD~1" if git(root, "rev-parse", "--verify", "-q", "HEAD~1^{commit}").returncode == 0 else "HEAD"
    if base == "HEAD" and git(root, "rev-parse", "--verify", "-q", "HEAD^{commit}").returncode != 0:
        base = None  # no commit yet: every file is new
    pathspec = [f":(glob){d}/**/*{s}" for d in FOLDERS for s in SUFFIXES]
    ranges = {}
    if base:
        diff = git(root, "-c", "core.quotePath=false", "diff", "-U0", "--no-color", "--no-ext-diff", "--find-renames",
                   "--src-prefix=a/", "--dst-prefix=b/", base, "--", *pathspec)
        if diff.returncode != 0:
            raise RuntimeError(f"git diff {base}: {diff.stderr.strip()}")
        path = None
        for line in diff.stdout.splitlines():
            if line.startswith("+++ "):
                path = line[6:] if line.startswith("+++ b/") else None  # "+++ /dev/null": deleted
            elif path and (m := HUNK.match(line)):
                first, count = int(m.group(1)), int(m.group(2) or 1)
                if count:  # a hunk that only deletes touches no line of the file
                    ranges.setdefault(path, []).append((first, first + count - 1))
    new = git(root, "-c", "core.quotePath=false", "ls-files", "--others", "--exclude-standard", "--", *pathspec)
    for path in new.stdout.splitlines():
        n = (root / path).read_bytes().count(b"\n")
        if n:
            ranges[path] = [(1, n)]
    return ranges, base


def check(root, exe, path, spans):
    """The file's touched lines that clang-format would lay out otherwise, as printable problems."""
    source = (root / path).read_text(encoding="utf-8", errors="replace")  # style.py fails non-UTF-8
    args = [exe, "--style=file"] + [f"--lines={a}:{b}" for a, b in spans] + [path]
    run = subprocess.run(args, capture_output=True, encoding="utf-8", errors="replace", cwd=root)
    if run.returncode != 0:
        return [f"{path}: clang-format failed: {run.stderr.strip()}"]
    if run.stdout == source:
        return []
    old, new = source.split("\n"), run.stdout.split("\n")
    problems = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        # lines i1+1..i2 change (an insertion: between i1 and i1+1); a change
        # clang-format makes around the touched lines (an aligned comment
        # next to them) is not the change's to make
        first, last = (i1 + 1, i2) if i2 > i1 else (i1, i1 + 1)
        if tag == "equal" or not any(a <= last and first <= b for a, b in spans):
            continue
        where = f"{path}:{i1 + 1}" + (f"-{i2}" if i2 > i1 + 1 else "")
        body = [f"    - {line}" for line in old[i1:i2]] + [f"    + {line}" for line in new[j1:j2]]
        problems.append(f"{where}: clang-format lays this out as:\n" + "\n".join(body))
    return problems


def main(root):
    root = pathlib.Path(root).resolve()
    if not shutil.which("git"):
        return skip("no git on PATH")
    inside = git(root, "rev-parse", "--is-inside-work-tree")
    if inside.returncode != 0 or inside.stdout.strip() != "true":
        return skip(f"{root} is not a git work tree")
    top = pathlib.Path(git(root, "rev-parse", "--show-toplevel").stdout.strip()).resolve()
    if top != root:
        return skip(f"{root} is inside the git work tree {top}, not its top")
    exe, why = find_clang_format()
    if not exe:
        return skip(why)
    ranges, base = touched(root)
    problems = [p for path in sorted(ranges) if (root / path).is_file() for p in check(root, exe, path, ranges[path])]
    lines = sum(b - a + 1 for spans in ranges.values() for a, b in spans)
    against = {"HEAD~1": "HEAD's commit and the uncommitted changes",
               "HEAD": "the uncommitted changes; HEAD has no parent here",
               None: "every file; no commit yet"}[base]
    for p in problems:
        print(p)
    if problems:
        print(f"format: {len(problems)} regions of {against} are not .clang-format's layout; "
              f"`clang-format -i --lines=A:B FILE` writes them so (or fence a hand layout with "
              f"// clang-format off/on)")
        return 1
    print(f"format: {lines} touched lines in {len(ranges)} C files ({against}) follow .clang-format")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parents[2]))
