"""End-to-end tests of kvfold serve, one case per ctest entry.

usage: serve_test.py CASE KVFOLD_BINARY MODELS_DIR FIXTURE_DIR TMP_DIR

Each case starts its own server on a free loopback port (--port 0; the port
is read from the "listening on" line), drives it with http.client and with
the openai package (from the project's venv), and stops it with SIGTERM.
Exit status 0 = pass, 1 = fail, 77 = skipped (a model or fixture is absent).
"""
import base64
import functools
import http.client
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_test import SMOL, Ctx, Skip, check, expect_error, run_case  # noqa: E402
from mm_test import write_ppm  # noqa: E402

QUESTION = "What is the capital of France?"
PASSAGE = ("The river rose in the spring and the town by the old mill moved its market to the hill. "
           "Farmers brought apples, cheese and wool; the baker sold bread shaped like fish. ") * 3


class Server:
    """A kvfold serve process and a small HTTP client for it. gated: the scheduler takes one turn (an admission,
    a prompt part, a decode step) per turn() (KVFOLD_SERVE_TURNS), until release(): the cases hold it at known
    points whatever the machine's speed."""

    def __init__(self, ctx, *args, key=None, gated=False):
        env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE")
        self.gate = None
        if gated:
            fifo = os.path.join(ctx.tmp, f"turns-{os.getpid()}-{time.monotonic_ns()}")
            os.mkfifo(fifo)
            env["KVFOLD_SERVE_TURNS"] = fifo
        self.p = subprocess.Popen([ctx.bin, "serve", "--port", "0", *args], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, env=env, text=True)
        self.key, self.log, self.port = key, [], None
        ready = threading.Event()

        def drain():
            for line in self.p.stderr:
                self.log.append(line)
                m = re.search(r"listening on http://[^:]+:(\d+)", line)
                if m:
                    self.port = int(m.group(1))
                    ready.set()
            ready.set()

        self.drain = threading.Thread(target=drain, daemon=True)
        self.drain.start()
        ready.wait(60)
        check(self.port, f"the server did not start: {''.join(self.log)}")
        if gated:
            self.gate = os.open(fifo, os.O_WRONLY)  # the server opened it before it listened
            os.unlink(fifo)

    def turn(self, n=1):
        """Lets the held scheduler take n turns, and waits until it took them (it must have work). A hang-up
        the server saw while held takes effect at the next turn."""
        want = self.metrics()["kvfold_scheduler_turns_total"] + n
        os.write(self.gate, b"." * n)
        deadline = time.time() + 120
        while self.metrics()["kvfold_scheduler_turns_total"] < want:
            check(time.time() < deadline and self.p.poll() is None, f"the scheduler did not take {n} turns")
            time.sleep(0.01)

    def release(self):
        """The scheduler runs freely from now on."""
        if self.gate is not None:
            os.close(self.gate)
            self.gate = None

    def wait_for(self, what, cond, timeout=120):
        """Polls cond() (on /slots or /metrics, which a held scheduler cannot change) until true."""
        deadline = time.time() + timeout
        while not cond():
            check(time.time() < deadline, f"waited {timeout} s for {what}")
            time.sleep(0.01)

    def conn(self, timeout=120):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def request(self, method, path, body=None, headers=None, key=True):
        h = dict(headers or {})
        if key and self.key:
            h["Authorization"] = f"Bearer {self.key}"
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
            h.setdefault("Content-Type", "application/json")
        c = self.conn()
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        data = r.read()
        c.close()
        return r.status, dict(r.getheaders()), data

    def post(self, path, body, **kw):
        status, headers, data = self.request("POST", path, body, **kw)
        return status, json.loads(data) if data else None, headers

    def stream(self, path, body):
        """The events of a streaming request, parsed (the last one is [DONE])."""
        status, headers, data = self.request("POST", path, dict(body, stream=True))
        check(status == 200, f"stream: status {status}: {data[:300]!r}")
        check(headers.get("Content-Type") == "text/event-stream", f"stream content type {headers}")
        events = [e[len("data: "):] for e in data.decode().split("\n\n") if e]
        check(events and events[-1] == "[DONE]", f"the stream ends with [DONE]: {events[-2:]}")
        return [json.loads(e) for e in events[:-1]]

    def metrics(self):
        status, _, data = self.request("GET", "/metrics")
        check(status == 200, f"/metrics: {status}")
        out = {}
        for line in data.decode().splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)
        return out

    def healthy(self):
        return self.request("GET", "/health", key=False)[0] == 200

    def stop(self):
        self.p.send_signal(signal.SIGTERM)
        rc = self.p.wait(30)
        self.drain.join(10)  # the last lines of the log
        check(rc == 0, f"SIGTERM: exit {rc}; log: {''.join(self.log[-5:])}")
        check(any("stopping" in line for line in self.log), "the server says it stops")

    def kill(self):
        self.release()
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()


def serving(ctx, *args, key=None, gated=False):
    """A context manager: the server, killed if the case fails."""
    class Scope:
        def __enter__(self):
            self.s = Server(ctx, *args, key=key, gated=gated)
            return self.s

        def __exit__(self, *exc):
            self.s.kill()
            return False
    return Scope()


def chat(text, **kw):
    return dict(messages=[{"role": "user", "content": text}], temperature=0, **kw)


def generate_text(ctx, model_args, prompt, n, kv=None, chat_mode=True):
    """kvfold generate's greedy text for the same prompt (the reference), with the batch size of the servers
    that compare with it, so that rows go through the same products."""
    args = ["generate", *model_args, "-p", prompt, "-n", str(n), "-t", "1", "-b", "16", "--json"]
    args += ["--chat"] if chat_mode else []
    args += ["--kv", kv] if kv else []
    rc, out, err = ctx.run(*args)
    check(rc == 0, f"generate: {err}")
    return json.loads(out)["text"]


