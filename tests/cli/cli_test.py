"""End-to-end tests of the kvfold CLI, one case per ctest entry.

usage: cli_test.py CASE KVFOLD_BINARY MODELS_DIR SHARED_DIR TMP_DIR

Exit status 0 = pass, 1 = fail, 77 = skipped (a model or data file is absent).
Only the standard library is used.
"""
import json
import math
import os
import re
import shutil
import struct
import signal
import subprocess
import sys
import tempfile
import time
import zlib

SKIP = 77
SMOL = "smollm2-135m-instruct-q4_1.gguf"
GEMMA = "gemma3-270m-q4_k_m.gguf"
QUESTION = "What is the capital of France?"


class Skip(Exception):
    pass


class Ctx:
    def __init__(self, binary, models, shared, tmp):
        self.bin, self.models, self.shared, self.tmp = binary, models, shared, tmp
        os.makedirs(tmp, exist_ok=True)

    def run(self, *args, timeout=240):
        p = subprocess.run([self.bin, *args], capture_output=True, timeout=timeout)
        return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")

    def model(self, name):
        path = os.path.join(self.models, name)
        if not os.path.isfile(path):
            raise Skip(f"{path} is absent (run scripts/models.sh)")
        return path


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)


def run_case(cases, name, ctx):
    """Runs one case: exit status 0 passed, 1 failed, 77 skipped."""
    try:
        cases[name](ctx)
    except Skip as e:
        print(f"SKIP: {e}")
        return SKIP
    except AssertionError as e:
        print(f"FAIL: {e}")
        return 1
    print("ok")
    return 0


