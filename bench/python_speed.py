#!/usr/bin/env python3
"""Decoding speed through Python against the CLI's, on the same file.

    bench/python_speed.py [--cli build/kvfold] [-n 64] [-t 2] [-r 7] MODEL.gguf [...]

For each model, greedy on the same prompt (so the same tokens) with the
same threads, r runs of each alternating, the best of each taken (this
VM's run-to-run spread is larger than the differences):
  - CLI: `kvfold generate --json`'s decode_tok_per_s, its decode calls over
    their time;
  - Python, decode: the same measure through the Python API (Session.decode
    timed alone, the sampler and text outside it);
  - Python, loop: Session.generate's tokens over its whole wall time, what a
    Python user sees (sampling, each piece's text and the decode calls).
Prints a markdown table.
"""
import argparse
import json
import subprocess
import time

import kvfold

PROMPT = "Once upon a time, in a small village by the sea, there lived an old lighthouse keeper who"


def cli_run(cli, model, n, threads):
    out = subprocess.run([cli, "generate", "-m", model, "-p", PROMPT, "-n", str(n), "-t", str(threads), "--json"],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)["timings"]["decode_tok_per_s"]


def py_decode(m, n):
    """Decode calls over their time, as the CLI counts them."""
    with m.session() as s, kvfold.Sampler() as sampler:
        s.prefill_text(PROMPT)
        spent, count = 0.0, 0
        for _ in range(n):
            tok = sampler.sample(s.logits)
            if m.is_eog(tok):
                break
            t0 = time.perf_counter()
            s.decode(tok)
            spent, count = spent + time.perf_counter() - t0, count + 1
        return count / spent


def py_loop(m, n):
    with m.session() as s:
        s.prefill_text(PROMPT)
        n0, t0 = s.n_past, time.perf_counter()
        for _ in s.generate(n):
            pass
        return (s.n_past - n0) / (time.perf_counter() - t0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", default="build/kvfold")
    ap.add_argument("-n", type=int, default=64)
    ap.add_argument("-t", type=int, default=2)
    ap.add_argument("-r", type=int, default=7)
    ap.add_argument("models", nargs="+")
    a = ap.parse_args()
    print("| model | CLI decode tok/s | Python decode tok/s | ratio | Python loop tok/s | ratio |")
    print("|---|---|---|---|---|---|")
    for path in a.models:
        with kvfold.Model(path, threads=a.t) as m:
            runs = [(cli_run(a.cli, path, a.n, a.t), py_decode(m, a.n), py_loop(m, a.n)) for _ in range(a.r)]
            c, d, lp = (max(r[i] for r in runs) for i in range(3))
            print(f"| {m.info['name']} | {c:.1f} | {d:.1f} | {d / c:.3f} | {lp:.1f} | {lp / c:.3f} |")


if __name__ == "__main__":
    main()
