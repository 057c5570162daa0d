#!/usr/bin/env python3
"""Load benchmark of kvfold serve: aggregate decode speed and time to first
token against the number of concurrent clients, per KV policy.

    bench/serve_load.py -m MODEL [--kvfold build/kvfold] [--prompt-tokens 1024]
                        [--max-tokens 32] [--clients 1,2,4,8] [--kv full,snapkv:budget=0.2]
                        [--threads 2] [--kv-memory SIZE]

For each policy a server is started (--parallel = the most clients, --port 0),
then for each client count that many streaming chat requests are sent at
once, each with its own prompt of about --prompt-tokens tokens (numbered
sentences, so no two prompts share a prefix) and temperature 0. Reported per
run: requests done, time to first token (p50, p95), aggregate decode tokens/s
(tokens after the first, over the time from the first client's first token to
the last client's last), the peak KV bytes from /metrics, and how many
sessions ran at once. With --kv-memory the server admits what fits and the
rest wait: the table shows how many ran together. Only the standard library
is used. Run it on an otherwise idle machine; it prints a Markdown table.

With --fit SIZE it measures instead how many such sessions fit in a
--kv-memory of SIZE under each policy: one request per policy, and from
/metrics the bytes reserved while its prompt goes in (R0, the admission
rule's full reservation) and once it is compressed and decoding (Ra). The
server admits a request when the others' reservations plus R0 fit, and the
request then shrinks to Ra, so 1 + (SIZE - R0) // Ra sessions run at once
(SIZE // R0 where nothing is evicted).
"""
import argparse
import http.client
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time


def start(args, kv):
    cmd = [args.kvfold, "serve", "-m", args.model, "--port", "0", "-t", str(args.threads),
           "--parallel", str(max(args.clients)), "--queue", "256", "-c", str(args.prompt_tokens * 2 + args.max_tokens)]
    if kv != "full":
        cmd += ["--kv", kv]
    if args.kv_memory:
        cmd += ["--kv-memory", args.kv_memory]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                         env=dict(os.environ, OMP_WAIT_POLICY="PASSIVE"))
    port = None
    for line in p.stderr:
        m = re.search(r"listening on http://[^:]+:(\d+)", line)
        if m:
            port = int(m.group(1))
            break
    if port is None:
        sys.exit("serve_load: the server did not start")
    threading.Thread(target=lambda: [None for _ in p.stderr], daemon=True).start()
    return p, port