def wait_stopped(p, timeout=240):
    """Waits until process p stopped itself at its KVFOLD_PAUSE_AT point (state T in /proc/PID/stat)."""
    deadline = time.monotonic() + timeout
    while True:
        check(p.poll() is None, f"the process ended (exit {p.returncode}) before its KVFOLD_PAUSE_AT point")
        with open(f"/proc/{p.pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] in ("T", "t"):
                return
        check(time.monotonic() < deadline, f"the process did not reach its KVFOLD_PAUSE_AT point in {timeout} s")
        time.sleep(0.01)


def start_paused(args, at, **kw):
    """Starts the command with KVFOLD_PAUSE_AT=at (LABEL:N): it stops itself (SIGSTOP) once LABEL has N units
    done, right before its next Ctrl-C check, whatever the machine's speed. Returns the process, stopped there."""
    p = subprocess.Popen(args, env=dict(os.environ, KVFOLD_PAUSE_AT=at), **kw)
    wait_stopped(p)
    return p


def ctrl_c(p):
    """A Ctrl-C for a process stopped at its pause point: SIGINT, then SIGCONT."""
    p.send_signal(signal.SIGINT)
    p.send_signal(signal.SIGCONT)


def interrupt_at(args, at, timeout=240):
    """Runs the command, sends one Ctrl-C where KVFOLD_PAUSE_AT=at stops it, waits: (exit status, stdout,
    stderr). The output goes to files, so that a full pipe cannot hold the command before its pause point."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        p = start_paused(args, at, stdout=out, stderr=err)
        ctrl_c(p)
        p.wait(timeout)
        out.seek(0)
        err.seek(0)
        return p.returncode, out.read().decode("utf-8", "replace"), err.read().decode("utf-8", "replace")


def expect_error(ctx, code, args, what):
    """The command fails with `code` and one error line on stderr."""
    rc, out, err = ctx.run(*args)
    lines = err.strip().splitlines()
    check(rc == code, f"{what}: exit {rc}, want {code}; stderr: {err!r}")
    check(len(lines) == 1 and lines[0].startswith("kvfold: error: "),
          f"{what}: want one 'kvfold: error:' line, got {err!r}")
    return lines[0]


def case_usage(ctx):
    rc, out, _ = ctx.run("--version")
    check(rc == 0 and re.fullmatch(r"kvfold \d+\.\d+\.\d+ \(git [0-9a-f]+(-dirty)?\)\n|kvfold \S+ \(git unknown\)\n", out),
          f"--version: the version and the commit: {rc} {out!r}")
    rc, out, _ = ctx.run("--help")
    check(rc == 0 and "generate" in out and "perplexity" in out, "--help lists the commands")
    for sub in ("info", "tokenize", "generate", "perplexity", "bench"):
        rc, out, _ = ctx.run(sub, "--help")
        check(rc == 0 and out.startswith(f"usage: kvfold {sub}"), f"{sub} --help: {rc} {out[:80]!r}")
    m = os.path.join(ctx.tmp, "never-opened.gguf")  # usage errors come before any file access
    cases = [
        ((), "no command"),
        (("frobnicate",), "unknown command"),
        (("info", "-m", m, "--frobnicate"), "unknown flag"),
        (("generate", "-m", m, "-p", "hi", "-n", "abc"), "-n abc"),
        (("generate", "-m", m, "-p", "hi", "-n", "12x"), "-n 12x"),
        (("generate", "-m", m, "-p", "hi", "-n", "99999999999"), "-n out of range"),
        (("generate", "-m", m, "-p", "hi", "-n", "0"), "-n 0"),
        (("generate", "-m", m, "-p", "hi", "--temp", "nan"), "--temp nan"),
        (("generate", "-m", m, "-p", "hi", "--top-p", "1.5"), "--top-p 1.5"),
        (("generate", "-m", m, "-p", "hi", "--seed", "-1"), "--seed -1"),
        (("generate", "-m", m, "-p", "hi", "--chat-template", "zephyr"), "unknown template"),
        (("generate", "-m", m, "-p", "hi", "-f", m), "-p and -f"),
        (("generate", "-m", m), "no prompt"),
        (("generate", "-p", "hi"), "missing -m"),
        (("info",), "missing -m"),
        (("info", "-m"), "missing value"),
        (("info", "-m", m, "extra"), "positional argument"),
        (("info", "-m", m, "--json=yes"), "value for a flag"),
        (("bench", "-m", m, "-r", "0"), "-r 0"),
        (("bench", "-m", m, "-p", "0", "-n", "0"), "nothing to bench"),
        (("perplexity", "-m", m), "perplexity without -f"),
    ]
    for args, what in cases:
        expect_error(ctx, 1, args, what)
    line = expect_error(ctx, 1, ("generate", "-m", m, "-p", "hi", "-n", "abc"), "-n abc")
    check("abc" in line and "-n" in line, f"the message names the option and value: {line}")


def bad_files(ctx):
    """(path, description) of broken model files written here."""
    files = []

    def write(name, data, what):
        p = os.path.join(ctx.tmp, name)
        with open(p, "wb") as f:
            f.write(data)
        files.append((p, what))

    write("text.gguf", b"This is a plain text file, not a model.\n" * 20, "text file named .gguf")
    write("empty.gguf", b"", "empty file")
    header = struct.pack("<IQQ", 3, 0, 0)
    write("magic.gguf", b"GGUX" + header, "wrong magic")
    write("version.gguf", b"GGUF" + struct.pack("<IQQ", 99, 0, 0), "unknown version")
    # A header that promises 2^40 tensors and key-value pairs.
    write("counts.gguf", b"GGUF" + struct.pack("<IQQ", 3, 1 << 40, 1 << 40), "absurd counts")
    # A key whose string length runs past the end of the file.
    write("keylen.gguf", b"GGUF" + struct.pack("<IQQQ", 3, 0, 1, 1 << 50) + b"general.architecture",
          "string past the end")
    return files


def case_badfiles(ctx):
    missing = os.path.join(ctx.tmp, "does-not-exist.gguf")
    expect_error(ctx, 2, ("info", "-m", missing), "missing file")
    expect_error(ctx, 2, ("generate", "-m", missing, "-p", "hi"), "missing file")
    expect_error(ctx, 2, ("tokenize", "-m", missing, "-p", "hi"), "missing file")
    expect_error(ctx, 2, ("generate", "-m", missing, "-f", missing), "missing prompt file")
    for path, what in bad_files(ctx):
        for cmd in (("info", "-m", path), ("generate", "-m", path, "-p", "hi"), ("tokenize", "-m", path, "-p", "x")):
            expect_error(ctx, 2, cmd, f"{what} ({cmd[0]})")


def case_badfiles_real(ctx):
    """Truncated copies of a real model: inside the metadata, and inside the
    tensor data (only the end of the last tensor missing)."""
    src = ctx.model(SMOL)
    size = os.path.getsize(src)
    with open(src, "rb") as f:
        data = f.read()
    for name, cut in (("trunc-meta.gguf", 1 << 20), ("trunc-data.gguf", size - 4096), ("trunc-half.gguf", size // 2)):
        p = os.path.join(ctx.tmp, name)
        with open(p, "wb") as f:
            f.write(data[:cut])
        expect_error(ctx, 2, ("info", "-m", p), f"{name} ({cut} of {size} bytes)")
        expect_error(ctx, 2, ("generate", "-m", p, "-p", "hi", "-n", "2"), f"{name} generate")
        os.remove(p)
    # A real model with one byte of its magic changed.
    p = os.path.join(ctx.tmp, "flipped.gguf")
    with open(p, "wb") as f:
        f.write(b"XGUF" + data[4:1 << 20])
    expect_error(ctx, 2, ("info", "-m", p), "real model with a wrong magic")
    # ... with rope.freq_base (an f32 after its key and type) made infinite or NaN.
    key = b"llama.rope.freq_base"
    at = data.find(key, 0, 1 << 20) + len(key)
    check(at > len(key) and struct.unpack("<I", data[at:at + 4])[0] == 6, "rope.freq_base: not an f32 key in SmolLM2")
    for val in (float("inf"), float("nan"), 0.5):
        with open(p, "wb") as f:
            f.write(data[:at + 4] + struct.pack("<f", val) + data[at + 8:1 << 20])
        expect_error(ctx, 2, ("info", "-m", p), f"rope.freq_base {val}")
    os.remove(p)
    # Not regular files: a FIFO (opening one for reading waits for a writer) and /dev/zero (endless);
    # a NUL byte in a prompt file (the text would end there for some readers).
    fifo = os.path.join(ctx.tmp, "fifo")
    os.mkfifo(fifo)
    nul = os.path.join(ctx.tmp, "nul.txt")
    with open(nul, "wb") as f:
        f.write(b"Hello\0world")
    for args, what in ((("info", "-m", fifo), "FIFO model"), (("generate", "-m", src, "-f", fifo), "FIFO prompt"),
                       (("generate", "-m", src, "-f", "/dev/zero"), "/dev/zero prompt"),
                       (("generate", "-m", src, "-p", "x", "--image", fifo), "FIFO image"),
                       (("generate", "-m", src, "-f", nul, "-n", "1"), "NUL in a prompt"),
                       (("perplexity", "-m", src, "-f", nul), "NUL in perplexity's text"),
                       (("tokenize", "-m", src, "-f", nul), "NUL in tokenize's text")):
        rc, _, err = ctx.run(*args, timeout=30)
        lines = err.strip().splitlines()
        check(rc == 2 and len(lines) == 1 and lines[0].startswith("kvfold: error: "),
              f"{what}: exit {rc}, want 2 and one error line; stderr: {err!r}")
    os.remove(fifo)
    # An output file that cannot be written fails before the generation, naming the path and the reason.
    bad = os.path.join(ctx.tmp, "no-such-dir", "kv.json")
    line = expect_error(ctx, 2, ("generate", "-m", src, "-p", "hi", "-n", "2", "--dump-kv", bad), "--dump-kv unwritable")
    check(bad in line and "No such file or directory" in line, f"--dump-kv unwritable: {line!r}")
    line = expect_error(ctx, 2, ("generate", "-m", src, "-p", "hi", "-n", "2", "--dump-kv", "/dev/full"), "--dump-kv full")
    check("/dev/full" in line and "No space left" in line, f"--dump-kv /dev/full: {line!r}")
    # Values the library refuses for this model are usage errors (1), like those the parser refuses.
    words = os.path.join(ctx.tmp, "words.txt")
    with open(words, "w") as f:
        f.write("alpha beta gamma")
    for args, what in ((("-p", "hi", "--kv", "fastv:k=100"), "fastv past the last layer"),
                       (("-p", "hi", "--kv", "fastv:k=0"), "fastv:k=0"),
                       (("-p", "<image> hi", "--pseudo-image", words + ":0x0"), "pseudo-image 0x0"),
                       (("-p", "<image> hi", "--pseudo-image", words + ":100000x100000"), "pseudo-image 100000x100000")):
        expect_error(ctx, 1, ("generate", "-m", src, "-n", "1") + args, what)


def png_file(w, h, idat_len=None):
    """A PNG header of w x h RGB; with idat_len, an IDAT chunk claiming that many bytes and holding none."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    head = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
    if idat_len is not None:
        return head + struct.pack(">I", idat_len) + b"IDAT"
    return head + chunk(b"IDAT", zlib.compress(b"\0" * (1 + 3 * w) * h)) + chunk(b"IEND", b"")


def case_hostile(ctx):
    """The bad-input table of docs/RELIABILITY.md: every hostile input a server or a user can hand the CLI, each a
    single `kvfold: error:` line with the documented exit code (1 usage, 2 bad input) and a message saying why.
    The table is written to TMP/bad_input.md."""
    src = ctx.model(SMOL)
    t = ctx.tmp

    def put(name, data):
        p = os.path.join(t, name)
        with open(p, "wb") as f:
            f.write(data)
        return p

    with open(src, "rb") as f:
        whole = f.read()
    head = whole[:1 << 20]
    key = b"llama.rope.freq_base"
    at = head.find(key) + len(key)
    fifo = os.path.join(t, "fifo")
    if not os.path.exists(fifo):
        os.mkfifo(fifo)
    big = os.path.join(t, "big.txt")
    with open(big, "wb") as f:
        f.truncate(300 << 20)  # sparse: 300 MiB without the disk
    jpeg = b"\xff\xd8\xff\xc4\x00\x13\x00" + b"\xff" * 16 + b"\xff\xd9"  # DHT counts summing past 256 (F1)
    words = put("words.txt", b"alpha beta gamma delta")
    gen = ("generate", "-m", src, "-n", "1")
    img = gen + ("-p", "<image> hi", "--image")
    cases = [
        ("model", "missing file", ("info", "-m", os.path.join(t, "absent.gguf")), 2, "No such file"),
        ("model", "a folder without config.json", ("info", "-m", t), 2, "config.json"),
        ("model", "a FIFO (F4)", ("info", "-m", fifo), 2, "not a regular file"),
        ("model", "empty file", ("info", "-m", put("empty.gguf", b"")), 2, ""),
        ("model", "wrong magic", ("info", "-m", put("magic.gguf", b"XGUF" + head[4:])), 2, "magic"),
        ("model", "cut inside the metadata", ("info", "-m", put("cut.gguf", head[:1 << 19])), 2, ""),
        ("model", "rope.freq_base = +inf (F7)", ("info", "-m", put("inf.gguf", whole[:at + 4] + struct.pack("<f", math.inf)
                                                                   + whole[at + 8:])), 2, "rope base inf"),
        ("model", "architecture \"ll\\0ma\" (F7)", ("info", "-m", put("nul.gguf", whole.replace(
            b"\x05\x00\x00\x00\x00\x00\x00\x00llama", b"\x05\x00\x00\x00\x00\x00\x00\x00ll\0ma", 1))), 2, "architecture"),
        ("prompt", "-f a FIFO (F4)", gen + ("-f", fifo), 2, "not a regular file"),
        ("prompt", "-f /dev/zero (F10)", gen + ("-f", "/dev/zero"), 2, "not a regular file"),
        ("prompt", "-f a 300 MiB file (F10)", gen + ("-f", big), 2, "MiB"),
        ("prompt", "a NUL byte in -f (F6)", gen + ("-f", put("nul.txt", b"Hello\0world")), 2, "NUL"),
        ("prompt", "over the context", gen + ("-p", "one two three four five six seven eight", "-c", "4"), 2, "context"),
        ("image", "missing file", img + (os.path.join(t, "absent.png"),), 2, "No such file"),
        ("image", "a FIFO (F4)", img + (fifo,), 2, "not a regular file"),
        ("image", "BMP (not read)", img + (put("a.bmp", b"BM" + b"\0" * 60),), 2, "PNG, JPEG, GIF, WebP"),
        ("image", "1x1 PNG, IDAT of 2 GB claimed (F2)", img + (put("f2.png", png_file(1, 1, 0x7fffffff)),), 2,
         "truncated"),
        ("image", "60000x60000 PNG header", img + (put("huge.png", png_file(60000, 60000, 10)),), 2,
         "60000x60000 pixels is over the limit"),
        ("image", "JPEG with a bad Huffman table (F1)", img + (put("f1.jpg", jpeg),), 2, "JPEG ("),
        ("image", "text named .jpg", img + (put("text.jpg", b"not an image at all"),), 2, "not an image"),
        ("--kv", "unknown policy", gen + ("-p", "hi", "--kv", "nope"), 1, "unknown"),
        ("--kv", "a key glued to another (F5)", gen + ("-p", "hi", "--kv", "snapkv:budget=0.2,window kernel=0"), 1, ""),
        ("--kv", "budget 0", gen + ("-p", "hi", "--kv", "snapkv:budget=0"), 1, "budget"),
        ("--kv", "budget 1.5", gen + ("-p", "hi", "--kv", "snapkv:budget=1.5"), 1, "budget"),
        ("--kv", "even kernel", gen + ("-p", "hi", "--kv", "snapkv:kernel=4"), 1, "odd"),
        ("--kv", "fastv:k past the last layer", gen + ("-p", "hi", "--kv", "fastv:k=100"), 1, "layer"),
        ("--pseudo-image", "grid 0x0", gen + ("-p", "<image> hi", "--pseudo-image", words + ":0x0"), 1, "RxC"),
        ("--pseudo-image", "grid 100000x100000", gen + ("-p", "<image> hi", "--pseudo-image", words + ":100000x100000"),
         1, "out of range"),
        ("output", "--dump-kv into a missing folder", gen + ("-p", "hi", "--dump-kv", os.path.join(t, "no", "kv.json")),
         2, "No such file"),
        ("output", "--dump-kv to a full disk", gen + ("-p", "hi", "--dump-kv", "/dev/full"), 2, "No space left"),
        ("chat", "unknown template", gen + ("-p", "hi", "--chat-template", "nope"), 1, "nope"),
    ]
    rows = ["| input | case | exit | message |", "|---|---|---|---|"]
    bad = []
    for kind, what, args, code, part in cases:
        rc, _, err = ctx.run(*args, timeout=30)
        lines = err.strip().splitlines()
        if not (rc == code and len(lines) == 1 and lines[0].startswith("kvfold: error: ") and part in lines[0]):
            bad.append(f"{kind}, {what}: exit {rc} (want {code}), want one error line holding {part!r}; stderr: {err!r}")
            continue
        msg = lines[0][len("kvfold: error: "):].replace(t + "/", "").replace(src, "MODEL").replace("|", "\\|")
        rows.append(f"| {kind} | {what} | {rc} | `{msg}` |")
    os.remove(big)
    check(not bad, "\n".join(bad))
    with open(os.path.join(t, "bad_input.md"), "w") as f:
        f.write("\n".join(rows) + "\n")


def case_tokenize(ctx):
    """Every case of llama.cpp's tokenizer test vectors, through the CLI."""
    d = os.path.join(ctx.shared, "testdata", "tokenizer")
    vocabs = ["ggml-vocab-llama-spm.gguf", "ggml-vocab-gpt-2.gguf"]
    if not all(os.path.isfile(os.path.join(d, v + ext)) for v in vocabs for ext in ("", ".inp", ".out")):
        raise Skip(f"tokenizer test vectors absent under {d}")
    inp_path = os.path.join(ctx.tmp, "case.txt")
    n = 0
    for v in vocabs:
        with open(os.path.join(d, v + ".inp"), encoding="utf-8", newline="") as f:
            cases = f.read().split("\n__ggml_vocab_test__\n")[:-1]
        with open(os.path.join(d, v + ".out"), encoding="utf-8") as f:
            wants = f.read().split("\n")[:-1]
        check(len(cases) == len(wants) and cases, f"{v}: {len(cases)} inputs, {len(wants)} outputs")
        for text, want in zip(cases, wants):
            with open(inp_path, "w", encoding="utf-8", newline="") as f:
                f.write(text)
            rc, out, err = ctx.run("tokenize", "-m", os.path.join(d, v), "-f", inp_path)
            check(rc == 0, f"{v}: tokenize {text!r} failed: {err}")
            check(out.endswith("\n") and out.count("\n") == 1, f"{v}: one line wanted, got {out!r}")
            check(out.split() == want.split(), f"{v}: {text!r}\n got {out.strip()}\nwant {want.strip()}")
            n += 1
    # -p gives the same ids as -f; --special turns control text into one id.
    spm = os.path.join(d, vocabs[0])
    rc, out, _ = ctx.run("tokenize", "-m", spm, "-p", "Hello world")
    check(rc == 0 and out.split() == ["15043", "3186"], f"spm 'Hello world': {out!r}")
    rc, plain, _ = ctx.run("tokenize", "-m", spm, "-p", "</s>")
    rc2, special, _ = ctx.run("tokenize", "-m", spm, "-p", "</s>", "--special")
    check(rc == 0 and rc2 == 0 and special.split() == ["2"] and len(plain.split()) > 1,
          f"--special: plain {plain!r}, special {special!r}")
    print(f"{n} tokenizer cases match")


def case_info(ctx):
    want = {SMOL: ("llama", 30, 49152, "chatml"), GEMMA: ("gemma3", 18, 262144, "none")}
    for name, (arch, n_layer, n_vocab, tmpl) in want.items():
        path = ctx.model(name)
        rc, out, err = ctx.run("info", "-m", path, "--json")
        check(rc == 0, f"info {name}: {err}")
        o = json.loads(out)
        got = (o["arch"], o["n_layer"], o["n_vocab"], o["chat_template"])
        check(got == (arch, n_layer, n_vocab, tmpl), f"info {name}: {got}")
        check(o["weight_bytes"] > 0 and o["n_params"] > 0 and o["simd"] in ("scalar", "avx2", "avx512"),
              f"info {name}: {o}")
        rc, out, _ = ctx.run("info", "-m", path)
        check(rc == 0 and arch in out and "chat template" in out, f"info text {name}: {out!r}")


def generate(ctx, model, *extra):
    rc, out, err = ctx.run("generate", "-m", model, "-p", QUESTION, "-n", "40", "-t", "1", *extra)
    check(rc == 0, f"generate {os.path.basename(model)} {extra}: exit {rc}: {err}")
    return out, err


def case_generate(ctx):
    smol, gemma = ctx.model(SMOL), ctx.model(GEMMA)
    out, err = generate(ctx, smol, "--chat")
    check("Paris" in out, f"smollm2 --chat: {out!r}")
    check("tok/s" in err, f"timings on stderr: {err!r}")
    # Gemma 3 270M ships without tokenizer.chat_template: --chat alone must
    # fail with a hint, the named template must work.
    line = expect_error(ctx, 2, ("generate", "-m", gemma, "-p", QUESTION, "--chat"), "gemma --chat")
    check("--chat-template" in line, f"the hint names --chat-template: {line}")
    # This Gemma 3 270M is the pre-trained (base) model, so it answers a
    # question in plain completion form; its chat-form output is not
    # meaningful and is only checked to run.
    rc, out, err = ctx.run("generate", "-m", gemma, "-p", f"Question: {QUESTION}\nAnswer:", "-n", "8", "-t", "1")
    check(rc == 0 and "Paris" in out, f"gemma completion: {rc} {out!r} {err}")
    generate(ctx, gemma, "--chat-template", "gemma", "-n", "4")
    # Greedy decoding is deterministic.
    again, _ = generate(ctx, smol, "--chat")
    first, _ = generate(ctx, smol, "--chat")
    check(again == first, "two greedy runs differ")


def case_generate_json(ctx):
    smol = ctx.model(SMOL)
    rc, out, err = ctx.run("generate", "-m", smol, "-p", QUESTION, "--chat", "-n", "24", "-t", "1", "--json")
    check(rc == 0, f"generate --json: {err}")
    o = json.loads(out)  # exactly one JSON document on stdout
    for key, typ in (("text", str), ("n_prompt", int), ("n_gen", int), ("stop", str), ("timings", dict),
                     ("kv", dict), ("peak_rss_bytes", int)):
        check(isinstance(o.get(key), typ), f"field {key}: {o.get(key)!r}")
    check(o["stop"] in ("eog", "length") and 0 < o["n_gen"] <= 24, f"stop {o['stop']} n_gen {o['n_gen']}")
    check(o["stop"] == "eog" or o["n_gen"] == 24, "stop 'length' only after -n tokens")
    check("Paris" in o["text"] and o["n_prompt"] > 5, f"text {o['text']!r}")
    t = o["timings"]
    check(t["prefill_ms"] > 0 and t["decode_ms_per_token"] > 0, f"timings {t}")
    check(o["kv"]["bytes"] > 0 and o["peak_rss_bytes"] > 0, f"kv {o['kv']} rss {o['peak_rss_bytes']}")
    # the full cache: every position's f16 key and value rows and tag in SmolLM2's 30 layers of 3 kv heads of 64
    pos = o["kv"]["bytes_per_position"]
    check(pos == 30 * 3 * (2 * 2 * 64 + 12) and o["kv"]["bytes_full"] == pos * o["n_prompt"], f"kv {o['kv']}")
    rc, out, err = ctx.run("info", "-m", smol, "--json")
    kb = json.loads(out)["kv_bytes_per_position"] if rc == 0 else {}
    check(kb.get("f16") == pos and kb.get("q8_0/q4_0h") == 30 * 3 * (68 + 36 + 12), f"info: {rc} {err} {kb}")
    # Sampling: the same seed gives the same text, and the text differs from
    # greedy for at least one of a few seeds.
    base = ("generate", "-m", smol, "-p", "Once upon a time", "-n", "16", "-t", "1", "--json")
    greedy = json.loads(ctx.run(*base)[1])["text"]
    runs = [json.loads(ctx.run(*base, "--temp", "1.0", "--seed", str(s))[1])["text"] for s in (1, 1, 2)]
    check(runs[0] == runs[1], f"same seed, different text: {runs[:2]}")
    check(any(r != greedy for r in runs), "sampling at temp 1 never left the greedy path")


# Perplexity of tests/data/ppl_passage.txt (chapters 1-2 of Jane Austen's
# "Pride and Prejudice", 1813, public domain) with SmolLM2-135M-Instruct Q4_1;
# the measured value behind ppl_max is in cli.cmake.
def case_perplexity(ctx, ppl_max):
    smol = ctx.model(SMOL)
    passage = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "ppl_passage.txt")
    rc, out, err = ctx.run("perplexity", "-m", smol, "-f", passage, "--ctx", "512", "--chunks", "2", "-t", "1",
                           "--json")
    check(rc == 0, f"perplexity: {err}")
    o = json.loads(out)
    print(f"ppl {o['ppl']:.4f} +/- {o['ppl_stderr']:.4f} over {o['n_scored']} tokens, {o['n_chunks']} chunks")
    check(o["n_chunks"] == 2 and o["n_scored"] == 2 * 256 and o["n_tokens"] > 4 * 512, f"chunks {o}")
    check(len(o["running_ppl"]) == 2 and o["running_ppl"][1] == o["ppl"], f"running {o['running_ppl']}")
    check(1.0 < o["ppl"] < ppl_max, f"ppl {o['ppl']} not below {ppl_max}")
    check(0 < o["ppl_stderr"] < o["ppl"], f"stderr {o['ppl_stderr']}")
    # Prompts multiply dequantised rows either way: weights left in the file's
    # map (--no-repack) give the same perplexity to the last bit; the decode
    # path, on the interleaved kernels where the CPU repacks, moves by rounding.
    rc, out, err = ctx.run("perplexity", "-m", smol, "-f", passage, "--ctx", "512", "--chunks", "2", "-t", "1",
                           "--json", "--no-repack")
    check(rc == 0 and json.loads(out)["ppl"] == o["ppl"], f"--no-repack: {rc} {out} {err}")
    # Under a KV policy each chunk's first half is compressed and the second
    # half decoded token by token: budget 1.0 equals full exactly, and the
    # single-token path stays within the decode path's known drift (Q8
    # activations in matrix-vector products) of the batched one.
    ppl = {}
    for spec in ("full", "snapkv:budget=1.0", "h2o:budget=0.2"):
        rc, out, err = ctx.run("perplexity", "-m", smol, "-f", passage, "--ctx", "512", "--chunks", "2", "-t", "1",
                               "--json", "--kv", spec)
        check(rc == 0, f"perplexity --kv {spec}: {err}")
        q = json.loads(out)
        check(q["kv"] == spec and q["n_scored"] == o["n_scored"], f"{spec}: {q}")
        ppl[spec] = q["ppl"]
        # the share kept after each first half, and at each chunk's end (where
        # storage grown by appends is counted too)
        kept = q["kv_memory"]
        want = 1.0 if spec != "h2o:budget=0.2" else 0.2
        check(abs(kept["ratio"] - want) < 0.01 and abs(kept["ratio_end"] - want) < 0.05
              and kept["bytes_kept"] <= kept["bytes_full"], f"{spec}: kv_memory {kept}")
    print(f"ppl under --kv: {ppl}")
    check(ppl["snapkv:budget=1.0"] == ppl["full"], f"budget 1.0 changed the perplexity: {ppl}")
    check(abs(ppl["full"] - o["ppl"]) < 0.01 * o["ppl"], f"decode path {ppl['full']} vs batched {o['ppl']}")
    check(ppl["h2o:budget=0.2"] != ppl["full"] and 1.0 < ppl["h2o:budget=0.2"] < 2 * ppl_max, f"h2o: {ppl}")
    # A text shorter than one chunk is scored as one chunk.
    short = os.path.join(ctx.tmp, "short.txt")
    with open(short, "w") as f:
        f.write("The quick brown fox jumps over the lazy dog. " * 3)
    rc, out, err = ctx.run("perplexity", "-m", smol, "-f", short, "-t", "1")
    check(rc == 0 and "one chunk" in out and "PPL = " in out, f"short text: {rc} {out!r} {err}")


