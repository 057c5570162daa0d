#!/usr/bin/env python3
"""The README runs as written: every `kvfold ...` / `build/kvfold ...` command
of every sh code block of README.md is run, from a scratch directory that
looks like the repository root (build/kvfold, models/, tests/, examples/), so
the files the commands write (kv.json, prefix.json, out/, rows.jsonl) land
there. A command exits 0 or the test fails, except those that need files this
machine cannot have, which are skipped with the reason printed:
LLaVA-1.5-7B (GGUF + mmproj, or the Hugging Face directory), Gemma-3-4B,
Qwen2.5-VL-7B, SmolVLM2-2.2B, the MileBench
data, and `make models-large`'s models when they were not fetched.
`kvfold serve` runs until it answers /health, on a free port (--port 0
appended: the README's port may be taken), then stops on SIGTERM.

usage: readme_test.py README KVFOLD MODELS_DIR SOURCE_DIR TMP_DIR
Exit 0 ok, 1 failure, 77 skipped (the `make models` files are absent).
"""
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import urllib.request

TIMEOUT = 120  # seconds per command; each runs in seconds on 2 cores
SMOL = "smollm2-135m-instruct-q4_1.gguf"

# Files no test machine has: (pattern on the path, why it is skipped).
UNAVAILABLE = [
    (re.compile(r"llava", re.I), "needs LLaVA-1.5-7B (GGUF + mmproj, or llava-hf/llava-1.5-7b-hf), "
     "which this machine cannot download"),
    (re.compile(r"gemma-3-4b", re.I), "needs Gemma-3-4B-it (GGUF + mmproj), which this machine cannot download"),
    (re.compile(r"qwen2\.5-vl-7b", re.I), "needs Qwen2.5-VL-7B-Instruct, which this machine cannot download"),
    (re.compile(r"smolvlm2", re.I), "needs SmolVLM2-2.2B-Instruct (GGUF + mmproj), which this machine cannot download"),
    (re.compile(r"milebench", re.I), "needs the MileBench data"),
    (re.compile(r"^models/qwen2\.5-coder-"), "needs `make models-large`, not fetched here"),
]
PATH_OPTIONS = ("-m", "--model", "--mmproj", "--data")


def commands(readme):
    """The kvfold command lines of README's sh blocks, continuation lines joined."""
    out, block, joined = [], None, ""
    with open(readme, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if block is None:
                if re.match(r"^```(sh|bash|shell|console)\s*$", line):
                    block = []
                continue
            if line.startswith("```"):
                block = None
                continue
            joined += line[:-1] + " " if line.endswith("\\") else line
            if line.endswith("\\"):
                continue
            cmd, joined = joined.strip(), ""
            if re.search(r"(?:^|[|;&]\s*)(?:\w+=\S*\s+)*(?:build/)?kvfold(?=\s|$)", cmd) and not cmd.startswith("#"):
                out.append(cmd)
    return out


def unavailable(cmd):
    """Why cmd cannot run here, or None."""
    try:
        words = shlex.split(cmd, comments=True)
    except ValueError:
        return None
    for opt, val in zip(words, words[1:]):
        if opt in PATH_OPTIONS and not os.path.exists(val):
            for pat, why in UNAVAILABLE:
                if pat.search(val):
                    return f"{why} ({val})"
    return None


def run_serve(cmd, env):
    """kvfold serve: up until /health answers, then a clean stop on SIGTERM."""
    argv = shlex.split(cmd, comments=True) + ["--port", "0"]
    p = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         text=True)
    try:
        lines = []
        for line in p.stderr:  # up to "kvfold: serve: listening on http://HOST:PORT (...)"
            lines.append(line)
            m = re.search(r"listening on (http://\S+:\d+)", line)
            if m:
                break
        else:
            return f"no 'listening on' line: {''.join(lines)[-800:]!r}"
        deadline = time.time() + 30
        while True:
            try:
                with urllib.request.urlopen(m.group(1) + "/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError as e:
                if time.time() > deadline:
                    return f"/health: {e}"
                time.sleep(0.2)
        p.send_signal(signal.SIGTERM)
        rc = p.wait(timeout=30)
        return None if rc == 0 else f"exit {rc} after SIGTERM: {p.stderr.read()[-500:]}"
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def main():
    readme, kvfold, models, source, tmp = (os.path.abspath(a) for a in sys.argv[1:6])
    if not os.path.exists(os.path.join(models, SMOL)):
        print(f"skipped: {models}/{SMOL} is absent (make models)")
        return 77
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(os.path.join(tmp, "build"))
    os.makedirs(os.path.join(tmp, "bin"))
    os.symlink(os.path.abspath(kvfold), os.path.join(tmp, "build", "kvfold"))
    os.symlink(os.path.abspath(kvfold), os.path.join(tmp, "bin", "kvfold"))
    os.symlink(os.path.abspath(models), os.path.join(tmp, "models"))
    for d in ("tests", "examples"):
        os.symlink(os.path.join(os.path.abspath(source), d), os.path.join(tmp, d))
    env = dict(os.environ, PATH=os.path.join(tmp, "bin") + os.pathsep + os.environ.get("PATH", ""))
    os.chdir(tmp)

    cmds = commands(readme)
    if len(cmds) < 10:
        print(f"FAIL: only {len(cmds)} kvfold commands found in {readme}")
        return 1
    failed, skipped = [], []
    for cmd in cmds:
        why = unavailable(cmd)
        if why:
            skipped.append(cmd)
            print(f"skip  {cmd}\n      {why}")
            continue
        t0 = time.time()
        if re.search(r"kvfold\s+serve\b", cmd):
            err = run_serve(cmd, env)
        else:
            try:
                p = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], env=env, stdin=subprocess.DEVNULL,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=TIMEOUT)
                err = None if p.returncode == 0 else f"exit {p.returncode}: {p.stderr[-800:]}"
            except subprocess.TimeoutExpired:
                err = f"still running after {TIMEOUT} s"
        print(f"{'ok  ' if err is None else 'FAIL'}  {time.time() - t0:5.1f} s  {cmd}")
        if err:
            print(f"      {err}")
            failed.append(cmd)
    print(f"{len(cmds) - len(failed) - len(skipped)} ran, {len(skipped)} skipped, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
