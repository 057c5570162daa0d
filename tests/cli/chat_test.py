"""End-to-end tests of kvfold chat and of generate's llama.cpp flags, one case
per ctest entry.

usage: chat_test.py CASE KVFOLD_BINARY MODELS_DIR FIXTURE_DIR TMP_DIR

Conversations are scripted through a pipe, and once through a pseudo-terminal
(Python's pty), where Ctrl-C stops a reply. Exit status 0 = pass, 1 = fail,
77 = skipped (a file is absent). Standard library only.
"""
import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_test import SMOL, Ctx, Skip, check, expect_error, interrupt_at, run_case  # noqa: E402
from mm_test import MM, write_ppm  # noqa: E402

CHATML = ["--chat-template", "chatml"]


def chat(ctx, lines, *args, timeout=240):
    """kvfold chat with lines on stdin: (exit status, stdout, stderr)."""
    p = subprocess.run([ctx.bin, "chat", *args], input="".join(l + "\n" for l in lines).encode(),
                       capture_output=True, timeout=timeout)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


KV_LINE = re.compile(r"kv: (\S+), (\S+); (\d+) positions seen of (\d+); ([\d.]+) MiB of ([\d.]+) MiB")


def kv_reports(out):
    """Every /kv report: (positions seen, MiB held, MiB a full cache holds, entries per layer)."""
    lines = out.splitlines()
    reps = []
    for i, line in enumerate(lines):
        m = KV_LINE.match(line)
        if m:
            per_layer = [int(x) for x in lines[i + 1].split(":")[1].split()]
            reps.append((int(m.group(3)), float(m.group(5)), float(m.group(6)), per_layer))
    return reps


def case_chat_turns(ctx):
    smol = ctx.model(SMOL)
    turns = ["Hello! My name is Ana.", "What is my name?"]
    # -b 1: every pass one row, as decoding is, so that the conversation and a
    # one-shot prompt of the same tokens compute bit for bit the same.
    rc, out, err = chat(ctx, turns, "-m", smol, "-n", "12", "-b", "1", *CHATML)
    check(rc == 0, f"chat: exit {rc}: {err}")
    replies = out.splitlines()
    check(len(replies) == 2 and all(replies), f"two replies, one line each: {out!r}")
    check(re.search(r"kvfold: chat: 2 turns; prompts \d+ tokens", err), f"the closing line: {err!r}")
    # The reference: the whole conversation as one raw prompt.
    whole = (f"<|im_start|>user\n{turns[0]}<|im_end|>\n<|im_start|>assistant\n{replies[0]}<|im_end|>\n"
             f"<|im_start|>user\n{turns[1]}<|im_end|>\n<|im_start|>assistant\n")
    rc, ref, err = ctx.run("generate", "-m", smol, "-n", "12", "-b", "1", "--special", "--no-escape", "-p", whole)
    check(rc == 0 and ref.rstrip("\n") == replies[1],
          f"the second reply {replies[1]!r} is not the one-shot prompt's {ref!r}")

    # Commands: /kv, an unknown command and /image on a text model (errors,
    # the conversation goes on), /reset (then the first reply again), /exit.
    script = [turns[0], "/kv", "/nope", "/image x.png", "/help", "/reset", "/kv", turns[0], "/exit", "never sent"]
    rc, out, err = chat(ctx, script, "-m", smol, "-n", "12", "-b", "1", *CHATML)
    check(rc == 0, f"commands: exit {rc}: {err}")
    check("unknown command '/nope'" in err and "no vision tower" in err, f"command errors: {err!r}")
    check("/image PATH" in out and "(the conversation is forgotten)" in out, f"/help and /reset: {out!r}")
    reps = kv_reports(out)
    check(len(reps) == 2, f"two /kv reports: {out!r}")
    n_layer = len(reps[0][3])
    check(reps[0][0] > 10 and all(n == reps[0][0] for n in reps[0][3]),
          f"full cache: every layer holds every position: {reps[0]}")
    check(reps[1][0] == 0 and reps[1][3] == [0] * n_layer, f"after /reset the cache is empty: {reps[1]}")
    check(out.count(replies[0]) == 2, f"after /reset the first reply again: {out!r}")
    check("1 turns" not in err and "2 turns" in err, f"/exit ends before 'never sent': {err!r}")

    # generate -cnv runs the same conversation, -p its first turn.
    p = subprocess.run([ctx.bin, "generate", "-cnv", "-m", smol, "-n", "12", "-b", "1", *CHATML, "-p", turns[0]],
                       input=(turns[1] + "\n").encode(), capture_output=True, timeout=240)
    check(p.returncode == 0 and p.stdout.decode().splitlines() == replies, f"generate -cnv: {p.stdout!r}")
    # Errors: a bad template, -n 0.
    expect_error(ctx, 1, ["chat", "-m", smol, "--chat-template", "nope"], "unknown template")
    expect_error(ctx, 1, ["chat", "-m", smol, "-n", "0"], "-n 0")