def case_bench(ctx):
    smol = ctx.model(SMOL)
    rc, out, err = ctx.run("bench", "-m", smol, "-p", "32", "-n", "8", "-r", "1", "-t", "1", "--json")
    check(rc == 0, f"bench: {err}")
    o = json.loads(out)
    names = [t["name"] for t in o["tests"]]
    check(names == ["pp32", "tg8"], f"tests {names}")
    for t in o["tests"]:
        check(t["tok_per_s"] > 0 and t["kv_bytes"] > 0, f"{t}")
    tg = o["tests"][1]
    check(abs(tg["weight_bytes_per_s"] - o["weight_bytes"] * tg["tok_per_s"]) < 1e-6 * tg["weight_bytes_per_s"],
          f"effective bandwidth {tg}")
    check(o["peak_rss_bytes"] > 0, "peak rss")
    # Decoding after a compressed context of --depth tokens, no warm-up run.
    rc, out, err = ctx.run("bench", "-m", smol, "-p", "0", "-d", "200", "-n", "4", "-r", "1", "-t", "1", "--no-warmup",
                           "--kv", "knorm:budget=0.25", "--json")
    check(rc == 0, f"bench --depth: {err}")
    o = json.loads(out)
    check([t["name"] for t in o["tests"]] == ["tg4@200"], f"tests {o['tests']}")
    kv = o["tests"][0]["kv"]
    check(kv["per_layer"] == [50] * len(kv["per_layer"]) and kv["bytes_kept"] < 0.3 * kv["bytes_full"]
          and kv["peak_bytes"] >= kv["bytes_full"] and o["tests"][0]["prefill_ms"] > 0, f"bench kv {kv}")
    # The default output: llama-bench's markdown table, the test in its 8th column.
    rc, out, _ = ctx.run("bench", "-m", smol, "-p", "16", "-n", "4", "-r", "2", "-t", "1")
    tests = [ln.split("|")[8].strip() for ln in out.splitlines()[2:] if ln.startswith("|")]
    check(rc == 0 and tests == ["pp16", "tg4"], f"bench table: {out!r}")