def metrics(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", "/metrics")
    out = {}
    for line in c.getresponse().read().decode().splitlines():
        if line and not line.startswith("#"):
            k, v = line.rsplit(" ", 1)
            out[k] = float(v)
    c.close()
    return out


def prompt(i, n_tokens):
    # About 16 tokens a sentence for SmolLM2's vocabulary (the tables print the real count).
    body = " ".join(f"Sentence {k} of note {i} says that the weather was mild." for k in range(n_tokens // 16))
    return body + " Summarise the notes."


def events(r):
    """The JSON events of a server-sent-events response, in order, as they come (the closing [DONE] and any
    line that is not a data line are skipped)."""
    for raw in r:
        line = raw.decode().strip()
        if line.startswith("data: ") and line != "data: [DONE]":
            yield json.loads(line[6:])


def client(port, i, args, out):
    body = {"messages": [{"role": "user", "content": prompt(i, args.prompt_tokens)}], "max_tokens": args.max_tokens,
            "temperature": 0, "stream": True, "stream_options": {"include_usage": True}, "ignore_eos": True}
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=3600)
    t0 = time.monotonic()
    c.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    first = last = None
    n = 0
    for e in events(r):
        if e.get("choices") and e["choices"][0]["delta"].get("content"):
            now = time.monotonic()
            first = first or now
            last = now
        if e.get("usage"):
            n = e["usage"]["completion_tokens"]
    c.close()
    out[i] = (r.status, t0, first, last, n)


def run(port, n_clients, args):
    out = [None] * n_clients
    threads = [threading.Thread(target=client, args=(port, i, args, out)) for i in range(n_clients)]
    peak_active = 0
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        peak_active = max(peak_active, int(metrics(port).get("kvfold_sessions_active", 0)))
        time.sleep(0.2)
    ok = [o for o in out if o and o[0] == 200 and o[2]]
    ttft = sorted(o[2] - o[1] for o in ok)
    start = min(o[2] for o in ok) if ok else 0
    end = max(o[3] for o in ok) if ok else 0
    decoded = sum(max(o[4] - 1, 0) for o in ok)
    return {
        "done": len(ok), "ttft50": statistics.median(ttft) if ttft else 0,
        "ttft95": ttft[min(len(ttft) - 1, int(0.95 * len(ttft)))] if ttft else 0,
        "tps": decoded / (end - start) if end > start else 0, "peak_active": peak_active,
    }


def size_bytes(text):
    m = re.fullmatch(r"(\d+)\s*([KMG]i?B?)?", text.strip(), re.I)
    if not m:
        sys.exit(f"serve_load: bad size {text!r}")
    unit = (m.group(2) or "").upper()[:1]
    return int(m.group(1)) * {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}[unit]


def fit(port, args, budget):
    """One request: its reservation while prefilling and once compressed."""
    body = {"messages": [{"role": "user", "content": prompt(0, args.prompt_tokens)}],
            "max_tokens": args.max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}, "ignore_eos": True}
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=3600)
    c.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    after = usage = None
    tokens = 0
    for e in events(r):
        if e.get("choices") and e["choices"][0]["delta"].get("content"):
            tokens += 1
            if tokens == 2:  # decoding: the prompt is in and compressed
                after = metrics(port)
        usage = e.get("usage") or usage
    c.close()
    p = after["kvfold_kv_bytes_per_position"]
    n = usage["prompt_tokens"] + args.max_tokens
    r0 = p * max(n + n // 8, 16)
    ra = after["kvfold_kv_bytes_reserved"]
    fits = budget // r0 if ra >= r0 else 1 + (budget - r0) // ra
    return usage["prompt_tokens"], after["kvfold_kv_bytes_in_use"], r0, ra, int(fits)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--kvfold", default="build/kvfold")
    ap.add_argument("--prompt-tokens", type=int, default=1024)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--clients", default="1,2,4,8")
    ap.add_argument("--kv", default="full,snapkv:budget=0.2")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--kv-memory", default=None)
    ap.add_argument("--fit", default=None, metavar="SIZE", help="count the sessions that fit in SIZE instead")
    args = ap.parse_args()
    args.clients = [int(x) for x in args.clients.split(",")]
    print(f"model {os.path.basename(args.model)}, prompts of ~{args.prompt_tokens} tokens, {args.max_tokens} new, "
          f"{args.threads} threads" + (f", --kv-memory {args.kv_memory}" if args.kv_memory else ""))
    if args.fit:
        budget = size_bytes(args.fit)
        args.kv_memory, args.clients = args.fit, [1]
        print(f"\n| kv | prompt tokens | KV kept (MiB) | R0 (MiB) | Ra (MiB) | sessions in {args.fit} |")
        print("|---|---|---|---|---|---|")
        for kv in args.kv.split(","):
            p, port = start(args, kv)
            try:
                n, kept, r0, ra, fits = fit(port, args, budget)
                print(f"| {kv} | {n} | {kept / 2**20:.1f} | {r0 / 2**20:.1f} | {ra / 2**20:.1f} | {fits} |", flush=True)
            finally:
                p.terminate()
                p.wait(60)
        return
    print("\n| kv | clients | done | ran at once | TTFT p50 (s) | TTFT p95 (s) | decode tok/s (all) | peak KV MiB |")
    print("|---|---|---|---|---|---|---|---|")
    for kv in args.kv.split(","):
        p, port = start(args, kv)
        try:
            for n in args.clients:
                r = run(port, n, args)
                peak = metrics(port).get("kvfold_kv_bytes_peak", 0) / 2**20
                print(f"| {kv} | {n} | {r['done']} | {r['peak_active']} | {r['ttft50']:.2f} | {r['ttft95']:.2f} | "
                      f"{r['tps']:.1f} | {peak:.1f} |", flush=True)
        finally:
            p.terminate()
            p.wait(60)


if __name__ == "__main__":
    main()