def case_chat_kv(ctx):
    smol = ctx.model(SMOL)
    turns = ["Tell me about the history of the city of Paris in a few sentences.", "/kv",
             "And what about its museums?", "/kv", "Which one would you visit first, and why?", "/kv"]
    spec = "snapkv:budget=0.3+decode=h2o"
    rc, out, err = chat(ctx, turns, "-m", smol, "-n", "40", "--kv", spec)
    check(rc == 0, f"chat --kv: exit {rc}: {err}")
    reps = kv_reports(out)
    check(len(reps) == 3, f"three /kv reports: {out!r}")
    seen = [r[0] for r in reps]
    check(seen[0] < seen[1] < seen[2], f"positions grow turn by turn: {seen}")
    for n, held, full, per_layer in reps:
        # the budget applies to the positions seen: 30% of them (the window of
        # recent entries SnapKV keeps is 32 of them)
        check(held < full, f"compressed: {held} MiB held, a full cache {full} MiB")
        check(max(per_layer) <= max(0.3 * n, 32) + 2, f"{n} positions seen, {max(per_layer)} entries kept")
    check(reps[2][1] < 0.6 * reps[2][2], f"the cache stays near its budget: {reps[2]}")
    # snapkv scores with the end of each message: the chat says once that the next question comes too late for it
    check(err.count("is question-aware") == 1 and spec in err, f"the question-aware note: {err!r}")
    rc, out, err = chat(ctx, turns[:2], "-m", smol, "-n", "4", "--kv", "keydiff:budget=0.3")
    check(rc == 0 and "question-aware" not in err, f"keydiff is question-agnostic: {err!r}")


def case_chat_image(ctx):
    mm = MM(ctx.bin, ctx.models, ctx.fixtures, ctx.tmp)
    img = write_ppm(os.path.join(ctx.tmp, "a.ppm"), 30, 20, 1)
    rc, out, err = chat(ctx, [f"/image {img}", "What is this?", "/kv", "/image /nonexistent.png", "And now?", "/kv"],
                        *mm.llava(), "-n", "4")
    check(rc == 0, f"chat with an image: exit {rc}: {err}")
    check(f"({img}: attached to the next message)" in out, f"/image acknowledged: {out!r}")
    check("cannot read image '/nonexistent.png'" in err, f"a missing image is an error line: {err!r}")
    reps = kv_reports(out)
    check(len(reps) == 2 and reps[0][0] > 64 and reps[1][0] > reps[0][0], f"the image's 64 positions: {reps}")
    # A video: a directory of frames, a <video> marker for the next message.
    vdir = os.path.join(ctx.tmp, "clip")
    os.makedirs(vdir, exist_ok=True)
    for i in range(2):
        write_ppm(os.path.join(vdir, f"f{i}.ppm"), 30, 20, 2 + i)
    rc, out, err = chat(ctx, ["/video /nonexistent-dir", f"/video {vdir}", "What happens?", "/kv"], *mm.llava(),
                        "-n", "4")
    check(rc == 0 and f"({vdir}: attached to the next message)" in out, f"/video acknowledged: {rc} {out!r} {err!r}")
    check("cannot open video directory '/nonexistent-dir'" in err, f"a missing video is an error line: {err!r}")
    reps = kv_reports(out)
    check(len(reps) == 1 and reps[0][0] > 2 * 64, f"the video's 2 x 64 positions: {reps}")
    # A message with a marker but no image is refused, and the chat goes on.
    rc, out, err = chat(ctx, ["<image> what?", "/kv"], *mm.llava(), "-n", "4")
    check(rc == 0 and kv_reports(out)[0][0] == 0, f"an <image> marker without /image: {rc} {out!r} {err!r}")