def case_serve_api(ctx):
    model = ctx.model(SMOL)
    # -b 16: a prompt goes in by parts of 16 positions between the other sessions' decode steps.
    with serving(ctx, "-m", model, "-t", "1", "-b", "16", "--parallel", "8", gated=True) as s:
        check(s.healthy(), "/health")
        sessions_together(ctx, s, model)  # the scheduler held, then released for the rest
        status, _, data = s.request("GET", "/v1/models")
        models = json.loads(data)
        check(status == 200 and models["data"][0]["id"] == SMOL, f"/v1/models: {data!r}")
        # 200 KB of `[0,0,...]` would take cJSON 6.4 MB of items (64 bytes a value): over what a body's JSON
        # may take (8 x its length + 1 MiB), the parse stops there; the same bytes in a string are answered.
        msgs = '{"max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]'
        status, _, data = s.request("POST", "/v1/chat/completions", msgs + ', "pad": [' + "0," * 100000 + '0]}')
        check(status == 413 and json.loads(data)["error"]["code"] == "body_too_large", f"dense JSON: {status} {data!r}")
        status, _, data = s.request("POST", "/v1/chat/completions", msgs + ', "pad": "' + "0," * 100000 + '0"}')
        check(status == 200, f"the same bytes in a string: {status} {data[:200]!r}")
        # Plain answer: the OpenAI shape, usage and the kv extension.
        status, o, _ = s.post("/v1/chat/completions", chat(QUESTION, max_tokens=12, model=SMOL))
        check(status == 200 and o["object"] == "chat.completion", f"chat: {status} {o}")
        msg = o["choices"][0]["message"]
        check(msg["role"] == "assistant" and "Paris" in msg["content"], f"chat answer: {msg}")
        u = o["usage"]
        check(u["prompt_tokens"] > 5 and 0 < u["completion_tokens"] <= 12 and
              u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"], f"usage {u}")
        check(o["choices"][0]["finish_reason"] in ("stop", "length"), "finish_reason")
        check(o["kv"]["policy"] == "full" and o["kv"]["ratio"] == 1 and o["kv"]["peak_bytes"] > 0, f"kv {o['kv']}")
        # max_tokens cuts with finish_reason length.
        status, o, _ = s.post("/v1/chat/completions", chat(PASSAGE + " Summarise.", max_tokens=3))
        check(o["choices"][0]["finish_reason"] == "length" and o["usage"]["completion_tokens"] == 3,
              f"length: {o['choices'][0]} {o['usage']}")
        # ignore_eos (llama-server's extension): max_tokens whatever the model says.
        status, o, _ = s.post("/v1/chat/completions", chat(QUESTION, max_tokens=40, ignore_eos=True))
        check(status == 200 and o["usage"]["completion_tokens"] == 40 and o["choices"][0]["finish_reason"] == "length",
              f"ignore_eos: {o.get('usage')} {o['choices'][0]}")
        # The kv extension: a compressing policy keeps less of the prompt.
        kv = "snapkv:budget=0.3"
        status, o, _ = s.post("/v1/chat/completions", chat(PASSAGE + " Summarise.", max_tokens=8, kv=kv))
        check(status == 200 and o["kv"]["policy"] == kv and o["kv"]["ratio"] < 0.6, f"kv extension: {o.get('kv')}")
        want = generate_text(ctx, ["-m", model], PASSAGE + " Summarise.", 8, kv=kv)
        check(o["choices"][0]["message"]["content"] == want, f"server {o['choices'][0]} vs generate {want!r}")
        # Streaming: role first, the same text as without, usage at the end.
        events = s.stream("/v1/chat/completions", chat(QUESTION, max_tokens=12,
                                                          stream_options={"include_usage": True}))
        check(events[0]["choices"][0]["delta"].get("role") == "assistant", "the first delta names the role")
        text = "".join(e["choices"][0]["delta"].get("content", "") for e in events if e["choices"])
        check(text == msg["content"], f"streamed {text!r} vs {msg['content']!r}")
        check(events[-1]["choices"] == [] and events[-1]["usage"]["completion_tokens"] == u["completion_tokens"],
              "include_usage: a last chunk with usage")
        check(any(e["choices"] and e["choices"][0]["finish_reason"] for e in events), "a finish_reason chunk")
        # Stop sequences: the text ends before the first match, finish_reason stop.
        full = msg["content"]
        cut = full.find("France")
        check(cut > 0, f"the answer {full!r} names France")
        for stop in ("France", ["zzz", "France"]):
            status, o, _ = s.post("/v1/chat/completions", chat(QUESTION, max_tokens=12, stop=stop))
            c = o["choices"][0]
            check(c["message"]["content"] == full[:cut] and c["finish_reason"] == "stop", f"stop {stop}: {c}")
        events = s.stream("/v1/chat/completions", chat(QUESTION, max_tokens=12, stop="France"))
        text = "".join(e["choices"][0]["delta"].get("content", "") for e in events if e["choices"])
        check(text == full[:cut], f"streamed with stop: {text!r}")
        # /v1/completions: a raw prompt, as generate without --chat.
        status, o, _ = s.post("/v1/completions", {"prompt": "The capital of France is", "max_tokens": 6,
                                                  "temperature": 0})
        want = generate_text(ctx, ["-m", model], "The capital of France is", 6, chat_mode=False)
        check(status == 200 and o["object"] == "text_completion" and o["choices"][0]["text"] == want,
              f"completions: {o} vs {want!r}")
        m = s.metrics()
        check(m['kvfold_requests_total{status="200"}'] >= 15 and m["kvfold_generated_tokens_total"] > 50 and
              m["kvfold_compressions_total"] >= 15 and m["kvfold_sessions_active"] == 0 and
              m["kvfold_kv_bytes_in_use"] == 0 and m["kvfold_kv_bytes_reserved"] == 0, f"metrics {m}")
        check(m['kvfold_sessions_total{policy="snapkv"}'] >= 3 and m['kvfold_sessions_total{policy="h2o"}'] >= 2 and
              m['kvfold_sessions_total{policy="full"}'] >= 5, f"sessions by policy {m}")
        openai_client(s, msg["content"])
        check(any(re.search(r"POST /v1/chat/completions 200 prompt=\d+ gen=\d+ kv=\d+ [\d.]+ms", line)
                  for line in s.log), "one log line per request")
        s.stop()


def sessions_together(ctx, s, model):
    """Greedy output through the server equals generate's, with 8 sessions at once: the 8 requests wait in the
    queue of the held scheduler, which then takes turns until two run together, and is let go."""
    prompts = [f"Name {k + 2} fruits that are red." for k in range(8)]
    policies = [None, "snapkv:budget=0.5", "h2o:budget=0.5", "streaming:budget=0.5"] * 2
    want = [generate_text(ctx, ["-m", model], p, 10, kv=kv) for p, kv in zip(prompts, policies)]
    results = [None] * 8

    def one(i):
        body = chat(prompts[i], max_tokens=10)
        if policies[i]:
            body["kv"] = policies[i]
        results[i] = s.post("/v1/chat/completions", body)[1]["choices"][0]["message"]["content"]

    threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    s.wait_for("8 requests queued", lambda: s.metrics()["kvfold_sessions_queued"] == 8)
    for _ in range(100):
        s.turn()
        for slot in slots(s):
            check_slot(slot)
        if s.metrics()["kvfold_sessions_active"] >= 2:
            break
    check(s.metrics()["kvfold_sessions_active"] >= 2, "sessions run together")
    s.release()
    for t in threads:
        t.join()
    check(results == want, f"8 sessions at once: {results} vs {want}")


def check_slot(slot):
    """What a /slots entry must say in its state: ids and counts, no text."""
    check(set(slot) >= {"id", "state", "policy", "tokens_seen", "kv_entries", "kv_bytes", "kv_reserved_bytes"} and
          not set(slot) & {"prompt", "text", "messages", "content"}, f"/slots fields: {slot}")
    state = slot["state"]
    if state == "running":
        check(slot["kv_bytes"] <= slot["kv_reserved_bytes"] and slot["tokens_seen"] >= slot["n_prompt"] > 0 and
              slot["kv_entries"] > 0 and slot["n_prompt"] + slot["n_gen"] <= slot["n_ctx"], f"/slots: {slot}")
    elif state == "filling":  # the prompt going in by parts: positions in so far of n_prompt
        check(slot["kv_bytes"] <= slot["kv_reserved_bytes"] and 0 <= slot["tokens_seen"] < slot["n_prompt"] and
              slot["kv_reserved_bytes"] > 0, f"/slots: {slot}")
    elif state == "queued":  # not tokenized (n_prompt 0), or waiting for kv_needed_bytes to fit
        check(slot["queue_position"] >= 1 and slot["kv_bytes"] == slot["kv_reserved_bytes"] == 0 and
              slot["tokens_seen"] == slot["kv_entries"] == 0 and
              (slot["n_prompt"] == 0) == (slot["kv_needed_bytes"] == 0), f"/slots: {slot}")
    else:  # a cached session keeps its bytes reserved
        check(state == "idle" and slot["tokens_seen"] > 0 and 0 < slot["kv_bytes"] == slot["kv_reserved_bytes"] and
              slot["kv_entries"] > 0, f"/slots: {slot}")


def slots(s):
    status, _, data = s.request("GET", "/slots")
    check(status == 200, f"/slots: {status}")
    got = json.loads(data)
    for slot in got:
        check_slot(slot)
    return got


def case_serve_cache(ctx):
    """--cache-sessions: a conversation's next turn goes on in the session of the turn before (its prompt starts
    with what that session holds). On the full cache it answers as a server without the cache does (bit for bit:
    the same passes); under a compressing policy it goes on from what the policy kept, so only an answer is asked
    for. Another conversation gets a session of its own; cached sessions stay inside the budget. /slots shows the
    cached sessions (idle), and a prompt going in by parts (filling) while another request waits (queued): with
    --parallel 1 the second waits for the whole of the first."""
    model = ctx.model(SMOL)
    first = chat(PASSAGE + " Summarise.", max_tokens=8)
    answers = {}
    for cache in ("0", "2"):
        with serving(ctx, "-m", model, "-t", "1", "-b", "16", "--parallel", "1", "--cache-sessions", cache) as s:
            ids = []
            for kv in (None, "snapkv:budget=0.5"):
                extra = {"kv": kv} if kv else {}
                status, o1, _ = s.post("/v1/chat/completions", dict(first, **extra))
                check(status == 200 and o1["usage"]["prompt_tokens_details"]["cached_tokens"] == 0, f"turn 1: {o1}")
                check_in_use(s, cache != "0")
                turn2 = dict(first, messages=first["messages"] + [
                    {"role": "assistant", "content": o1["choices"][0]["message"]["content"]},
                    {"role": "user", "content": "And what did the baker sell?"}], **extra)
                status, o2, _ = s.post("/v1/chat/completions", turn2)
                ids.append(int(o2["id"].split("-")[1]))
                cached = o2["usage"]["prompt_tokens_details"]["cached_tokens"]
                if cache == "0":
                    check(cached == 0, f"no cache, yet {cached} cached tokens")
                else:
                    check(cached >= o1["usage"]["prompt_tokens"], f"turn 2 found {cached} positions cached, "
                          f"turn 1's prompt was {o1['usage']['prompt_tokens']}")
                answers.setdefault(kv, []).append(o2["choices"][0]["message"]["content"])
                check_in_use(s, cache != "0")
            if cache == "2":
                # another conversation: nothing cached for it; its session is cached too (2 at most)
                status, o3, _ = s.post("/v1/chat/completions", chat(QUESTION, max_tokens=4))
                check(o3["usage"]["prompt_tokens_details"]["cached_tokens"] == 0, f"another conversation: {o3}")
                m = s.metrics()
                check(m["kvfold_sessions_cached"] == 2 and m["kvfold_prompt_tokens_reused_total"] > 0 and
                      0 < m["kvfold_kv_bytes_reserved"] <= m["kvfold_kv_bytes_budget"] and
                      m["kvfold_sessions_active"] == 0, f"metrics with cached sessions: {m}")
                # /slots: the two cached sessions, oldest first (snapkv's turn 2, then o3's), their bytes reserved
                idle = slots(s)
                check([(x["state"], x["id"], x["policy"]) for x in idle] ==
                      [("idle", ids[1], "snapkv:budget=0.5"), ("idle", int(o3["id"].split("-")[1]), "full")] and
                      sum(x["kv_reserved_bytes"] for x in idle) == m["kvfold_kv_bytes_reserved"], f"/slots: {idle}")
            check(s.metrics()["kvfold_kv_reservation_overruns_total"] == 0, "no session outgrew its reservation")
            pos_f16 = s.metrics()["kvfold_kv_bytes_per_position"]
            s.stop()
    # Keys and values in other types: a position costs their rows (SmolLM2's 64 values: f16 128 bytes a row,
    # q4_0s and q4_0h 36; 12 bytes of tag and 12 of statistics an entry), a session's cache the smoothed keys'
    # shift and scale a channel in each of its 30 x 3 heads, and the budget holds in those bytes.
    with serving(ctx, "-m", model, "-t", "1", "--cache-sessions", "2", "-ctk", "q4_0s", "-ctv", "q4_0h",
                 "--kv-memory", "8MiB") as s:
        for text in (first, chat(QUESTION, max_tokens=4), chat(PASSAGE + " Who baked?", max_tokens=4)):
            status, o, _ = s.post("/v1/chat/completions", text)
            check(status == 200 and o["kv"]["type_k"] == "q4_0s" and o["kv"]["type_v"] == "q4_0h", f"typed: {o}")
        m = s.metrics()
        check(m["kvfold_kv_bytes_per_position"] * (128 + 128 + 24) == pos_f16 * (36 + 36 + 24) and
              m["kvfold_kv_bytes_per_session"] == 30 * 3 * 2 * 64 * 4 and
              0 < m["kvfold_kv_bytes_reserved"] <= m["kvfold_kv_bytes_budget"] == 8 << 20 and
              m["kvfold_kv_reservation_overruns_total"] == 0,
              f"q4_0s keys, q4_0h values: {m} (f16: {pos_f16} bytes a position)")
        s.stop()
    slots_fill_and_queue(ctx, model)
    plain, cached = answers[None]
    check(plain == cached, f"full cache: turn 2 without the cache {plain!r}, with it {cached!r}")
    check(all(answers["snapkv:budget=0.5"]), f"snapkv: {answers['snapkv:budget=0.5']}")


def case_serve_slots(ctx):
    """llama-server's slot files (--slot-save-path, POST /slots/ID?action=save|restore|erase): a cached session
    saved by one server and restored by another (a restart, or another machine) takes the conversation's next
    turn there (its prompt positions counted as cached), with the answer the first server gave to the same turn,
    under a compressing policy; names that could leave the folder, links, corrupt files, unknown ids and actions
    are refused; without --slot-save-path saving is off (501); /metrics counts saves and restores. A conversation
    with a key ("user", or X-Session-Id) is written there after each turn and taken up by another server from its
    file, with the same answer; --slot-save-max removes the oldest conversations' files first."""
    model = ctx.model(SMOL)
    folder = os.path.join(ctx.tmp, "slots")
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    args = ["-m", model, "-t", "1", "-b", "16", "--parallel", "1", "--cache-sessions", "2", "--kv",
            "keydiff:budget=0.5", "--slot-save-path", folder]
    first = chat(PASSAGE + " Summarise.", max_tokens=8)

    def turn2(o1):
        return dict(first, messages=first["messages"] + [
            {"role": "assistant", "content": o1["choices"][0]["message"]["content"]},
            {"role": "user", "content": "And what did the baker sell?"}])

    with serving(ctx, *args) as s:
        status, o1, _ = s.post("/v1/chat/completions", first)
        check(status == 200, f"turn 1: {status} {o1}")
        idle = [x for x in slots(s) if x["state"] == "idle"]
        check(len(idle) == 1, f"one cached session: {idle}")
        sid = idle[0]["id"]
        status, o, _ = s.post(f"/slots/{sid}?action=save", {"filename": "conv.kvfs"})
        size = os.path.getsize(os.path.join(folder, "conv.kvfs"))
        check(status == 200 and o["id_slot"] == sid and o["n_saved"] == idle[0]["tokens_seen"] and
              o["n_written"] == size and o["timings"]["save_ms"] >= 0, f"save: {status} {o}")
        # refusals
        for path, body, want in ((f"/slots/{sid}?action=save", {"filename": "../escape"}, 400),
                                 (f"/slots/{sid}?action=save", {"filename": ".hidden"}, 400),
                                 (f"/slots/{sid}?action=save", {"name": "x"}, 400),
                                 (f"/slots/{sid}?action=frobnicate", {"filename": "x"}, 400),
                                 (f"/slots/{sid + 100}?action=save", {"filename": "x"}, 404),
                                 ("/slots/x1?action=save", {"filename": "x"}, 404),
                                 ("/slots/0?action=restore", {"filename": "absent.kvfs"}, 404)):
            status, o, _ = s.post(path, body)
            check(status == want and "error" in o, f"{path} {body}: {status} (want {want}) {o}")
        with open(os.path.join(folder, "conv.kvfs"), "rb") as f:
            data = bytearray(f.read())
        data[len(data) // 3] ^= 1
        with open(os.path.join(folder, "corrupt.kvfs"), "wb") as f:
            f.write(data)
        os.symlink(os.path.join(folder, "conv.kvfs"), os.path.join(folder, "link.kvfs"))
        for name, want, what in (("corrupt.kvfs", 400, "checksum"), ("link.kvfs", 404, "no slot file")):
            status, o, _ = s.post("/slots/0?action=restore", {"filename": name})
            check(status == want and what in o["error"]["message"], f"restore {name}: {status} {o}")
        # the reference: the next turn on this server
        status, ref, _ = s.post("/v1/chat/completions", turn2(o1))
        check(status == 200, f"turn 2: {status} {ref}")
        # erase: the session the second turn left
        idle = [x for x in slots(s) if x["state"] == "idle"]
        status, o, _ = s.post(f"/slots/{idle[-1]['id']}?action=erase", {})
        check(status == 200 and o["n_erased"] == idle[-1]["tokens_seen"], f"erase: {status} {o}")
        check(idle[-1]["id"] not in [x["id"] for x in slots(s)], "erased from /slots")
        status, o, _ = s.post(f"/slots/{idle[-1]['id']}?action=erase", {})
        check(status == 404, f"erase twice: {status} {o}")
        s.stop()
    with serving(ctx, *args) as s:  # a fresh server: the saved session takes the next turn
        status, o, _ = s.post("/slots/0?action=restore", {"filename": "conv.kvfs"})
        check(status == 200 and o["n_read"] == size and o["n_restored"] > 0, f"restore: {status} {o}")
        check([x["id"] for x in slots(s) if x["state"] == "idle"] == [o["id_slot"]], f"restored idle: {slots(s)}")
        status, o2, _ = s.post("/v1/chat/completions", turn2(o1))
        check(status == 200 and o2["usage"]["prompt_tokens_details"]["cached_tokens"] >= o1["usage"]["prompt_tokens"],
              f"turn 2 after the restore reused {o2['usage']['prompt_tokens_details']['cached_tokens']} positions")
        check(o2["choices"][0]["message"]["content"] == ref["choices"][0]["message"]["content"],
              f"turn 2 after the restore {o2['choices'][0]['message']['content']!r}, "
              f"on the first server {ref['choices'][0]['message']['content']!r}")
        m = s.metrics()
        check(m["kvfold_slot_restores_total"] == 1 and m["kvfold_slot_bytes_read_total"] == size, f"metrics: {m}")
        s.stop()
    # conversations with a key: written after each turn, read back by a server that does not hold them
    def conv_file(key):
        h = 0xcbf29ce484222325
        for b in key.encode():
            h = ((h ^ b) * 0x100000001b3) % 2 ** 64
        return os.path.join(folder, f"conv-{h:016x}.kvfs")

    keyed = dict(first, user="ana")
    with serving(ctx, *args) as s:
        status, k1, _ = s.post("/v1/chat/completions", keyed)
        check(status == 200, f"keyed turn 1: {status} {k1}")
        s.wait_for("the conversation's file", lambda: s.metrics()["kvfold_conversations_written_total"] == 1)
        check(os.path.exists(conv_file("ana")), f"no {conv_file('ana')}: {os.listdir(folder)}")
        # the reference: the next turn here, without the key (which would write the file again)
        status, kref, _ = s.post("/v1/chat/completions", turn2(k1))
        s.stop()
    with serving(ctx, *args) as s:  # another replica (or a restart): the file gives the conversation back
        status, k2, _ = s.post("/v1/chat/completions", dict(turn2(k1), user="ana"))
        check(status == 200 and k2["usage"]["prompt_tokens_details"]["cached_tokens"] >= k1["usage"]["prompt_tokens"] and
              k2["choices"][0]["message"]["content"] == kref["choices"][0]["message"]["content"],
              f"keyed turn 2 elsewhere: {k2['usage']} {k2['choices'][0]['message']['content']!r} "
              f"(first server: {kref['choices'][0]['message']['content']!r})")
        check(s.metrics()["kvfold_conversations_restored_total"] == 1, "restored from its file")
        # the X-Session-Id header keys a conversation too; --slot-save-max keeps the newest files that fit
        status, _, _ = s.request("POST", "/v1/chat/completions", chat(QUESTION, max_tokens=2),
                                 headers={"X-Session-Id": "bob"})
        check(status == 200, f"X-Session-Id: {status}")
        s.wait_for("bob's file", lambda: os.path.exists(conv_file("bob")))
        s.stop()
    one = os.path.getsize(conv_file("bob"))
    with serving(ctx, *args, "--slot-save-max", str(os.path.getsize(conv_file("ana")) + one + 100)) as s:
        for who in ("carol", "dave"):
            status, _, _ = s.post("/v1/chat/completions", dict(chat(QUESTION, max_tokens=2), user=who))
            s.wait_for(f"{who}'s file", lambda: os.path.exists(conv_file(who)))
        left = sorted(f for f in os.listdir(folder) if f.startswith("conv-"))
        check(not os.path.exists(conv_file("ana")) and os.path.exists(conv_file("dave")),
              f"--slot-save-max: the oldest went first: {left}")
        s.stop()
    with serving(ctx, "-m", model, "-t", "1", "--cache-sessions", "1") as s:
        status, o, _ = s.post("/slots/1?action=save", {"filename": "x.kvfs"})
        check(status == 501 and "--slot-save-path" in o["error"]["message"], f"saving off: {status} {o}")
        s.stop()
    expect_error(ctx, 1, ["serve", "-m", model, "--slot-save-path", os.path.join(ctx.tmp, "absent")],
                 "--slot-save-path not a folder")


def case_serve_replicas(ctx):
    """Two replicas behind HAProxy (deploy/haproxy.cfg, its ports rewritten), sharing --slot-save-path: a
    conversation's turns (the same X-Session-Id) go to one replica, which holds its session; when that replica is
    killed, the next turn goes to the other, which reads the conversation from the shared folder (its prompt
    counted as cached, not prefilled again) and gives the answer a single server gives on the full cache. Prints
    the time from the kill to the answer."""
    haproxy = shutil.which("haproxy") or "/usr/sbin/haproxy"
    if not os.path.exists(haproxy):
        print("SKIP: haproxy is not installed (scripts/setup.sh installs Debian's)")
        return 77
    model = ctx.model(SMOL)
    folder = os.path.join(ctx.tmp, "shared")
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    args = ["-m", model, "-t", "1", "-b", "16", "--parallel", "1", "--cache-sessions", "4", "--slot-save-path", folder]
    first = chat(PASSAGE + " Summarise.", max_tokens=8)

    def next_turn(body, answer, text):
        return dict(body, messages=body["messages"] + [
            {"role": "assistant", "content": answer["choices"][0]["message"]["content"]},
            {"role": "user", "content": text}])

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        front = sock.getsockname()[1]
    with serving(ctx, *args) as r1, serving(ctx, *args) as r2:
        src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "deploy", "haproxy.cfg")
        cfg = open(src).read().replace("127.0.0.1:8080", f"127.0.0.1:{front}")
        cfg = cfg.replace("127.0.0.1:8081", f"127.0.0.1:{r1.port}").replace("127.0.0.1:8082", f"127.0.0.1:{r2.port}")
        path = os.path.join(ctx.tmp, "haproxy.cfg")
        with open(path, "w") as f:
            f.write(cfg)
        hp = subprocess.Popen([haproxy, "-db", "-f", path], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            def ask(body):
                deadline = time.time() + 30
                while True:
                    try:
                        c = http.client.HTTPConnection("127.0.0.1", front, timeout=120)
                        c.request("POST", "/v1/chat/completions", json.dumps(body),
                                  {"Content-Type": "application/json", "X-Session-Id": "conversation-1"})
                        r = c.getresponse()
                        data = r.read()
                        c.close()
                        if r.status == 200:
                            return json.loads(data)
                        check(r.status == 503 and time.time() < deadline, f"through haproxy: {r.status} {data[:300]}")
                    except (ConnectionError, OSError):
                        check(time.time() < deadline, "haproxy does not answer")
                    time.sleep(0.2)

            t1 = ask(first)
            turn2 = next_turn(first, t1, "And what did the baker sell?")
            t2 = ask(turn2)
            holders = [s for s in (r1, r2) if any(x["state"] == "idle" for x in slots(s))]
            check(len(holders) == 1 and t2["usage"]["prompt_tokens_details"]["cached_tokens"] > 0,
                  f"one replica holds the conversation and took both turns: {[slots(s) for s in (r1, r2)]}")
            holder = holders[0]
            other = r2 if holder is r1 else r1
            holder.wait_for("the conversation's file",
                            lambda: holder.metrics()["kvfold_conversations_written_total"] == 2)
            turn3 = next_turn(turn2, t2, "Who bought it?")
            t0 = time.time()
            holder.kill()
            t3 = ask(turn3)
            failover = time.time() - t0
            check(t3["usage"]["prompt_tokens_details"]["cached_tokens"] >= t2["usage"]["prompt_tokens"] and
                  other.metrics()["kvfold_conversations_restored_total"] == 1,
                  f"the other replica took the conversation up from its file: {t3['usage']} {other.metrics()}")
            print(f"failover: {failover:.2f} s from the kill to turn 3's answer "
                  f"({t3['usage']['prompt_tokens_details']['cached_tokens']} of {t3['usage']['prompt_tokens']} "
                  f"positions read back)")
        finally:
            hp.terminate()
            hp.wait(10)
    with serving(ctx, "-m", model, "-t", "1", "-b", "16", "--parallel", "1") as s:  # no replicas, no cache
        status, ref, _ = s.post("/v1/chat/completions", turn3)
        check(status == 200 and ref["choices"][0]["message"]["content"] == t3["choices"][0]["message"]["content"],
              f"turn 3 after the failover {t3['choices'][0]['message']['content']!r}, on one server "
              f"{ref['choices'][0]['message']['content']!r}")
        s.stop()


def check_in_use(s, cached):
    """With no request running, the KV bytes in use are those of the cached sessions (idle in /slots): they hold
    their memory as a running session does, so kvfold_kv_bytes_in_use counts them, as much as they keep reserved,
    and the peak is at least that."""
    m = s.metrics()
    idle = slots(s)
    held = sum(x["kv_bytes"] for x in idle)
    check(all(x["state"] == "idle" for x in idle) and (held > 0) == cached and
          m["kvfold_kv_bytes_in_use"] == held == m["kvfold_kv_bytes_reserved"] and m["kvfold_kv_bytes_peak"] >= held,
          f"KV bytes in use with {len(idle)} cached sessions ({held} bytes): {m}")


def slots_fill_and_queue(ctx, model):
    """Two long prompts on a --parallel 1 server, its scheduler held: /slots shows the first filling (its
    positions in so far growing by parts of -b, one part a turn) while the second is queued (first in the queue,
    not yet tokenized), then the first running; afterwards both are cached (idle)."""
    out = [None, None]

    def one(i):
        body = chat(f"Request {i}: " + PASSAGE + " Summarise.", max_tokens=12, ignore_eos=True)
        out[i] = s.post("/v1/chat/completions", body)

    with serving(ctx, "-m", model, "-t", "1", "-b", "16", "--parallel", "1", "--cache-sessions", "2",
                 gated=True) as s:
        first, second = (threading.Thread(target=one, args=(i,)) for i in range(2))
        first.start()
        s.wait_for("the first request queued", lambda: [x["state"] for x in slots(s)] == ["queued"])
        s.turn()  # admitted, and its first part in
        got = slots(s)
        check([(x["state"], x["tokens_seen"]) for x in got] == [("filling", 16)], f"/slots: {got}")
        second.start()
        s.wait_for("the second request queued", lambda: len(slots(s)) == 2)
        s.turn()
        got = slots(s)
        check([(x["state"], x["tokens_seen"]) for x in got] == [("filling", 32), ("queued", 0)] and
              got[1]["queue_position"] == 1 and got[1]["n_prompt"] == 0, f"/slots: {got}")
        for _ in range(100):
            if slots(s)[0]["state"] == "running":
                break
            s.turn()
        got = slots(s)
        check([x["state"] for x in got] == ["running", "queued"], f"--parallel 1: {got}")
        s.release()
        first.join()
        second.join()
        check(all(o and o[0] == 200 for o in out), f"the two long prompts: {out}")
        idle = slots(s)
        check([x["id"] for x in idle] == [int(o[1]["id"].split("-")[1]) for o in out], f"/slots after: {idle}")
        check_in_use(s, True)
        s.stop()


def openai_client(s, want):
    """The official client, unchanged, against the server."""
    try:
        import openai
    except ImportError:
        raise Skip("the openai package is not installed in the venv")
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{s.port}/v1", api_key=s.key or "none")
    r = client.chat.completions.create(model=SMOL, messages=[{"role": "user", "content": QUESTION}],
                                       max_tokens=12, temperature=0)
    check(r.choices[0].message.content == want and r.usage.completion_tokens > 0, f"openai: {r}")
    parts = client.chat.completions.create(model=SMOL, messages=[{"role": "user", "content": QUESTION}],
                                           max_tokens=12, temperature=0, stream=True,
                                           stream_options={"include_usage": True})
    text, usage = "", None
    for chunk in parts:
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
        usage = chunk.usage or usage
    check(text == want and usage and usage.completion_tokens > 0, f"openai stream: {text!r} {usage}")
    r = client.chat.completions.create(model=SMOL, messages=[{"role": "user", "content": QUESTION}],
                                       max_tokens=8, temperature=0, extra_body={"kv": "snapkv:budget=0.5"})
    check(r.model_extra["kv"]["policy"] == "snapkv:budget=0.5", f"kv through extra_body: {r.model_extra}")
    try:
        client.chat.completions.create(model=SMOL, messages=[{"role": "user", "content": "x"}], extra_body={"kv": "x"})
        check(False, "a bad kv is refused")
    except openai.BadRequestError as e:
        check("snapkv" in str(e), f"the error names the valid policies: {e}")


def data_url(path, mime="image/x-portable-pixmap"):
    with open(path, "rb") as f:
        return f"data:{mime};base64,{base64.b64encode(f.read()).decode()}"


def case_serve_image(ctx):
    fx = ctx.fixtures
    llava = [os.path.join(fx, "llava-f32.gguf"), os.path.join(fx, "llava-mmproj-f32.gguf")]
    for f in llava:
        if not os.path.exists(f):
            raise Skip(f"{f} is absent (the fixtures_make test writes it)")
    media = os.path.join(ctx.tmp, "media")
    os.makedirs(media, exist_ok=True)
    img = write_ppm(os.path.join(media, "a.ppm"), 20, 13, 0)
    outside = write_ppm(os.path.join(ctx.tmp, "b.ppm"), 9, 9, 1)
    secret = os.path.join(ctx.tmp, "secret.txt")
    with open(secret, "w") as f:
        f.write("not for the server's clients\n")
    for name, target in (("in.ppm", img), ("out.ppm", outside)):  # links in --media-dir, to a file in it and out
        if os.path.lexists(os.path.join(media, name)):
            os.remove(os.path.join(media, name))
        os.symlink(target, os.path.join(media, name))
    def ask_on(s, url, n=6, text="What is this?"):
        body = {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}},
                                                           {"type": "text", "text": text}]}],
                "max_tokens": n, "temperature": 0}
        return s.post("/v1/chat/completions", body)

    server_args = ["-m", llava[0], "--mmproj", llava[1], "-t", "1", "-b", "16", "--media-dir", media,
                   "--max-images", "2", "--parallel", "1"]
    with serving(ctx, *server_args) as s:
        ask = functools.partial(ask_on, s)

        status, o, _ = ask(data_url(img))
        check(status == 200, f"image data URL: {status} {o}")
        want = generate_text(ctx, ["-m", llava[0], "--mmproj", llava[1], "--image", img], "<image>\nWhat is this?", 6)
        check(o["choices"][0]["message"]["content"] == want, f"image: server {o['choices'][0]} vs generate {want!r}")
        check(o["usage"]["prompt_tokens"] > 64, f"the image's 64 positions are in the prompt: {o['usage']}")
        status, o2, _ = ask("file://" + img)
        check(status == 200 and o2["choices"] == o["choices"], f"file:// under --media-dir: {status} {o2}")
        status, o2, _ = ask("file://" + os.path.join(media, "in.ppm"))
        check(status == 200 and o2["choices"] == o["choices"], f"a link in --media-dir to a file in it: {status} {o2}")
        refused = [
            ("file://" + outside, "outside --media-dir"),
            ("file://" + media + "/../b.ppm", "a path out of --media-dir through .."),
            ("file://" + os.path.join(media, "out.ppm"), "a link in --media-dir to a file outside it"),
            ("file://" + os.path.join(media, "none.ppm"), "a file that is not there"),
            ("file://" + media, "the folder itself"),
            ("http://example.com/a.png", "a URL scheme other than data and file"),
            ("data:image/png;base64,@@@@", "bad base64"),
            (f"data:image/png;base64,{base64.b64encode(b'hello, not an image').decode()}", "a non-image payload"),
            (data_url(img, "text/plain"), "a data URL that is not an image type"),
        ]
        for url, what in refused:
            status, o, _ = ask(url)
            check(status == 400 and o["error"]["message"], f"{what}: {status} {o}")
            check(s.healthy(), f"/health after {what}")
        part = {"type": "image_url", "image_url": {"url": data_url(img)}}
        three = {"messages": [{"role": "user", "content": [part] * 3}]}
        status, o, _ = s.post("/v1/chat/completions", three)
        check(status == 400 and o["error"]["code"] == "too_many_images", f"--max-images: {status} {o}")
        s.stop()
    with serving(ctx, *server_args, gated=True) as s:  # --parallel 1: a request waits while another runs
        swapped_link(s, functools.partial(ask_on, s), media, img, secret, want)
        s.stop()
    # The root as --media-dir: every file is under it. A request's images hold at most --max-body bytes in all,
    # files as data URLs (a.ppm is 793 bytes).
    big = write_ppm(os.path.join(ctx.tmp, "big.ppm"), 40, 40, 2)
    with serving(ctx, "-m", llava[0], "--mmproj", llava[1], "-t", "1", "--media-dir", "/", "--max-body", "2KiB") as s:
        def files(*paths):
            parts = [{"type": "image_url", "image_url": {"url": "file://" + p}} for p in paths]
            return {"messages": [{"role": "user", "content": parts + [{"type": "text", "text": "What is this?"}]}],
                    "max_tokens": 6, "temperature": 0}

        status, o3, _ = s.post("/v1/chat/completions", files(img))
        check(status == 200 and o3["choices"][0]["message"]["content"] == want,
              f"file:// under --media-dir /: {status} {o3}")
        for paths, what in (((big,), "a file over --max-body"), ((img,) * 3, "files over --max-body together")):
            status, o4, _ = s.post("/v1/chat/completions", files(*paths))
            check(status == 413 and o4["error"]["code"] == "image_too_large", f"{what}: {status} {o4}")
        s.stop()