def case_demo(ctx):
    smol = ctx.model(SMOL)
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "demo.sh")
    p = subprocess.run(["bash", script, ctx.bin, smol], capture_output=True, timeout=300)
    out = p.stdout.decode("utf-8", "replace")
    check(p.returncode == 0, f"demo: exit {p.returncode}: {out!r} {p.stderr!r}")
    # one table row per run: the full cache, then 2 methods at 2 budgets, in f16; then the full cache and keydiff
    # at 0.2 in 4-bit keys and values; accuracy over 2 prompts, bytes against the f16 full cache
    rows = [ln.split("|")[1:-1] for ln in out.splitlines() if ln.startswith("| `")]
    check(len(rows) == 7, f"demo: {len(rows)} table rows, want 7: {out!r}")
    acc = lambda r: {"yes": 1.0, "no": 0.0}.get(r[3].strip()) if r[3].strip() in ("yes", "no") else float(r[3])
    check(rows[0][0].strip() == "`full`" and acc(rows[0]) == 1.0, f"demo: the full cache missed a needle: {out!r}")
    for r in rows:
        check(0.0 <= acc(r) <= 1.0 and float(r[4]) <= float(r[5]) + 1e-9, f"demo row {r}")
    # SmolLM2's 64-value rows: f16 128 + 128 + 12 bytes an entry, q4_0s / q4_0h 36 + 36 + 12 (and each head's
    # smoothing, under 1% of 1,144 positions' worth)
    small = 84 / 268
    check(float(rows[0][6]) == 1.0 and rows[5][0].strip() == "`full`" and small <= float(rows[5][6]) <= 1.01 * small
          and abs(float(rows[6][6]) - 0.2 * float(rows[5][6])) < 0.003, f"demo: the bytes column: {out!r}")