class Pty:
    """kvfold chat on a pseudo-terminal."""

    def __init__(self, argv, env=None):
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            try:
                os.execve(argv[0], argv, env or os.environ)
            finally:
                os._exit(127)
        self.buf = b""

    def wait_stopped(self, timeout=120):
        """Reads the terminal until the chat stops itself at its KVFOLD_PAUSE_AT point."""
        end = time.time() + timeout
        while True:
            with open(f"/proc/{self.pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] in ("T", "t"):
                    return
            if time.time() > end:
                raise AssertionError(f"the chat did not reach its pause point: {self.buf[-400:]!r}")
            if select.select([self.fd], [], [], 0.01)[0]:
                self.buf += os.read(self.fd, 4096)

    def expect(self, pattern, timeout=120):
        end = time.time() + timeout
        while not re.search(pattern, self.buf):
            left = end - time.time()
            if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                raise AssertionError(f"no {pattern!r} on the terminal: {self.buf[-400:]!r}")
            try:
                self.buf += os.read(self.fd, 4096)
            except OSError:  # the child is gone
                raise AssertionError(f"no {pattern!r}; the chat ended: {self.buf[-400:]!r}")
        return self.buf

    def send(self, text):
        os.write(self.fd, text.encode())

    def wait(self):
        return os.waitpid(self.pid, 0)[1]


def case_chat_pty(ctx):
    smol = ctx.model(SMOL)
    # --ignore-eos: the reply goes on until the Ctrl-C, which comes once it has 3 tokens (KVFOLD_PAUSE_AT holds
    # the chat there, however fast it decodes).
    t = Pty([ctx.bin, "chat", "-m", smol, "-n", "-1", "--temp", "0.8", "--seed", "3", "--repeat-penalty", "1.0",
             "--ignore-eos"], env=dict(os.environ, KVFOLD_PAUSE_AT="reply:3"))
    t.expect(rb"/help lists the commands")
    t.expect(rb"> ")
    t.send("Write a very long story about a dragon, with many chapters.\n")
    t.wait_stopped()
    os.kill(t.pid, signal.SIGINT)  # the pty's Ctrl-C: stop this reply, not the chat
    os.kill(t.pid, signal.SIGCONT)
    t.expect(rb"reply interrupted")
    t.expect(rb"> ")
    t.send("/kv\n")
    t.expect(rb"kv: full, f16; \d+ positions seen")
    t.send("/exit\n")
    t.expect(rb"kvfold: chat: 1 turns")
    status = t.wait()
    check(os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, f"exit status {status}")


def case_generate_flags(ctx):
    smol = ctx.model(SMOL)
    base = ["generate", "-m", smol, "--json"]

    def gen(*args, stdin=None):
        p = subprocess.run([ctx.bin, *base, *args], input=stdin, capture_output=True, timeout=240)
        check(p.returncode == 0, f"generate {args}: exit {p.returncode}: {p.stderr.decode()}")
        return json.loads(p.stdout)

    # -r / --stop: the text ends at the first stop string, and keeps it.
    o = gen("-p", "Count: one, two, three, four, five,", "-n", "30")
    words = o["text"].split()
    check(len(words) > 3, f"a long enough continuation: {o['text']!r}")
    stop = words[1]
    o2 = gen("-p", "Count: one, two, three, four, five,", "-n", "30", "-r", "zzz", "--stop", stop)
    check(o2["stop"] == "stop" and o2["text"].endswith(stop) and o["text"].startswith(o2["text"]),
          f"stopped at {stop!r}: {o2['text']!r} (stop {o2['stop']})")
    # The repeat penalty: off by default (1), changes a repetitive greedy text.
    rep = "the cat the cat the cat the cat the cat the cat"
    plain, pen = gen("-p", rep, "-n", "16"), gen("-p", rep, "-n", "16", "--repeat-penalty", "1.5")
    check(plain["sampler"]["repeat_penalty"] == 1 and pen["sampler"]["repeat_penalty"] == 1.5, "sampler JSON")
    check(plain["text"] != pen["text"], f"the penalty changes the text: {plain['text']!r}")
    # -sys is --system; -f - reads stdin; escapes in -p by default, not with --no-escape.
    a = gen("-sys", "Be brief.", "-p", "Hi", "-n", "4")
    b = gen("--system-prompt", "Be brief.", "-f", "-", "-n", "4", stdin=b"Hi")
    check(a["text"] == b["text"] and a["n_prompt"] == b["n_prompt"], "-sys / -f - agree with --system-prompt / -p")
    toks = [[t[5] for t in gen(*args, "-n", "1", "--dump-tags")["tags"]]
            for args in (["-p", "a\\nb\\x41"], ["--no-escape", "-p", "a\nbA"], ["--no-escape", "-p", "a\\nb\\x41"])]
    check(toks[0] == toks[1] != toks[2], f"\\n and \\xHH are escapes by default, not with --no-escape: {toks}")
    # -ctk / -ctv name --kv-type; -c is --ctx-size; --version in a command.
    o = gen("-p", "Hi", "-n", "2", "-ctk", "f16", "-c", "64")
    check(o["kv"]["type"] == "f16" and o["kv"]["n_ctx"] == 64, f"-ctk f16 -c 64: {o['kv']['type']} {o['kv']['n_ctx']}")
    rc, out, _ = ctx.run("perplexity", "--version")
    check(rc == 0 and out.startswith("kvfold "), "perplexity --version")
    expect_error(ctx, 1, ["generate", "-m", smol, "-p", "x", "-n", "0"], "-n 0")
    expect_error(ctx, 1, ["generate", "-m", smol, "-p", "x", "-n", "-2"], "-n -2")

    # --ignore-eos samples past the end-of-generation token a seed reaches
    # (the first of a few seeds whose answer ends within 160 tokens: which
    # one does moves with the kernels' rounding).
    for seed in range(1, 9):
        story = ("--chat", "-p", "What is the capital of France?", "-n", "160", "--temp", "0.9", "--seed", str(seed))
        ends = gen(*story)
        if ends["stop"] == "eog":
            break
    goes_on = gen(*story, "--ignore-eos")
    check(ends["stop"] == "eog" and goes_on["stop"] == "length" and goes_on["n_gen"] == 160 and
          goes_on["sampler"]["ignore_eos"] is True and ends["sampler"]["ignore_eos"] is False,
          f"--ignore-eos: {ends['stop']} after {ends['n_gen']}, then {goes_on['stop']} after {goes_on['n_gen']}")
    # -n -1 runs to the end of the context (--ignore-eos: past the story's
    # end); Ctrl-C stops it and
    # the report still comes, marked interrupted, exit status 130.
    rc, out, err = interrupt_at([ctx.bin, *base, "-p", "Once upon a time", "-n", "-1", "-c", "4096", "--temp", "0.9",
                                 "--seed", "1", "--ignore-eos"], "reply:5")
    check(rc == 130, f"interrupted generate: exit {rc}: {err}")
    o = json.loads(out)
    check(o["interrupted"] is True and o["stop"] == "interrupted" and o["n_gen"] == 5, f"JSON after Ctrl-C: {o}")
    check(o["kv"]["n_ctx"] == 4096, "-n -1 keeps -c")


def case_chat_session(ctx):
    """Session files from the CLI: a conversation saved with /save and loaded with /load (or --session, which
    also saves at the end) answers the next message as the conversation that went on without saving, word for
    word, under a compressing policy; generate --session reuses the saved prompt as far as a new one begins with
    it (llama.cpp's --prompt-cache) and answers as without it; a file of another kind, another model's, or a
    corrupt one is refused with one error line."""
    smol = ctx.model(SMOL)
    kv = ["--kv", "keydiff:budget=0.5+decode=h2o"]
    turns = ["My name is Ana and my code is 4417. Reply with OK.", "What is my code?"]
    saved = os.path.join(ctx.tmp, "chat.kvfs")
    for f in (saved, saved + ".2"):
        if os.path.exists(f):
            os.remove(f)
    args = ["-m", smol, "-n", "12", *CHATML, *kv]
    rc, out, err = chat(ctx, [turns[0], f"/save {saved}", turns[1]], *args)
    check(rc == 0 and f"(saved to {saved}: 2 messages" in out, f"/save: exit {rc}: {out!r} {err!r}")
    lines = out.splitlines()
    reply = lines[-1]
    rc, out, err = chat(ctx, [f"/load {saved}", turns[1]], "-m", smol, "-n", "12", *CHATML)
    check(rc == 0 and f"(loaded from {saved}: 2 messages" in out and "keydiff:budget=0.5+decode=h2o" in out,
          f"/load: exit {rc}: {out!r} {err!r}")
    check(out.splitlines()[-1] == reply, f"after /load the reply {out.splitlines()[-1]!r}, without saving {reply!r}")
    # --session: the first run saves at the end, the second goes on from it
    rc, out, err = chat(ctx, [turns[0]], *args, "--session", saved + ".2")
    check(rc == 0 and os.path.exists(saved + ".2"), f"--session saves at the end: {rc} {err!r}")
    rc, out, err = chat(ctx, [turns[1]], "-m", smol, "-n", "12", *CHATML, "--session", saved + ".2")
    check(rc == 0 and out.splitlines()[-1] == reply and "2 messages" in err,
          f"--session goes on: {out!r} (want {reply!r}) {err!r}")
    # generate --session: the same prompt twice, then one that begins like it
    gen = ["generate", "-m", smol, "-n", "8", "--json", *kv]
    prompt = "The quick brown fox jumps over the lazy dog. " * 20
    pc = os.path.join(ctx.tmp, "prompt.kvfs")
    if os.path.exists(pc):
        os.remove(pc)
    runs = []
    for p in (prompt + "Once", prompt + "Once", prompt + "Twice more"):
        rc, out, err = ctx.run(*gen, "-p", p, "--session", pc)
        check(rc == 0, f"generate --session: exit {rc}: {err}")
        runs.append(json.loads(out))
    fresh = json.loads(ctx.run(*gen, "-p", prompt + "Once")[1])
    check(runs[0]["n_prompt_cached"] == 0 and runs[1]["n_prompt_cached"] == runs[1]["n_prompt"] - 1,
          f"the second run reuses all but the last position: {runs[1]['n_prompt_cached']} of {runs[1]['n_prompt']}")
    check(0 < runs[2]["n_prompt_cached"] < runs[2]["n_prompt"] - 1, f"a longer prompt reuses its first part: {runs[2]}")
    check(runs[0]["text"] == fresh["text"], f"saving changes nothing: {runs[0]['text']!r} {fresh['text']!r}")
    # refusals: a prompt cache is not a chat; another model's file; a corrupt file
    rc, out, err = chat(ctx, [f"/load {pc}", "hi"], "-m", smol, "-n", "4", *CHATML)
    check(rc == 0 and "not a kvfold chat's" in err, f"/load of a prompt cache: {err!r}")
    with open(saved, "rb") as f:
        data = bytearray(f.read())
    data[len(data) // 2] ^= 0x40
    bad = os.path.join(ctx.tmp, "corrupt.kvfs")
    with open(bad, "wb") as f:
        f.write(data)
    line = expect_error(ctx, 2, ["chat", "-m", smol, "--session", bad], "a corrupt --session file")
    check("checksum" in line, f"a corrupt file's error names the checksum: {line!r}")
    gemma = os.path.join(ctx.fixtures, "gemma3-f32.gguf")
    if os.path.exists(gemma):
        line = expect_error(ctx, 2, ["generate", "-m", gemma, "-p", "hi", "-n", "1", "--session", pc],
                            "another model's session")
        check("made with another model" in line, f"another model's file: {line!r}")


def main():
    if len(sys.argv) < 6:
        print(__doc__, file=sys.stderr)
        return 2
    name = sys.argv[1]
    ctx = Ctx(sys.argv[2], sys.argv[3], "", sys.argv[5])
    ctx.fixtures = sys.argv[4]
    cases = {
        "chat_turns": case_chat_turns, "chat_kv": case_chat_kv, "chat_image": case_chat_image,
        "chat_pty": case_chat_pty, "generate_flags": case_generate_flags, "chat_session": case_chat_session,
    }
    return run_case(cases, name, ctx)


if __name__ == "__main__":
    sys.exit(main())