def swapped_link(s, ask, media, img, secret, want):
    """The file checked is the file read: a file:// request that waits in the queue (--parallel 1, a long stream
    running, the scheduler held) holds its file's bytes, so a link to a file outside --media-dir swapped in for the
    file meanwhile changes nothing; the answer is the file's (want)."""
    swap = os.path.join(media, "swap.ppm")
    for f in (swap, swap + ".new"):  # links from an earlier run
        if os.path.lexists(f):
            os.remove(f)
    shutil.copyfile(img, swap)
    sock = stream_running(s, {"messages": [{"role": "user", "content": "Tell a long story."}],
                              "max_tokens": 3900, "ignore_eos": True})
    got = []
    t = threading.Thread(target=lambda: got.append(ask("file://" + swap)))
    t.start()
    s.wait_for("the file:// request queued", lambda: [x["state"] for x in slots(s)] == ["running", "queued"])
    os.symlink(secret, swap + ".new")
    os.replace(swap + ".new", swap)  # swap.ppm is a link to the outside file now
    sock.close()  # the stream's session goes once the hang-up is seen; the request's turn comes
    s.release()
    t.join(120)
    status, o2, _ = got[0]
    check(status == 200 and o2["choices"][0]["message"]["content"] == want,
          f"a link swapped in while the request waits: {status} {o2}")


