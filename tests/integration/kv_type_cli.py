"""kvfold --kv-type on generate, bench and perplexity (fixtures only).

usage: kv_type_cli.py KVFOLD_BINARY FIXTURES_DIR TEXTFILE

A bad name is a usage error (exit 1) that lists the valid ones; q8_0 on a
model whose head dimension is not a multiple of 32 is refused at session
creation (exit 2); the JSON reports name the type, and bench's KV bytes scale
exactly as the entry size (rows + 12-byte tag) does. Exit 0 = pass, 1 = fail.
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
        rc, _, err = run(*cmd, "--kv-type", "q8")
        check(rc == 1 and "--kv-type" in err and "f32, f16, q8_0" in err, f"{cmd[0]} --kv-type q8: {rc} {err!r}")
    rc, _, err = run("bench", "-m", llama, "-p", "16", "-n", "0", "-r", "1", "--kv-type", "q8_0")
    check(rc == 2 and "multiple of 32" in err, f"q8_0 with head_dim 16: {rc} {err!r}")

    kv = {}
    for t in ("f32", "f16", "q8_0"):
        rc, out, err = run("bench", "-m", gemma, "-p", "16", "-n", "0", "-r", "1", "--json", "--kv-type", t)
        check(rc == 0, f"bench --kv-type {t}: {rc} {err!r}")
        o = json.loads(out)
        check(o["kv_type"] == t, f"bench JSON kv_type {o['kv_type']!r}, want {t}")
        kv[t] = o["tests"][0]["kv_bytes"]
        rc, out, err = run("generate", "-m", gemma, "-p", "hello there", "-n", "3", "--json", "--kv-type", t)
        check(rc == 0 and json.loads(out)["kv"]["type"] == t, f"generate --kv-type {t}: {rc} {err!r}")
        rc, out, err = run("perplexity", "-m", gemma, "-f", text, "--ctx", "32", "--chunks", "1", "--json", "--kv-type", t)
        check(rc == 0 and json.loads(out)["kv_type"] == t, f"perplexity --kv-type {t}: {rc} {err!r}")
    rc, out, _ = run("bench", "-m", gemma, "-p", "16", "-n", "0", "-r", "1", "--kv-type", "f16")
    check(rc == 0 and "kv f16" in out, f"bench text report names the type: {out!r}")
    # head_dim 32: rows of 128 (f32), 64 (f16), 34 (q8_0) bytes, two per entry, plus the tag.
    entry = {"f32": 2 * 128 + 12, "f16": 2 * 64 + 12, "q8_0": 2 * 34 + 12}
    for t in ("f16", "q8_0"):
        check(kv[t] * entry["f32"] == kv["f32"] * entry[t], f"kv bytes {kv}: {t} is not {entry[t]}/{entry['f32']} of f32")
    print(f"ok: kv bytes {kv}")


main()
