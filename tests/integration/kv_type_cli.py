"""kvfold --kv-type, -ctk and -ctv on generate, bench and perplexity (fixtures only).

usage: kv_type_cli.py KVFOLD_BINARY FIXTURES_DIR TEXTFILE

A bad name is a usage error (exit 1) that lists the valid ones, for either
option; q8_0 or q4_0 (keys or values) on a model whose head dimension is not a
multiple of 32 is refused at session creation (exit 2); the JSON reports name
the types, and bench's KV bytes scale exactly as the entry size (key row +
value row + 12-byte tag) does. Exit 0 = pass, 1 = fail.
"""
import json
import os
import subprocess
import sys


def run(*args):
    p = subprocess.run([sys.argv[1], *args], capture_output=True, timeout=120)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


def check(cond, msg):
    if not cond:
        print("FAIL:", msg)
        sys.exit(1)


def main():
    llama = os.path.join(sys.argv[2], "llama-f32.gguf")    # head_dim 16
    gemma = os.path.join(sys.argv[2], "gemma3-f32.gguf")   # head_dim 32
    text = sys.argv[3]
    for cmd in (["generate", "-m", gemma, "-p", "hi"], ["bench", "-m", gemma], ["perplexity", "-m", gemma, "-f", text]):
        for opt in ("--kv-type", "-ctk", "-ctv"):
            rc, _, err = run(*cmd, opt, "q8")
            check(rc == 1 and "f32, f16, q8_0, q4_0, q4_0h, q4_0s" in err, f"{cmd[0]} {opt} q8: {rc} {err!r}")
        # q4_0s smooths keys' channels: a values' type it is not
        rc, _, err = run(*cmd, "-ctv", "q4_0s")
        check(rc == 2 and "for keys" in err, f"{cmd[0]} -ctv q4_0s: {rc} {err!r}")
    for opts in (["--kv-type", "q8_0"], ["-ctv", "q4_0"], ["-ctk", "q4_0h", "-ctv", "f16"]):
        rc, _, err = run("bench", "-m", llama, "-p", "16", "-n", "0", "-r", "1", *opts)
        check(rc == 2 and "multiple of 32" in err, f"{opts} with head_dim 16: {rc} {err!r}")

    # (keys, values) -> options; -ctk and -ctv go over --kv-type
    cases = {("f32", "f32"): ["--kv-type", "f32"], ("f16", "f16"): [], ("q8_0", "q8_0"): ["--kv-type", "q8_0"],
             ("q4_0", "q4_0"): ["-ctk", "q4_0", "-ctv", "q4_0"], ("q8_0", "q4_0"): ["-ctk", "q8_0", "-ctv", "q4_0"],
             ("f16", "q4_0"): ["--kv-type", "q8_0", "-ctk", "f16", "--cache-type-v", "q4_0"],
             ("q4_0h", "q4_0h"): ["--kv-type", "q4_0h"], ("q4_0s", "q4_0h"): ["-ctk", "q4_0s", "-ctv", "q4_0h"]}
    kv = {}
    for (k, v), opts in cases.items():
        name = k if k == v else f"{k}/{v}"
        rc, out, err = run("bench", "-m", gemma, "-p", "16", "-n", "0", "-r", "1", "--json", *opts)
        check(rc == 0, f"bench {opts}: {rc} {err!r}")
        o = json.loads(out)
        check((o["kv_type"], o["type_k"], o["type_v"]) == (name, k, v), f"bench JSON {opts}: {o['kv_type']!r}")
        kv[(k, v)] = o["tests"][0]["kv_bytes"]
        rc, out, err = run("generate", "-m", gemma, "-p", "hello there", "-n", "3", "--json", *opts)
        g = json.loads(out)["kv"] if rc == 0 else {}
        check(rc == 0 and (g["type"], g["type_k"], g["type_v"]) == (name, k, v), f"generate {opts}: {rc} {err!r}")
        rc, out, err = run("perplexity", "-m", gemma, "-f", text, "--ctx", "32", "--chunks", "1", "--json", *opts)
        check(rc == 0 and json.loads(out)["kv_type"] == name, f"perplexity {opts}: {rc} {err!r}")
    rc, out, _ = run("bench", "-m", gemma, "-p", "16", "-n", "0", "-r", "1", "-ctk", "q8_0", "-ctv", "q4_0")
    check(rc == 0 and "kv q8_0/q4_0" in out, f"bench text report names the types: {out!r}")
    # head_dim 32: rows of 128 (f32), 64 (f16), 34 (q8_0), 18 (q4_0, q4_0h, q4_0s) bytes, a key's and a value's,
    # plus the tag; smoothed keys add a shift and a scale a channel to each of the fixture's 6 layers x 2 kv heads.
    row = {"f32": 128, "f16": 64, "q8_0": 34, "q4_0": 18, "q4_0h": 18, "q4_0s": 18}
    f32 = 2 * row["f32"] + 12
    for (k, v), n in kv.items():
        e = row[k] + row[v] + 12
        n -= 6 * 2 * 2 * 32 * 4 if k == "q4_0s" else 0
        check(n * f32 == kv[("f32", "f32")] * e, f"kv bytes {kv}: {k}/{v} is not {e}/{f32} of f32")
    print(f"ok: kv bytes {kv}")


main()
