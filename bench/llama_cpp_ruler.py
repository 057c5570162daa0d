#!/usr/bin/env python3
"""llama.cpp's quantised caches on the prompts kvfold's RULER runs read.

    bench/llama_cpp_ruler.py --kvfold build/kvfold --server LLAMA_SERVER -m GGUF \\
        --samples SAMPLES.jsonl --out DIR [--types f16/f16,q8_0/q8_0,q4_0/q4_0] [--threads 2] [--n-predict 64]

A benchmark, not a test. SAMPLES.jsonl is what `kvfold eval ruler
--dump-samples` wrote (a line per question: context, question,
answer_prefix, answers); the kvfold rows to compare with are that eval's
results.jsonl. llama-server is what bench/llama_cpp.sh builds (the
llama-cpp-python sdist's vendored llama.cpp): CACHE_DIR/llama_cpp_python-
VERSION/vendor/llama.cpp/build/bin/llama-server.

Each question is the prompt kvfold's `--question after` reads: ChatML
without a system message, the context and the question in one user turn,
the answer prefix after the assistant's turn opens. kvfold tokenizes it (the
context, then the rest, as eval does), and llama-server gets those token
ids, so both engines read the same tokens. llama.cpp keeps its full cache
(it has no eviction) in the type pair given (K/V; flash attention on, as
its quantised V cache needs; its own Hadamard rotation of quantised keys
and values as it ships); greedy, --n-predict tokens, one slot, so a
context's later questions reuse the cached prefix. A question scores as
RULER's string_match_all: the share of its answers found in the output,
ignoring case.

Writes DIR/llama_cpp.jsonl (a row per question and type pair) and
DIR/summary.md (per task, the mean of all questions, and the cache's bytes
per position against F16's).
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

# Bytes per value of llama.cpp's cache types (32-value blocks with a 16-bit scale).
BITS = {"f32": 32.0, "f16": 16.0, "bf16": 16.0, "q8_0": 8.5, "q5_0": 5.5, "q5_1": 6.0, "q4_0": 4.5, "q4_1": 5.0}


def tokenize(kvfold, model, text, tmp):
    with open(tmp, "w") as f:
        f.write(text)
    out = subprocess.run([kvfold, "tokenize", "-m", model, "-f", tmp, "--special"],
                         check=True, capture_output=True, text=True).stdout
    return [int(x) for x in out.split()]


def post(port, path, body):
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=3600) as r:
        return json.load(r)


def wait_ready(port, proc):
    for _ in range(600):
        if proc.poll() is not None:
            sys.exit("llama-server exited with %d" % proc.returncode)
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d/health" % port, timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(1)
    sys.exit("llama-server did not become ready")


def score(output, answers):
    return sum(a.lower() in output.lower() for a in answers) / len(answers)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kvfold", required=True)
    ap.add_argument("--server", required=True, help="llama-server binary")
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--samples", required=True, help="kvfold eval ruler --dump-samples's file")
    ap.add_argument("--out", required=True)
    ap.add_argument("--types", default="f16/f16,q8_0/q8_0,q4_0/q4_0")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n-predict", type=int, default=64)
    ap.add_argument("--port", type=int, default=18431)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    samples = [json.loads(x) for x in open(a.samples)]
    tmp = os.path.join(a.out, ".tokenize.txt")
    prompts = []
    for s in samples:
        head = "<|im_start|>user\n" + s["context"]
        tail = s["question"] + "<|im_end|>\n<|im_start|>assistant\n" + s.get("answer_prefix", "")
        prompts.append(tokenize(a.kvfold, a.model, head, tmp) + tokenize(a.kvfold, a.model, tail, tmp))
    os.unlink(tmp)
    n_ctx = max(len(p) for p in prompts) + a.n_predict + 16
    rows = []
    with open(os.path.join(a.out, "llama_cpp.jsonl"), "w") as out:
        for pair in a.types.split(","):
            tk, tv = pair.split("/")
            cmd = [a.server, "-m", a.model, "-c", str(n_ctx), "-np", "1", "-t", str(a.threads), "-fa", "on",
                   "-ctk", tk, "-ctv", tv, "--port", str(a.port), "--host", "127.0.0.1", "--no-webui"]
            log = open(os.path.join(a.out, "server-%s-%s.log" % (tk, tv)), "w")
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
            try:
                wait_ready(a.port, proc)
                for i, (s, p) in enumerate(zip(samples, prompts)):
                    r = post(a.port, "/completion", {"prompt": p, "n_predict": a.n_predict, "temperature": 0,
                                                     "top_k": 1, "cache_prompt": True, "seed": 1})
                    t = r.get("timings", {})
                    row = {"types": pair, "task": s["task"], "question": i, "n_prompt": len(p),
                           "score": score(r["content"], s["answers"]), "gt": s["answers"], "output": r["content"],
                           "prompt_n": t.get("prompt_n"), "prompt_ms": t.get("prompt_ms"),
                           "decode_ms_per_token": t.get("predicted_per_token_ms")}
                    out.write(json.dumps(row) + "\n")
                    out.flush()
                    rows.append(row)
                    print("%s %s q%d: %.2f %r" % (pair, s["task"], i, row["score"], r["content"][:60]), flush=True)
            finally:
                proc.send_signal(signal.SIGINT)
                proc.wait()
                log.close()
    tasks = list(dict.fromkeys(s["task"] for s in samples))
    lines = ["llama.cpp on kvfold's RULER prompts: %d questions of %s, %d threads, %d tokens greedy"
             % (len(samples), os.path.basename(a.samples), a.threads, a.n_predict), "",
             "| K/V | KV bytes vs F16 | " + " | ".join(tasks) + " | mean of %d |" % len(samples),
             "|---|---|" + "---|" * (len(tasks) + 1)]
    for pair in a.types.split(","):
        tk, tv = pair.split("/")
        mine = [r for r in rows if r["types"] == pair]
        cells = ["%.2f" % (sum(r["score"] for r in mine if r["task"] == t) /
                           max(1, sum(r["task"] == t for r in mine))) for t in tasks]
        lines.append("| %s | %.3f | %s | %.2f |" % (pair, (BITS[tk] + BITS[tv]) / 32, " | ".join(cells),
                                                    sum(r["score"] for r in mine) / len(mine)))
    with open(os.path.join(a.out, "summary.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