def stream_running(s, body):
    """A streaming request on a held server: turns until its session runs, then its first event read; returns
    the socket."""
    sock = socket.create_connection(("127.0.0.1", s.port), timeout=60)
    data = json.dumps(dict(body, stream=True)).encode()
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n" % len(data) + data)
    s.wait_for("the stream queued", lambda: slots(s))
    for _ in range(100):
        if any(x["state"] == "running" for x in slots(s)):
            break
        s.turn()
    got = b""
    while b"data: " not in got:
        chunk = sock.recv(4096)
        check(chunk, "the stream started")
        got += chunk
    return sock


def rss_bytes(pid):
    """A process's resident memory (VmRSS of /proc/PID/status), in bytes."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for process {pid}")


def leave_mid_stream(s, body, deadline):
    """A streaming request whose client hangs up after the first event (retried while the queue is full); True
    when it got a stream and left it."""
    data = json.dumps(dict(body, stream=True)).encode()
    while time.time() < deadline:
        sock = socket.create_connection(("127.0.0.1", s.port), timeout=60)
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n" % len(data) + data)
        got = b""
        while b"\r\n\r\n" not in got or (got.startswith(b"HTTP/1.1 200") and b"data: " not in got):
            chunk = sock.recv(4096)
            if not chunk:
                break
            got += chunk
        sock.close()
        if got.startswith(b"HTTP/1.1 200") and b"data: " in got:
            return True
        check(got.startswith(b"HTTP/1.1 503"), f"a client that leaves: {got[:300]!r}")
        time.sleep(0.2)
    return False


def case_serve_load(ctx):
    model = ctx.model(SMOL)
    MiB = 1024 * 1024
    budget, parallel, n_clients = 12 * MiB, 4, 64
    with serving(ctx, "-m", model, "-t", "2", "--parallel", str(parallel), "--queue", "40", "--kv-memory", "12MiB",
                 "--kv", "snapkv:budget=0.5", gated=True) as s:
        # The server's resident memory: after startup it holds the code and the weights (mapped, and touched by
        # the one-token prefill that measures a position's bytes before it listens). Under load it may hold
        # besides, at once:
        #  - the KV caches: at most --kv-memory, by the admission rule (checked below through /metrics);
        #  - each session's own buffers, for at most --parallel sessions (the filling one included: it is
        #    admitted only when a slot is free). For SmolLM2-135M (embedding E 576, feed-forward F 1536, kv
        #    width 192, 30 layers, vocabulary 49152) with the default -b 512, --ctx-size 4096 and -t 2: forward
        #    buffers for 512 rows, gate and up 2*512*F*4 = 6 MiB, the matmul scratch 512*F*4 = 3 MiB, x, xn, q and
        #    att 4*512*E*4 = 4.5 MiB, k and v 2*512*192*4 = 0.75 MiB, attention 2 threads*32*4096*4 = 1 MiB;
        #    snapkv's query window 30*32*E*4 = 2.1 MiB; logits and the sampler's candidates 49152*12 = 0.6 MiB;
        #    statistics and tags by position, under 1 MiB: SESSION = 20 MiB each;
        #  - process-wide buffers: a decode step's (the matmul scratch of 512 rows, 3 MiB, and the logits of
        #    every row) and OpenBLAS's packing buffers (about 1 MiB a thread): 8 MiB;
        #  - each connection's memory (libmicrohttpd's 32 KiB pool, the request and its event buffer; no thread
        #    of its own): 256 KiB for each of the 64 clients, 16 MiB at most;
        #  - 16 MiB of slack for the allocator's fragmentation (KV heads grow by reallocation) and the prompts.
        # glibc keeps much of what it freed: its mmap threshold rises to the largest block freed (a session's
        # 3 MiB buffers, up to 32 MiB) and then such blocks come from arenas it trims only when their free top
        # passes twice that, so after the load the server may keep up to what it used at once — everything
        # above but a decode step's buffers and the slack. A leak of the sessions' memory instead grows with
        # the sessions run (over 40 here, each with SESSION of buffers and up to 7 MiB of KV).
        SESSION = 20 * MiB
        rss0 = rss_bytes(s.p.pid)
        retained = budget + parallel * SESSION + 8 * MiB + n_clients * 256 * 1024
        rss_bound = rss0 + retained + 16 * MiB
        # 64 streaming clients at once, mixed policies (kvzip's pass over the prompt included), a tight budget:
        # those the queue (40, and the 4 free slots) cannot hold get 503 while the scheduler is held. Four of them
        # hang up after their first event (and retry while the queue is full).
        policies = [None, "h2o:budget=0.3", "streaming:budget=0.5", "snapkv:budget=0.2+decode=h2o", "kvzip:budget=0.3"]
        leavers = {i for i in range(n_clients) if i % 16 == 15}
        outcomes = [None] * n_clients

        def client(i):
            body = chat(f"Story {i}: " + PASSAGE[: 80 + 7 * (i % 24)] + " Go on.", max_tokens=6 + i % 5, seed=i)
            body["temperature"] = 0.7
            if policies[i % len(policies)]:
                body["kv"] = policies[i % len(policies)]
            if i in leavers:
                outcomes[i] = ("left", leave_mid_stream(s, dict(body, max_tokens=40, ignore_eos=True),
                                                        time.time() + 60))
                return
            status, _, data = s.request("POST", "/v1/chat/completions", dict(body, stream=True))
            outcomes[i] = (status, data)

        threads = [threading.Thread(target=client, args=(i,)) for i in range(n_clients)]
        for t in threads:
            t.start()
        s.wait_for("the queue full", lambda: s.metrics()["kvfold_sessions_queued"] == 40 + parallel)
        check(s.healthy(), "/health while every slot and the queue are taken")
        s.release()
        samples, rss = [0], [rss0]
        while any(t.is_alive() for t in threads):
            m = s.metrics()
            rss.append(rss_bytes(s.p.pid))  # at the moment /metrics is read
            samples.append(m["kvfold_kv_bytes_in_use"])
            time.sleep(0.02)
        for t in threads:
            t.join()
        statuses = [o[0] for i, o in enumerate(outcomes) if i not in leavers]
        check(set(statuses) <= {200, 503} and statuses.count(200) >= 40 - len(leavers), f"statuses: {statuses}")
        check(all(outcomes[i] == ("left", True) for i in leavers), f"the clients that leave: {outcomes}")
        for i, (status, data) in enumerate(outcomes):
            if i in leavers:
                continue
            if status == 200:
                check(data.endswith(b"data: [DONE]\n\n") and b'"finish_reason":"' in data, f"a stream: {data[-200:]}")
            else:
                check(json.loads(data)["error"]["code"] == "queue_full", f"503 body: {data!r}")
        # The sessions of the clients that left go at the next step after the hang-up is noticed.
        deadline = time.time() + 10
        while time.time() < deadline and (m := s.metrics())["kvfold_sessions_active"] + m["kvfold_sessions_queued"]:
            time.sleep(0.05)
        m = s.metrics()
        check(max(samples) <= budget and 0 < m["kvfold_kv_bytes_peak"] <= budget and
              m["kvfold_kv_reservation_overruns_total"] == 0,
              f"KV in use {max(samples)} / peak {m['kvfold_kv_bytes_peak']} within {budget}")
        check(m["kvfold_sessions_active"] == 0 and m["kvfold_sessions_queued"] == 0 and
              m["kvfold_kv_bytes_in_use"] == 0 and m["kvfold_kv_bytes_reserved"] == 0, f"all freed: {m}")
        check(slots(s) == [], "/slots is empty after the load")
        rss_after = rss_bytes(s.p.pid)
        print(f"server RSS: {rss0 / MiB:.1f} MiB after startup, {max(rss) / MiB:.1f} MiB at most under load "
              f"(bound {rss_bound / MiB:.1f}), {rss_after / MiB:.1f} MiB after (bound "
              f"{(rss0 + retained) / MiB:.1f})")
        check(max(rss) <= rss_bound, f"server RSS {max(rss)} under load, over {rss_bound} "
              f"(after startup {rss0} + {retained + 16 * MiB})")
        check(rss_after <= rss0 + retained, f"server RSS {rss_after} after the load, {rss_after - rss0} over "
              f"its {rss0} after startup (allowed {retained}): the sessions' memory leaks")
        # A request that alone exceeds the budget: 413 with the numbers.
        status, o, _ = s.post("/v1/chat/completions", chat(QUESTION, max_tokens=3000))
        check(status == 413 and str(budget) in o["error"]["message"], f"over the budget alone: {status} {o}")
        s.stop()


def case_serve_errors(ctx):
    model = ctx.model(SMOL)
    with serving(ctx, "-m", model, "-t", "1", "-c", "256", "--max-body", "4KiB", "--api-key", "sekret",
                 key="sekret") as s:
        long_prompt = "word " * 600
        battery = [
            (400, "not JSON", "{\"messages\": ["),
            (400, "a JSON array", []),
            (400, "messages missing", {"max_tokens": 3}),
            (400, "messages not an array", {"messages": "hi"}),
            (400, "an empty messages array", {"messages": []}),
            (400, "an unknown role", {"messages": [{"role": "tool", "content": "x"}]}),
            (400, "content of the wrong type", {"messages": [{"role": "user", "content": 5}]}),
            (400, "an unknown content part", {"messages": [{"role": "user", "content": [{"type": "audio"}]}]}),
            (400, "an image for a text model", {"messages": [{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]}),
            (400, "max_tokens 0", chat("x", max_tokens=0)),
            (400, "max_tokens negative", chat("x", max_tokens=-4)),
            (400, "max_tokens a string", chat("x", max_tokens="5")),
            (400, "max_tokens fractional", chat("x", max_tokens=1.5)),
            (400, "temperature a string", dict(chat("x"), temperature="hot")),
            (400, "stop a number", chat("x", stop=5)),
            (400, "stream a string", chat("x", stream="yes")),
            (400, "n of 2", chat("x", n=2)),
            (400, "a bad kv spec", chat("x", kv="snapkv:budgett=0.2")),
            (400, "a kv naming a file of the server", chat("x", kv="prefixkv:profile=/etc/passwd")),
            (400, "a kv naming a scorer file of the server", chat("x", kv="kvzap:scorer=/etc/passwd")),
            (400, "a media marker in the text", chat("what is in <image>?")),
            (400, "a media marker in a text part", {"messages": [{"role": "user", "content": [
                {"type": "text", "text": "<video> frames"}]}]}),
            (400, "a prompt over the context", chat(long_prompt[:3900])),
            (413, "a body over --max-body", chat(long_prompt * 2)),
        ]
        for status, what, body in battery:
            got, headers, data = s.request("POST", "/v1/chat/completions", body)
            err = json.loads(data).get("error", {}) if data.startswith(b"{") else {}
            check(got == status and err.get("message") and err.get("type") and err.get("code"),
                  f"{what}: {got} {data[:300]!r}, want {status} with an OpenAI error body")
            check(s.healthy(), f"/health after {what}")
        # Any model name is the one model (llama-server's way); answers name the file.
        got, o = s.post("/v1/chat/completions", chat("x", model="gpt-4o", max_tokens=2))[:2]
        check(got == 200 and o["model"] == SMOL, f"another model's name: {got} {o}")
        got, _, data = s.request("POST", "/v1/chat/completions", chat("x", kv="bogus"))
        check(b"snapkv" in data and b"h2o" in data, f"a bad kv names the valid ones: {data!r}")
        got, _, data = s.request("POST", "/v1/chat/completions", chat(long_prompt[:3900]))
        check(json.loads(data)["error"]["code"] == "context_length_exceeded", f"context: {data!r}")
        for status, method, path, body in [(404, "GET", "/nope", None), (405, "GET", "/v1/chat/completions", None),
                                           (405, "POST", "/health", "{}"), (400, "POST", "/v1/completions", {}),
                                           (400, "POST", "/v1/completions", {"prompt": 7}),
                                           (400, "POST", "/v1/completions", {"prompt": "a <image> here"})]:
            got, _, data = s.request(method, path, body)
            check(got == status, f"{method} {path}: {got}, want {status}: {data!r}")
        # --api-key: everything but /health needs it.
        for path in ("/v1/models", "/metrics", "/slots"):
            check(s.request("GET", path, key=False)[0] == 401, f"{path} without the key")
            check(s.request("GET", path, headers={"Authorization": "Bearer sekreT"}, key=False)[0] == 401,
                  f"{path} with a wrong key")
            check(s.request("GET", path)[0] == 200, f"{path} with the key")
        check(s.request("POST", "/v1/chat/completions", chat("hi", max_tokens=2), key=False)[0] == 401,
              "a completion without the key")
        check(s.request("POST", "/v1/chat/completions", chat("hi", max_tokens=2))[0] == 200, "with the key")
        m = s.metrics()
        check(m['kvfold_requests_total{status="400"}'] >= 18 and m['kvfold_requests_total{status="401"}'] >= 7,
              f"requests by status: {m}")
        s.stop()
    # Startup errors are usage errors with one line.
    for args, what in [(["--kv-memory", "lots"], "a bad size"), (["--kv", "nope"], "a bad --kv"),
                       (["--host", "example.com"], "a host that is not an address"),
                       (["--api-key", ""], "an empty --api-key"), (["--alias", ""], "an empty --alias"),
                       (["-ctk", "q8_0", "-ctv", "q5"], "a bad -ctv")]:
        rc, _, err = ctx.run("serve", "-m", model, "--port", "0", *args)
        check(rc != 0 and err.startswith("kvfold: error: "), f"{what}: exit {rc} {err!r}")


def half_headers(s, n):
    """n connections that send half a request header and then nothing."""
    socks = []
    for _ in range(n):
        sock = socket.create_connection(("127.0.0.1", s.port), timeout=60)
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Le")
        socks.append(sock)
    return socks


def closed_by_server(sock, timeout):
    """Whether the server closes the connection within timeout seconds."""
    sock.settimeout(timeout)
    try:
        while sock.recv(4096):
            pass
        return True
    except (socket.timeout, TimeoutError):
        return False
    except ConnectionResetError:
        return True


def case_serve_conns(ctx):
    """Connections that cannot starve the server: a few hundred idle ones that sent half a header, and a body
    trickled a byte at a time, while /health, /metrics and a completion are answered at once; --timeout closes
    both. On a held scheduler (its turns taken when the case says): every slot and the queue taken, /health and
    /metrics still answered and the next request refused with 503; a client that hangs up mid-stream has its
    session freed within a turn or two and its request logged as cut; SIGTERM with a stream running ends it with
    an error event."""
    model = ctx.model(SMOL)
    with serving(ctx, "-m", model, "-t", "1", "--parallel", "1", "--queue", "1", "--timeout", "3",
                 gated=True) as s:
        idle = half_headers(s, 300)
        check(s.healthy() and s.metrics()["kvfold_sessions_active"] == 0, "/health and /metrics beside 300 idle")
        trickle = socket.create_connection(("127.0.0.1", s.port), timeout=60)
        trickle.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                        b"Content-Length: 1000\r\n\r\n{")
        cut, t0 = False, time.time()
        while not cut and time.time() - t0 < 30:  # a byte every 0.5 s, well inside the idle timeout
            time.sleep(0.5)
            try:
                trickle.sendall(b" ")
            except (BrokenPipeError, ConnectionResetError):
                cut = True
        check(cut or closed_by_server(trickle, 1), "a trickled body is cut after --timeout")
        check(3 <= time.time() - t0 < 15, f"the trickled body was cut after {time.time() - t0:.1f} s (--timeout 3)")
        check(all(closed_by_server(x, 10) for x in idle), "idle connections are closed after --timeout")
        check(any("(cut: the body took over --timeout)" in line for line in s.log), "the log names the slow body")
        # Every slot and the queue taken while the scheduler is held.
        busy = [stream_running(s, chat(PASSAGE, max_tokens=200, ignore_eos=True))]
        waiting = []
        t = threading.Thread(target=lambda: waiting.append(s.post("/v1/chat/completions", chat("Hi", max_tokens=2))))
        t.start()
        s.wait_for("the second request queued", lambda: s.metrics()["kvfold_sessions_queued"] == 1)
        status, o, _ = s.post("/v1/chat/completions", chat("Hi", max_tokens=2))
        check(status == 503 and o["error"]["code"] == "queue_full", f"a third request: {status} {o}")
        check(s.healthy() and s.metrics()["kvfold_sessions_active"] == 1, "/health and /metrics while full")
        # The running stream's client hangs up: the session goes within a turn or two.
        busy[0].close()
        for _ in range(20):
            if not any(x["state"] == "running" for x in slots(s)):
                break
            time.sleep(0.3)  # the hang-up is looked for every 200 ms
            s.turn()
        check(not any(x["state"] == "running" for x in slots(s)), f"the session of a client that left: {slots(s)}")
        s.wait_for("the cut request's log line",
                   lambda: any(re.search(r"POST /v1/chat/completions 200 .*\(cut\)$", x) for x in s.log))
        # The waiting request runs; then SIGTERM with a stream running.
        for _ in range(100):
            if not slots(s):
                break
            s.turn()
        t.join(120)
        check(waiting[0][0] == 200, f"the queued request: {waiting}")
        sock = stream_running(s, chat("Write a long story about a dragon.", max_tokens=200, ignore_eos=True))
        s.stop()
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
        check(b"shutting_down" in data and b"data: [DONE]\n\n" in data, f"a stream cut by SIGTERM: {data[-300:]!r}")


def case_serve_figures(ctx):
    """The figures exact. The peak KV bytes are seen at their true maximum, a prompt's full cache before its
    compression, which happens inside one turn. Cached tokens count only when a cached session's positions were
    used: a policy that needs the whole prompt in one pass starts the session over (0 cached, every position
    prefilled). No session outgrows its reservation, KVzip's pass over the prompt included. The model's name is
    --alias."""
    model = ctx.model(SMOL)
    first = chat(PASSAGE + " Summarise.", max_tokens=4)
    with serving(ctx, "-m", model, "-t", "1", "--cache-sessions", "2", "--alias", "my-model") as s:
        status, _, data = s.request("GET", "/v1/models")
        check(status == 200 and json.loads(data)["data"][0]["id"] == "my-model", f"--alias: {data!r}")
        status, o, _ = s.post("/v1/chat/completions", dict(first, kv="snapkv:budget=0.2"))
        kv, m = o["kv"], s.metrics()
        check(status == 200 and o["model"] == "my-model", f"the answer names --alias: {o}")
        check(kv["bytes_kept"] < kv["bytes_full"] <= kv["peak_bytes"] and
              kv["bytes_full"] <= m["kvfold_kv_bytes_peak"], f"the peak before compression: {kv}, metrics {m}")
        check(m["kvfold_prompt_tokens_total"] == o["usage"]["prompt_tokens"], f"prompt tokens prefilled: {m}")

        def next_turn(o, kv):
            turn2 = dict(first, kv=kv, messages=first["messages"] + [
                {"role": "assistant", "content": o["choices"][0]["message"]["content"]},
                {"role": "user", "content": "And what did the baker sell?"}])
            status, o2, _ = s.post("/v1/chat/completions", turn2)
            check(status == 200, f"turn 2 ({kv}): {status} {o2}")
            return o2["usage"]["prompt_tokens"], o2["usage"]["prompt_tokens_details"]["cached_tokens"], s.metrics()

        # snapkv: the next turn goes on in the cached session; only the rest of its prompt is prefilled.
        before = m
        n, cached, m = next_turn(o, "snapkv:budget=0.2")
        check(cached > 0 and m["kvfold_prompt_tokens_reused_total"] == cached and
              m["kvfold_prompt_tokens_total"] == before["kvfold_prompt_tokens_total"] + n - cached,
              f"snapkv's turn 2: {cached} of {n} positions cached; metrics {m}")
        # Block-wise prefill with question=1 needs the whole prompt in one pass: the cached session starts over.
        kv = "blockwise:budget=64,block=32,question=1"
        status, o, _ = s.post("/v1/chat/completions", dict(first, kv=kv))
        before = s.metrics()
        n, cached, m = next_turn(o, kv)
        check(cached == 0 and m["kvfold_prompt_tokens_reused_total"] == before["kvfold_prompt_tokens_reused_total"]
              and m["kvfold_prompt_tokens_total"] == before["kvfold_prompt_tokens_total"] + n,
              f"{kv}'s turn 2: {cached} of {n} positions counted cached; metrics {m}")
        check(m["kvfold_kv_reservation_overruns_total"] == 0, f"no session outgrew its reservation: {m}")
        # KVzip's reconstruction repeats the prompt after it while it compresses (its peak over the full cache's
        # bytes): a request reserves those positions too, in the next turn as in the first.
        status, o, _ = s.post("/v1/chat/completions", dict(first, kv="kvzip:budget=0.5"))
        kv = o["kv"]
        check(status == 200 and kv["peak_bytes"] > 1.5 * kv["bytes_full"], f"kvzip's pass: {kv}")
        n, cached, m = next_turn(o, "kvzip:budget=0.5")
        check(cached > 0 and m["kvfold_kv_reservation_overruns_total"] == 0,
              f"kvzip held no more than it reserved: {m}")
        s.stop()


class ServeCtx(Ctx):
    def __init__(self, binary, models, fixtures, tmp):
        super().__init__(binary, models, "", tmp)
        self.fixtures = fixtures


CASES = {name[5:]: fn for name, fn in globals().items() if name.startswith("case_")}

if __name__ == "__main__":
    random.seed(0)
    sys.exit(run_case(CASES, sys.argv[1], ServeCtx(*sys.argv[2:6])))