def case_kv(ctx):
    """--kv policies on the real SmolLM2: budget 1.0 changes nothing; a ratio
    keeps exactly round(ratio x prompt) entries per head, frees the rest."""
    smol = ctx.model(SMOL)
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "ppl_passage.txt")) as f:
        text = f.read()[:2500]
    passage = os.path.join(ctx.tmp, "passage.txt")
    with open(passage, "w") as f:
        f.write(text)
    base = ["generate", "-m", smol, "-f", passage, "-n", "6", "--json", "-c", "2048"]
    rc, out, err = ctx.run(*base)
    check(rc == 0, f"full: {err}")
    full = json.loads(out)
    n_prompt = full["n_prompt"]
    rc, out, _ = ctx.run("policies", "--json")
    listed = json.loads(out)
    baselines = ["full", "streaming", "h2o", "snapkv", "pyramidkv", "roco", "keydiff", "knorm", "random", "imgrand"]
    presets = [p["name"] for p in listed if p["stage"] == "preset"]
    check(set(baselines) <= set(presets), f"policies: {presets}")
    # Every preset says when to use it, and cites its paper with an arXiv id (random and imgrand have none).
    aware = {p["name"] for p in listed if p["stage"] == "preset" and p["question_aware"]}
    check({"snapkv", "pyramidkv", "csp", "blockwise", "fastv"} <= aware and not aware & {"keydiff", "knorm", "h2o"},
          f"question-aware presets: {aware}")
    rc, text, _ = ctx.run("policies")
    check(text.count("question-aware:") == sum(p["question_aware"] for p in listed) and
          text.count("question-agnostic") == len(presets) - len(aware) + 1,  # + the closing note's
          "kvfold policies marks each preset question-aware or -agnostic, and the stage options that make it so")
    for p in listed:
        if p["stage"] == "preset":
            check(len(p["when"]) > 40, f"policies: {p['name']} has no 'when' guide")
            check("arXiv:" in p["paper"] or p["name"] in ("full", "random", "imgrand"), f"policies: {p['paper']}")
    names = [n for n in presets if n in baselines]  # the multimodal methods have their own case
    check({"budget=uniform", "budget=pyramid", "decode=grow", "decode=window", "decode=h2o", "decode=fixed-distance",
           "decode=recompress"} <= {f"{p['stage']}={p['name']}" for p in listed}, f"stages: {listed}")
    dump = os.path.join(ctx.tmp, "kv.json")
    for name in names:
        spec = name if name == "full" else f"{name}:budget=1.0"
        rc, out, err = ctx.run(*base, "--kv", spec)
        check(rc == 0, f"{spec}: {err}")
        o = json.loads(out)
        check(o["text"] == full["text"] and o["kv"]["bytes_kept"] == o["kv"]["bytes_full"], f"{spec} changed the output")
        if name == "full":
            continue
        rc, out, err = ctx.run(*base, "--kv", f"{name}:budget=0.2", "--dump-kv", dump)
        check(rc == 0, f"{name}:budget=0.2: {err}")
        o = json.loads(out)
        kv, n_gen = o["kv"], o["n_gen"]
        keep = int(0.2 * n_prompt + 0.5)
        n_seen = n_prompt + max(n_gen - 1, 0)
        # After decoding: streaming and h2o keep the budget of the tokens seen
        # (their decode stage), the others keep every decoded token.
        want_final = int(0.2 * n_seen + 0.5) if name in ("streaming", "h2o") else keep + n_seen - n_prompt
        if name == "imgrand":  # a text-only prompt has no image entries to drop
            keep, want_final = n_prompt, n_seen
        per_layer = kv["per_layer"]
        if name == "pyramidkv":  # a linear pyramid around the uniform budget (its integer step overspends a little)
            check(per_layer == sorted(per_layer, reverse=True) and per_layer[0] > per_layer[-1]
                  and abs(sum(per_layer) / len(per_layer) - keep) < 0.1 * keep, f"pyramidkv: {per_layer}")
        else:
            check(all(x == keep for x in per_layer), f"{name}: per-layer entries {per_layer[:4]}, want {keep}")
            check(all(x == want_final for x in kv["per_layer_final"]),
                  f"{name}: after decoding {kv['per_layer_final'][:4]}, want {want_final}")
        check(kv["bytes_kept"] <= kv["bytes_full"] * (0.25 if name != "imgrand" else 1.0), f"{name}: kv bytes {kv}")
        check(kv["bytes_full"] <= kv["peak_bytes"], f"{name}: peak {kv['peak_bytes']} below the prompt's {kv['bytes_full']}")
        with open(dump) as f:
            d = json.load(f)
        check(d["n_prompt"] == n_prompt and d["n_past"] == n_seen, f"{name}: dump {d['n_prompt']} {d['n_past']}")
        for l, heads in enumerate(d["compressed"]):
            for g, pos in enumerate(heads):
                check(pos == sorted(set(pos)) and (name == "pyramidkv" or len(pos) == keep),
                      f"{name}: layer {l} head {g} holds {len(pos)} positions")
                if name == "streaming":
                    check(pos == [0, 1, 2, 3] + list(range(n_prompt - keep + 4, n_prompt)), f"streaming kept {pos}")
                if name in ("snapkv", "pyramidkv"):  # the observation window is always kept
                    check(pos[-32:] == list(range(n_prompt - 32, n_prompt)), f"{name}: window not kept")
    # Decode stages on one preset: each holds the budget of the tokens seen.
    keep = int(0.2 * n_prompt + 0.5)
    for stage, want in (("decode=window", int(0.2 * n_seen + 0.5)), ("decode=h2o", int(0.2 * n_seen + 0.5)),
                        ("decode=fixed-distance:distance=8", int(0.2 * n_seen + 0.5)), ("decode=grow", keep + n_seen - n_prompt)):
        rc, out, err = ctx.run(*base, "--kv", f"knorm:budget=0.2+{stage}", "--dump-kv", dump)
        check(rc == 0, f"{stage}: {err}")
        check(all(x == want for x in json.loads(out)["kv"]["per_layer_final"]), f"{stage}: want {want}")
        with open(dump) as f:
            d = json.load(f)
        for comp, fin in zip(d["compressed"][0], d["final"][0]):
            new = list(range(n_prompt, n_seen))
            if stage == "decode=window":  # sinks, then the newest
                check(fin == comp[:4] + (comp + new)[-(want - 4):], f"{stage}: {fin}")
            elif stage.startswith("decode=fixed"):  # frozen start, the window from n0 - 8 on slides
                check(fin[:keep - 8] == comp[:keep - 8] and fin[-len(new):] == new, f"{stage}: {fin}")
            elif stage == "decode=h2o":  # the recent half of the budget is kept
                check(fin[-(want // 2):] == (comp + new)[-(want // 2):], f"{stage}: {fin}")
    # Threshold eviction: no budget; every head keeps what scores at least tau and its last `last` entries, within
    # floor and ceil of its entries (K-norm's score is minus the key's norm).
    for tau, ceil in (("-1e30", 1), ("1e30", 1), ("-1e30", 0.5)):
        spec = f"knorm+budget=threshold:tau={tau},last=8,ceil={ceil}"
        rc, out, err = ctx.run(*base, "--kv", spec, "--dump-kv", dump)
        check(rc == 0, f"{spec}: {err}")
        kv = json.loads(out)["kv"]
        with open(dump) as f:
            heads = [pos for layer in json.load(f)["compressed"] for pos in layer]
        tail = list(range(n_prompt - 8, n_prompt))
        if tau == "-1e30" and ceil == 1:
            check(kv["bytes_kept"] == kv["bytes_full"] and all(len(p) == n_prompt for p in heads), f"{spec}: {kv}")
        elif ceil == 1:  # nothing clears it: the last 8 (and K-norm's sinks, which it always keeps)
            check(all(p[-8:] == tail and 8 <= len(p) <= 12 for p in heads), f"{spec}: {heads[0]}")
        else:
            check(all(len(p) == n_prompt // 2 and p[-8:] == tail for p in heads), f"{spec}: {len(heads[0])}")
    rc, out, err = ctx.run(*base, "--kv", "knorm:budget=0.2+budget=threshold")
    check(rc != 0 and "no budget" in err, f"a threshold with a budget: {rc} {err}")
    rc, out, err = ctx.run(*base, "--kv", "knorm:budget=0.2+decode=recompress:every=2")
    check(rc == 0, f"recompress: {err}")
    o = json.loads(out)
    # After the last decode step the cache was recompressed when the step count is even.
    steps = o["n_gen"] - 1
    want = int(0.2 * n_seen + 0.5) if steps % 2 == 0 else int(0.2 * (n_seen - 1) + 0.5) + 1
    check(all(x == want for x in o["kv"]["per_layer_final"]), f"recompress: {o['kv']['per_layer_final'][:3]} want {want}")
    expect_error(ctx, 1, [*base, "--kv", "nosuch"], "unknown policy")
    expect_error(ctx, 1, [*base, "--kv", "snapkv:budget=2.5"], "fractional budget over 1")
    expect_error(ctx, 1, [*base, "--kv", "snapkv:nosuchkey=1"], "unknown key")
    expect_error(ctx, 1, [*base, "--kv", "snapkv+decode=nosuch"], "unknown decode option")
    expect_error(ctx, 1, [*base, "--kv", "snapkv+shedule=blocks"], "unknown stage")


def passage_and_words(ctx):
    """The test passage, and a file of its first words for --pseudo-image."""
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "ppl_passage.txt")) as f:
        text = f.read()
    words = os.path.join(ctx.tmp, "words.txt")
    with open(words, "w") as f:
        f.write(text[:400])
    return text, words


def case_kv_mm(ctx):
    """LOOK-M, Elastic Cache and PrefixKV on the real SmolLM2 with a pseudo-image
    segment, checked through --dump-kv: what each rule keeps, where the evicted
    entries were merged, the searched layer budgets, and the profile file."""
    smol = ctx.model(SMOL)
    text, words = passage_and_words(ctx)
    prompt = text[:700] + " <image> " + text[700:1100] + " What is in the picture?"
    base = ["generate", "-m", smol, "-p", prompt, "--pseudo-image", f"{words}:8x8", "-n", "4", "--json", "-t", "2"]
    dump = os.path.join(ctx.tmp, "kv.json")

    def run(spec):
        rc, out, err = ctx.run(*base, "--kv", spec, "--dump-kv", dump)
        check(rc == 0, f"{spec}: {err}")
        with open(dump) as f:
            return json.loads(out), json.load(f)

    full, dfull = run("full")
    n = full["n_prompt"]
    rc, out, _ = ctx.run(*base, "--dump-tags")
    image = {t[0] for t in json.loads(out)["tags"] if t[1] == "image"}  # [pos, modality, media, row, col, id]
    check(len(image) == 64, f"{len(image)} image positions")
    for spec in ("lookm:budget=1.0", "elastic:budget=1.0", "prefixkv:budget=1.0", "csp:budget=1.0"):
        o, d = run(spec)
        check(o["text"] == full["text"] and not any(p for layer in d["merged"] for p in layer), f"{spec} changed the output")

    # LOOK-M: the recent share stays, then text (within the budget, or all of
    # it with text_prior=all), then image entries fill what is left; each
    # evicted entry is merged exactly once, into a kept entry.
    keep = int(0.3 * n + 0.5)
    recent = int(keep * 0.5 + 0.5)
    text_pos = {p for p in range(n) if p not in image}
    for spec, merging in (("lookm:budget=0.3", True), ("lookm:budget=0.3,merge=none", False),
                          ("lookm:budget=0.3,text_prior=all", True),
                          ("lookm:budget=0.3,merge=weighted,text_prior=0,important=0.8", True)):
        o, d = run(spec)
        prior = "text_prior=0" not in spec
        rec = recent if "important" not in spec else int(keep * 0.2 + 0.5)
        window = set(range(n - rec, n))
        for heads, merged in zip(d["compressed"], d["merged"]):
            for pos, mg in zip(heads, merged):
                s = set(pos)
                if "text_prior=all" in spec:  # every text entry, past the budget (the released code)
                    check(text_pos <= s, f"{spec}: text evicted")
                    check(len(pos) == max(keep, len(text_pos | window)), f"{spec}: {len(pos)} kept")
                elif prior:  # text before images, within the budget
                    check(len(pos) == keep and window <= s, f"{spec}: {len(pos)} kept")
                    fits = len(text_pos - window) <= keep - rec
                    check(text_pos <= s if fits else not (s - window) & set(image),
                          f"{spec}: {'text evicted' if fits else 'an image kept before text'}")
                else:
                    check(len(pos) == keep and window <= s, f"{spec}: {len(pos)} kept")
                if merging:
                    check(sorted(m[0] for m in mg) == sorted(set(range(n)) - s) and all(m[1] in s for m in mg),
                          f"{spec}: merges {mg[:5]}")
                else:
                    check(mg == [], f"{spec}: merged with merge=none")

    # Elastic Cache: one kept set per layer (sinks and the last entry in it),
    # evicted entries merged into the nearest kept position.
    o, d = run("elastic:budget=0.3")
    for heads, merged in zip(d["compressed"], d["merged"]):
        check(all(h == heads[0] for h in heads) and len(heads[0]) == keep, f"elastic: {len(heads[0])} kept")
        check(heads[0][:4] == [0, 1, 2, 3] and heads[0][-1] == n - 1, "elastic: sinks or last evicted")
        kept = heads[0]
        for e, into in merged[0]:
            best = min(kept, key=lambda k: (abs(k - e), k))
            check(into == best, f"elastic: {e} merged into {into}, nearest kept is {best}")

    # PrefixKV online: per-layer budgets whose sum is the uniform one, each
    # layer keeping round(ratio x N), with a Gini coefficient per layer.
    o, d = run("prefixkv:budget=0.3,sinks=2")
    lb = o["kv"]["layer_budgets"]
    counts = [len(h[0]) for h in d["compressed"]]
    check(len(lb) == len(counts) and all(c == int(b["ratio"] * n + 0.5) for c, b in zip(counts, lb)), f"prefixkv {counts} {lb}")
    check(abs(sum(counts) - len(counts) * keep) <= len(counts), f"prefixkv spends {sum(counts)}, want {len(counts) * keep}")
    check(len(set(counts)) > 1 and all(0 <= b["gini"] < 1 for b in lb), "prefixkv: layer budgets all equal")
    check(all(h[0][:2] == [0, 1] and h[0][-1] == n - 1 for h in d["compressed"]), "prefixkv: sinks")

    # CSP: exactly the budget, the recent window in it; the cross ratio and
    # the window change the choice; n-softmax in decoding changes only the
    # output, not what the prompt kept.
    sets = {}
    for spec in ("csp:budget=0.3", "csp:budget=0.3,cross_ratio=1", "csp:budget=0.3,window=8",
                 "csp:budget=0.3,decode_softmax=1,n=8"):
        o, d = run(spec)
        sets[spec] = d["compressed"]
        rec = int(keep * 0.5 + 0.5)
        for heads in d["compressed"]:
            for pos in heads:
                check(len(pos) == keep and pos[-rec:] == list(range(n - rec, n)), f"{spec}: {len(pos)} kept")
    check(sets["csp:budget=0.3"] != sets["csp:budget=0.3,cross_ratio=1"], "cross_ratio changed nothing")
    check(sets["csp:budget=0.3"] != sets["csp:budget=0.3,window=8"], "window changed nothing")

    # kvfold profile -> prefixkv:profile=FILE.
    samples = os.path.join(ctx.tmp, "samples.jsonl")
    with open(samples, "w") as f:
        for i in range(2):
            f.write(json.dumps({"prompt": text[i * 500:i * 500 + 500] + " <image> Describe it.",
                                "media": [{"pseudo": "words.txt:8x8"}]}) + "\n")
    prof = os.path.join(ctx.tmp, "prefix.json")
    rc, out, err = ctx.run("profile", "-m", smol, "--samples", samples, "--budget", "0.3", "-o", prof, "-t", "2")
    check(rc == 0, f"profile: {err}")
    with open(prof) as f:
        pj = json.load(f)
    check(pj["n_layer"] == len(counts) and pj["samples"] == 2 and pj["budget"] == 0.3 and len(pj["ratios"]) == len(counts),
          f"profile {pj}")
    o, d = run(f"prefixkv:profile={prof}")
    counts = [len(h[0]) for h in d["compressed"]]
    check(all(c == int(r * n + 0.5) for c, r in zip(counts, pj["ratios"])), f"profiled counts {counts}")
    plain = ["generate", "-m", smol, "-p", "Hello there", "-n", "1"]
    expect_error(ctx, 1, [*plain, "--kv", f"prefixkv:profile={prof},budget=0.2"], "profile for another budget")
    expect_error(ctx, 2, [*plain, "--kv", f"prefixkv:profile={samples}"], "not a profile")
    expect_error(ctx, 1, [*plain, "--kv", "lookm:merge=sum"], "bad merge")
    expect_error(ctx, 1, ["profile", "-m", smol, "--samples", samples], "profile without -o")


def case_blockwise(ctx):
    """Block-wise prefill under a fixed budget on SmolLM2 with pseudo-images:
    no head ever holds more than budget + block entries (peak entries, and
    peak bytes, which count every allocation), the kept count is the budget,
    a budget over the
    prompt changes nothing, and bad specs are usage errors."""
    smol = ctx.model(SMOL)
    text, words = passage_and_words(ctx)
    prompt = text[:600] + " <image> <image> " + text[600:900] + " <image> What changed?"
    base = ["generate", "-m", smol, "-p", prompt, "-n", "6", "--json", "-t", "2"]
    for _ in range(3):
        base += ["--pseudo-image", f"{words}:8x8"]
    rc, out, err = ctx.run(*base)
    check(rc == 0, f"full: {err}")
    full = json.loads(out)
    n = full["n_prompt"]
    per_entry = full["kv"]["bytes_full"] / n  # bytes of one position over all layers and heads (exact fit)
    # block=image also with the default batch (512): the text runs between
    # images (over 64 tokens) go in blocks of at most an image's 64.
    for spec, m, block, batch in (("blockwise:budget=128,block=32", 128, 32, "64"),
                                  ("blockwise:budget=100,block=16,evict=keydiff", 100, 16, "64"),
                                  ("blockwise:budget=128,block=image", 128, 64, "64"),
                                  ("blockwise:budget=128,block=image", 128, 64, "512")):
        rc, out, err = ctx.run(*base, "--kv", spec, "-b", batch)
        check(rc == 0, f"{spec}: {err}")
        kv = json.loads(out)["kv"]
        check(all(x == m for x in kv["per_layer"]), f"{spec}: kept {kv['per_layer'][:3]}, want {m}")
        check(m < kv["peak_entries"] <= m + block, f"{spec}: a head held {kv['peak_entries']} entries, want <= {m + block}")
        most = per_entry * (m + block + (m + block) // 8 + 17)
        check(kv["peak_bytes"] <= most < full["kv"]["peak_bytes"], f"{spec}: peak {kv['peak_bytes']} over {most}")
        # what it keeps, against what a full cache holds for the prompt
        check(kv["bytes_full"] == full["kv"]["bytes_full"] and kv["bytes_kept"] < kv["bytes_full"] and kv["ratio"] < 1,
              f"{spec}: kv {kv['bytes_kept']} of {kv['bytes_full']}, ratio {kv['ratio']}")
    rc, out, err = ctx.run(*base, "--kv", "blockwise:budget=100000,block=512")
    check(rc == 0 and json.loads(out)["text"] == full["text"], f"a budget over the prompt changed the output: {err}")
    plain = ["generate", "-m", smol, "-p", "Hello", "-n", "1"]
    expect_error(ctx, 1, [*plain, "--kv", "blockwise:budget=0.2"], "ratio budget")
    expect_error(ctx, 1, [*plain, "--kv", "blockwise:evict=h2o"], "bad evictor")
    expect_error(ctx, 1, [*plain, "--kv", "blockwise:block=0"], "block 0")


def case_reduce(ctx):
    """LightKV, FastV and ToMe from the command line on SmolLM2 with two 16x16
    pseudo-images: after the scaled default steps (11, 17, 23 of 30 layers)
    the layers hold the image entries of LightKV's eq. 9 (docs/METHODS.md §5.6.3), composition
    with a post-prefill preset keeps its budget, and bad specs are usage
    errors that name the problem."""
    smol = ctx.model(SMOL)
    text, words = passage_and_words(ctx)
    prompt = text[:300] + " <image> and <image>. Which picture shows water?"
    base = ["generate", "-m", smol, "-p", prompt, "-n", "4", "--json", "-t", "2",
            "--pseudo-image", f"{words}:16x16", "--pseudo-image", f"{words}:16x16"]
    rc, out, err = ctx.run(*base)
    check(rc == 0, f"full: {err}")
    full = json.loads(out)
    n = full["n_prompt"]
    steps = {"lightkv": [(11, 512), (17, 256), (23, 128), (30, 64)], "tome": [(11, 512), (17, 256), (23, 128), (30, 64)],
             "fastv:k=3,r=0.25": [(3, 512), (30, 384)]}
    dump = os.path.join(ctx.tmp, "reduce.json")
    for spec, want in steps.items():
        rc, out, err = ctx.run(*base, "--kv", spec, "--dump-kv", dump)
        check(rc == 0, f"{spec}: {err}")
        o = json.loads(out)
        # the last layer: every position is cached, or merged into a cached one (lightkv, tome: recorded
        # as merges), or dropped (fastv: no record)
        with open(dump) as f:
            d = json.load(f)
        held, merged = set(d["compressed"][-1][0]), {a: b for a, b in d["merged"][-1][0]}
        check(not (held & set(merged)) and (not merged) == spec.startswith("fastv") and
              (spec.startswith("fastv") or held | set(merged) == set(range(n))),
              f"{spec}: {len(held)} held, {len(merged)} merged of {n} positions")
        per_layer, lo = o["kv"]["per_layer"], 0
        for hi, images in want:
            for layer in range(lo, hi):
                check(per_layer[layer] == n - 512 + images, f"{spec}: layer {layer} holds {per_layer[layer]}, "
                      f"want {n - 512 + images}")
            lo = hi
        check(o["kv"]["peak_bytes"] < full["kv"]["peak_bytes"], f"{spec}: no memory saved")
        # the share kept: the entries cached over those a full cache holds
        kept = sum(per_layer) / (n * len(per_layer))
        check(o["kv"]["bytes_full"] == full["kv"]["bytes_full"] and abs(o["kv"]["ratio"] - kept) < 0.02,
              f"{spec}: ratio {o['kv']['ratio']}, kept {kept:.3f} of the entries")
    rc, out, err = ctx.run(*base, "--kv", "snapkv:budget=0.2+reduce=lightkv")
    check(rc == 0 and max(json.loads(out)["kv"]["per_layer"]) <= round(0.2 * n), f"snapkv+lightkv: {err}")
    plain = ["generate", "-m", smol, "-p", "Hello", "-n", "1"]
    expect_error(ctx, 1, [*plain, "--kv", "lightkv+schedule=blocks"], "reduce with blocks")
    expect_error(ctx, 1, [*plain, "--kv", "lightkv:layers=12,18"], "windows per layer")
    expect_error(ctx, 1, [*plain, "--kv", "lightkv:layers=4,40,windows=2,1"], "step past the last layer")
    expect_error(ctx, 1, [*plain, "--kv", "fastv:r=2"], "ratio out of range")


def case_eval(ctx):
    """kvfold eval on SmolLM2 with small synthetic data: needle rows for the
    full cache and every (--kv, budget), the outputs and pictures written and
    well-formed; consistency's reference scores ROUGE-L 1 against itself, and
    a budget of 1.0 (which never evicts) gives the full cache's perplexity
    and output; bad requests are usage errors."""
    import xml.etree.ElementTree as ET
    smol = ctx.model(SMOL)
    out_dir, plots, maps = (os.path.join(ctx.tmp, d) for d in ("out", "plots", "maps"))
    base = ["-m", smol, "-t", "2", "--segments", "4", "--segment-words", "40", "--grid", "6x6"]
    rc, out, err = ctx.run("eval", "needle", *base, "--kv", "snapkv", "--kv", "streaming:sinks=2", "--kv", "lightkv",
                           "--budgets", "0.5,0.1", "--depths", "0.2,0.8", "--json", "--out", out_dir, "--plots", plots,
                           "--kept-map", maps)
    check(rc == 0, f"needle: {err}")
    rows = [json.loads(x) for x in out.splitlines()]
    runs = {(r["kv"], r["budget"]) for r in rows}
    want = {("full", None), ("snapkv", 0.5), ("snapkv", 0.1), ("streaming:sinks=2", 0.5), ("streaming:sinks=2", 0.1),
            ("lightkv", None)}
    check(runs == want, f"needle runs {sorted(runs, key=str)}")
    check(len(rows) == 2 * len(want), f"{len(rows)} rows, want {2 * len(want)} (2 depths)")
    for r in rows:
        check(r["score"] in (0, 1) and r["kv_mib"] <= r["kv_full_mib"] + 1e-9 and r["n_prompt"] > 100, f"row {r}")
        if r["budget"] == 0.1:
            check(r["kv_mib"] < 0.2 * r["kv_full_mib"], f"budget 0.1 kept {r['kv_mib']} of {r['kv_full_mib']} MiB")
    _, version, _ = ctx.run("--version")
    for name in ("summary.md", "summary.csv", "results.jsonl"):  # each names the build that made it
        with open(os.path.join(out_dir, name)) as f:
            check(version.strip() in f.read(), f"{name} missing or without the build {version.strip()}")
    check(all(r["build"] == version.strip() for r in rows), "rows without the build")
    with open(os.path.join(out_dir, "summary.csv")) as f:
        check(len(f.read().strip().splitlines()) == 1 + len(want), "summary.csv: one line per run")
    for name in ("quality.svg", "kv_memory.svg", "decode_speed.svg"):
        root = ET.parse(os.path.join(plots, name)).getroot()
        text = "".join(root.itertext())
        check("snapkv" in text and "full" in text, f"{name}: legend lacks the methods")
    layer_maps = sorted(os.listdir(maps))
    check(len(layer_maps) == 30 * len(want) and all(f.endswith(".svg") for f in layer_maps), f"{len(layer_maps)} maps")
    ET.parse(os.path.join(maps, layer_maps[0]))
    both = os.path.join(ctx.tmp, "both")
    rc, out, err = ctx.run("eval", "needle", *base, "--needle", "both", "--depths", "0.5", "--kv", "h2o", "--budgets",
                           "0.5", "--out", both)
    with open(os.path.join(both, "summary.csv")) as f:
        lines = f.read().strip().splitlines()
    check(rc == 0 and lines[0].startswith("needle,kv,") and sorted(ln.split(",")[0] for ln in lines[1:]) ==
          ["image", "image", "text", "text"], f"needle both: a line per kind and run: {lines} {err}")
    rc, out, err = ctx.run("eval", "consistency", *base, "-n", "12", "--kv", "snapkv", "--budgets", "1.0,0.1", "--json")
    check(rc == 0, f"consistency: {err}")
    rows = {(r["kv"], r["budget"]): r for r in map(json.loads, out.splitlines())}
    full, same = rows[("full", None)], rows[("snapkv", 1.0)]
    check(full["score"] == 1.0 and math.isfinite(full["ppl"]), f"the reference against itself: {full}")
    check(same["score"] == 1.0 and same["ppl"] == full["ppl"] and same["output"] == full["output"],
          f"budget 1.0 differs from the full cache: {same} vs {full}")
    data = os.path.join(ctx.tmp, "samples.jsonl")
    _, words = passage_and_words(ctx)
    with open(data, "w") as f:
        f.write(json.dumps({"prompt": "Read this: <image> What is it about?", "media": [{"pseudo": f"{words}:4x4"}]}) + "\n")
    rc, out, err = ctx.run("eval", "consistency", "-m", smol, "-t", "2", "-n", "6", "--data", data, "--kv", "h2o",
                           "--budgets", "0.5", "--json")
    check(rc == 0 and len(out.splitlines()) == 2, f"consistency --data: {err}")
    with open(data, "a") as f:
        f.write('{"prompt": 3}\n')
    expect_error(ctx, 2, ["eval", "consistency", "-m", smol, "-n", "2", "--json", "--data", data], "bad samples line")
    # needle cases from a file: the password in the text, and in a pseudo-image of words that holds it
    needles = os.path.join(ctx.tmp, "needles.jsonl")
    secret = os.path.join(ctx.tmp, "secret.txt")
    with open(secret, "w") as f:
        f.write("The secret password is 73519. " * 4)
    with open(needles, "w") as f:
        f.write(json.dumps({"prompt": "The secret password is 73519. Some filler text follows here. "
                            "What is the secret password? The secret password is", "answer": "73519"}) + "\n")
        f.write(json.dumps({"prompt": "<image> What is the secret password? The secret password is",
                            "media": [{"pseudo": f"{secret}:4x4"}], "answer": "73519", "kind": "image"}) + "\n")
    rc, out, err = ctx.run("eval", "needle", "-m", smol, "-t", "2", "-n", "16", "--data", needles, "--kv", "snapkv",
                           "--budgets", "0.5", "--json")
    rows = [json.loads(x) for x in out.splitlines()] if rc == 0 else []
    check(rc == 0 and len(rows) == 4 and sorted(r["needle"] for r in rows) == ["image", "image", "text", "text"]
          and all(r["score"] in (0, 1) for r in rows), f"needle --data: {rows} {err}")
    check(any(r["score"] == 1 for r in rows if r["kv"] == "full" and r["needle"] == "text"),
          f"the full cache missed a password it was just told: {rows}")
    expect_error(ctx, 2, ["eval", "needle", "-m", smol, "--data", os.path.join(ctx.tmp, "nope.jsonl")], "missing needle data")
    with open(needles, "a") as f:
        f.write(json.dumps({"prompt": "no answer here"}) + "\n")
    expect_error(ctx, 2, ["eval", "needle", "-m", smol, "-n", "2", "--data", needles], "needle line without an answer")
    plain = ["-m", smol]
    expect_error(ctx, 1, ["eval", "needle", *plain, "--grid", "0x4"], "bad grid")
    expect_error(ctx, 1, ["eval", *plain], "no mode")
    expect_error(ctx, 1, ["eval", "haystack", *plain], "unknown mode")
    expect_error(ctx, 1, ["eval", "needle", *plain, "--budgets", "0.2,x"], "bad budgets")
    expect_error(ctx, 1, ["eval", "needle", *plain, "--kv", "snapkv:window=x"], "bad kv")
    expect_error(ctx, 1, ["eval", "needle", *plain, "--depths", "1.5"], "bad depth")


def kvzap_scorer(ctx, model, name="fitted.kvzap", *extra):
    """A KVzap scorer for model, fitted on the project's own ARCHITECTURE.md
    (quickly: spans of 64 tokens), and calibrate's JSON report."""
    corpus = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "ARCHITECTURE.md")
    path = os.path.join(ctx.tmp, name)
    rc, out, err = ctx.run("calibrate", "-m", model, "--corpus", corpus, "--samples", "12", "--test", "3", "--span",
                           "64", "--per-span", "64", "-o", path, "--json", *extra)
    check(rc == 0, f"calibrate: {err[-400:]}")
    return path, json.loads(out)


def case_kvzap(ctx):
    """kvfold calibrate fits KVzap's scorer and --kv kvzap ranks by it: held
    out, its scores follow KVzip+'s order; a budget keeps its share, a
    threshold what clears it; the scorer beside the model is found by
    itself; a missing, damaged or foreign scorer and a bad corpus are
    refused with what to do."""
    smol = ctx.model(SMOL)
    path, rep = kvzap_scorer(ctx, smol)
    n_layer = len(rep["r2"])
    check(rep["samples"] == 12 and rep["test"] == 3 and rep["rows"] == 12 * 64 and n_layer == 30, f"report: {rep}")
    rho = sum(rep["spearman"]) / n_layer
    check(all(r is not None and -1 <= r <= 1 for r in rep["spearman"]) and rho > 0.3,
          f"held-out rank correlation with KVzip+: {rep['spearman']}")
    # the same seed, the same file
    again, _ = kvzap_scorer(ctx, smol, "again.kvzap")
    with open(path, "rb") as a, open(again, "rb") as b:
        check(a.read() == b.read(), "calibrate: the same seed gave another scorer")
    passage = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "ppl_passage.txt")
    base = ["generate", "-m", smol, "-f", passage, "-n", "4", "--json", "-c", "4096"]
    rc, out, err = ctx.run(*base, "--kv", f"kvzap:budget=0.3,scorer={path}")
    check(rc == 0, f"kvzap: {err[-300:]}")
    kv = json.loads(out)["kv"]
    check(abs(kv["ratio"] - 0.3) < 0.01 and kv["bytes"] < 0.4 * kv["bytes_full"], f"kvzap at 0.3: {kv}")
    ratios = []
    for tau in (-12, -6):
        rc, out, err = ctx.run(*base, "--kv", f"kvzap:scorer={path}+budget=threshold:tau={tau},last=16")
        check(rc == 0, f"kvzap, threshold {tau}: {err[-300:]}")
        ratios.append(json.loads(out)["kv"]["ratio"])
    check(1 >= ratios[0] > ratios[1] > 0, f"a higher threshold keeps less: {ratios}")
    # beside the model: MODEL.kvzap
    link, beside = os.path.join(ctx.tmp, "smol.gguf"), os.path.join(ctx.tmp, "smol.kvzap")
    if not os.path.exists(link):
        os.symlink(os.path.abspath(smol), link)
    if os.path.exists(beside):  # an earlier run's
        os.remove(beside)
    rc, _, err = ctx.run("generate", "-m", link, "-p", "Hello", "-n", "1", "--kv", "kvzap")
    check(rc == 2 and "kvfold calibrate" in err and "smol.kvzap" in err, f"no scorer: {rc} {err}")
    shutil.copy(path, beside)
    rc, _, err = ctx.run("generate", "-m", link, "-p", "Hello", "-n", "1", "--kv", "kvzap")
    check(rc == 0, f"the scorer beside the model: {err}")
    # damaged, foreign, bad corpora and parameters
    with open(path, "rb") as f:
        data = bytearray(f.read())
    data[len(data) // 2] ^= 0x40
    bad = os.path.join(ctx.tmp, "damaged.kvzap")
    with open(bad, "wb") as f:
        f.write(data)
    expect_error(ctx, 2, ["generate", "-m", smol, "-p", "Hi", "--kv", f"kvzap:scorer={bad}"], "damaged scorer")
    gemma = ctx.model(GEMMA)
    rc, _, err = ctx.run("generate", "-m", gemma, "-p", "Hi", "--kv", f"kvzap:scorer={path}")
    check(rc != 0 and "another model" in err, f"a scorer of another model: {rc} {err}")
    short = os.path.join(ctx.tmp, "short.txt")
    with open(short, "w") as f:
        f.write("Too short to hold a span.")
    expect_error(ctx, 1, ["calibrate", "-m", smol, "--corpus", short, "-o", bad], "a corpus without a span")
    expect_error(ctx, 1, ["calibrate", "-m", smol, "-o", bad], "no corpus")
    expect_error(ctx, 1, ["calibrate", "-m", smol, "--corpus", short, "--span", "8"], "span under 16")
    expect_error(ctx, 2, ["calibrate", "-m", smol, "--corpus", os.path.join(ctx.tmp, "absent.txt")], "absent corpus")


def case_kv_short(ctx):
    """Every preset, and every stage after snapkv, on prompts of 1, 2 and
    n_layer tokens, at its own budget and at one that rounds to no entry at
    all: it keeps what its budget rounds to (none, for most rules; prefixkv
    its floor of an entry a layer, which its search needs) and says so in
    kv.ratio, never an error (issue 56: prefixkv refused a one-token
    prompt)."""
    smol = ctx.model(SMOL)
    rc, out, _ = ctx.run("policies", "--json")
    policies = json.loads(out)
    rc, out, err = ctx.run("info", "-m", smol, "--json")
    check(rc == 0, f"info: {err}")
    n_layer = json.loads(out)["n_layer"]
    prompts = {1: "Hi", 2: "Hi there", n_layer: " ".join(["one"] * n_layer)}
    specs = []
    zap, _ = kvzap_scorer(ctx, smol)
    for p in policies:
        if p["stage"] == "preset" and p["name"] == "kvzap":
            specs += [("kvzap", f"kvzap:scorer={zap}"), ("kvzap", f"kvzap:scorer={zap},budget=0.001")]
        elif p["stage"] == "preset":
            # the smallest budget: a ratio that rounds to nothing, or 2 entries where it is a count (1 reads as 100%)
            count = re.search(r"budget=(\d+)(,|$| )", p["defaults"])
            specs += [(p["name"], p["name"])]
            if "budget" in p["keys"]:
                specs += [(p["name"], p["name"] + (":budget=2" if count else ":budget=0.001"))]
        else:
            # after snapkv, or the first preset the stage names when it refuses snapkv
            stage, base = f"{p['stage']}={p['name']}", "snapkv"
            rc, _, err = ctx.run("generate", "-m", smol, "-p", "Hi", "-n", "1", "--kv", f"{base}+{stage}")
            used = re.search(r"use it with (\w+)", err)
            if rc != 0 and used:
                base = used.group(1)
            # the tightest: a budget that rounds to nothing, or (threshold, which takes no budget) a tau nothing clears
            tight = f"{base}+{stage}:tau=1e30,last=0" if p["name"] == "threshold" else f"{base}:budget=0.001+{stage}"
            specs += [(None, f"{base}+{stage}"), (None, tight)]
    specs += [(None, "snapkv+schedule=blocks:budget=2,block=1,question=1")]
    for want, text in prompts.items():
        for name, spec in specs:
            rc, out, err = ctx.run("generate", "-m", smol, "-p", text, "-n", "2", "--kv", spec, "--json")
            check(rc == 0, f"--kv {spec} on a {want}-token prompt: exit {rc}: {err[-300:]}")
            o = json.loads(out)
            kv = o["kv"]
            check(abs(o["n_prompt"] - want) <= 1, f"{text!r}: {o['n_prompt']} tokens")
            check(0 <= kv["ratio"] <= 1 and len(kv["per_layer"]) == n_layer and
                  (name != "prefixkv" or min(kv["per_layer"]) >= 1),
                  f"--kv {spec} on {o['n_prompt']} tokens: ratio {kv['ratio']}, per layer {kv['per_layer']}")


def main():
    if len(sys.argv) < 6:
        print(__doc__, file=sys.stderr)
        return 2
    name, ctx = sys.argv[1], Ctx(*sys.argv[2:6])
    cases = {
        "usage": case_usage, "badfiles": case_badfiles, "badfiles_real": case_badfiles_real, "hostile": case_hostile,
        "tokenize": case_tokenize, "info": case_info, "generate": case_generate,
        "generate_json": case_generate_json, "bench": case_bench, "demo": case_demo, "kv": case_kv,
        "kv_short": case_kv_short, "kvzap": case_kvzap,
        "kv_mm": case_kv_mm, "blockwise": case_blockwise, "reduce": case_reduce,
        "eval": case_eval,
        "perplexity": lambda c: case_perplexity(c, float(sys.argv[6])),
    }
    return run_case(cases, name, ctx)


if __name__ == "__main__":
    sys.exit(main())
