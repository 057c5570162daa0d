"""End-to-end tests of kvfold eval's long-run machinery, one case per ctest entry.

usage: eval_test.py CASE KVFOLD_BINARY MODELS_DIR SHARED_DIR TMP_DIR

results.jsonl written row by row, Ctrl-C (exit 130 with the finished rows and
their summary), --resume, the progress line, and the SVG pictures. Runs on
SmolLM2 with tiny synthetic haystacks. Exit status 0 = pass, 1 = fail, 77 =
skipped (the model is absent). Standard library only.
"""
import csv
import json
import os
import pty
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_test import SMOL, Ctx, check, ctrl_c, expect_error, run_case, start_paused  # noqa: E402

# 2 segments of 10 words and a 2x2 pseudo-image: about 60 prompt tokens
TINY = ["-t", "1", "--segments", "2", "--segment-words", "10", "--grid", "2x2", "-n", "2"]
# what a row's values are, timings aside (they differ from run to run)
VALUES = ("mode", "kv", "budget", "sample", "n_prompt", "segments", "depth", "needle", "score", "kv_mib",
          "kv_full_mib", "kv_peak_mib", "output")


def results(out_dir):
    """results.jsonl: its settings line and its rows."""
    with open(os.path.join(out_dir, "results.jsonl")) as f:
        lines = [json.loads(ln) for ln in f]
    check(lines and "settings" in lines[0], f"results.jsonl: no settings line first: {lines[:1]}")
    return lines[0], lines[1:]


def line_count(path):
    try:
        with open(path) as f:
            return sum(1 for ln in f if ln.endswith("\n"))
    except FileNotFoundError:
        return 0


def summary_values(out_dir):
    """summary.csv without its timing column."""
    with open(os.path.join(out_dir, "summary.csv")) as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        r.pop("decode_ms_per_token")
    return rows


def row_values(rows):
    return sorted((json.dumps([r.get(k) for k in VALUES]) for r in rows))


def run_with_tty_stderr(ctx, args):
    """Runs kvfold with stderr on a pseudo-terminal (the progress line's
    home) and stdout on a pipe: (exit status, stdout, stderr)."""
    master, slave = pty.openpty()
    p = subprocess.Popen([ctx.bin, *args], stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    err = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        err += chunk
    out = p.stdout.read()
    p.wait(timeout=240)
    os.close(master)
    return p.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")


def case_eval_resume(ctx):
    """A needle sweep of 6 rows: uninterrupted (progress on a terminal), then
    interrupted by Ctrl-C once results.jsonl has its first row (the sweep held
    there by KVFOLD_PAUSE_AT, whatever the machine's speed; exit 130, the
    rows so far and their summary marked interrupted), then --resume, which
    runs only the missing rows and ends with the uninterrupted run's summary
    and rows; a --resume with other settings is refused."""
    smol = ctx.model(SMOL)
    sweep = ["eval", "needle", "-m", smol, *TINY, "--kv", "snapkv", "--budgets", "0.5", "--depths", "0.2,0.5,0.8"]
    n_rows = 6  # (full, snapkv 0.5) x 3 depths
    for d in ("whole", "part"):  # a run before this one left its files
        shutil.rmtree(os.path.join(ctx.tmp, d), ignore_errors=True)
    whole = os.path.join(ctx.tmp, "whole")
    rc, out, err = run_with_tty_stderr(ctx, [*sweep, "--out", whole])
    check(rc == 0, f"uninterrupted: exit {rc}: {err}")
    check("rows (" in err and " left: sample " in err and "eval needle: " in err,
          f"no progress line on the terminal: {err!r}")
    check("kvfold:" not in out and "| `snapkv` | 0.5 | 3 |" in out, f"stdout: the summary only: {out!r}")
    settings, want_rows = results(whole)
    check(len(want_rows) == n_rows and settings["settings"]["--model"].startswith(SMOL + " ("),
          f"uninterrupted: {settings} {want_rows}")  # the model file by name and size

    # Ctrl-C once the first row is in results.jsonl
    part = os.path.join(ctx.tmp, "part")
    path = os.path.join(part, "results.jsonl")
    p = start_paused([ctx.bin, *sweep, "--out", part], "eval needle:1", stdout=subprocess.PIPE,
                     stderr=subprocess.PIPE)
    check(line_count(path) == 2, f"the first row is written while the sweep runs: {line_count(path)} lines")
    ctrl_c(p)
    out, err = (s.decode() for s in p.communicate(timeout=120))
    check(p.returncode == 130, f"Ctrl-C: exit {p.returncode}, want 130: {err}")
    _, done = results(part)
    check(len(done) == 1, f"Ctrl-C after the first row: {len(done)} rows of {n_rows}")
    check(all(r["sample"] == i // 2 for i, r in enumerate(done)), f"rows in order: {done}")
    with open(os.path.join(part, "summary.md")) as f:
        md = f.read()
    check(f"Interrupted** (Ctrl-C) with {len(done)} of {n_rows} rows done" in md and "| `full` |" in md,
          f"summary.md of what finished, marked interrupted: {md}")
    check("Interrupted" in out, f"stdout summary not marked: {out}")
    check(sum(int(r["samples"]) for r in csv.DictReader(open(os.path.join(part, "summary.csv")))) == len(done),
          "summary.csv counts the finished rows")

    # a last line cut short by a kill is dropped; other settings are refused
    with open(path, "a") as f:
        f.write('{"mode":"needle","kv":"snap')
    for flag, name, value in (("--depths", "--depths", "0.2,0.5"), ("-n", "--n-predict", "3"), ("--seed", "--seed", "2")):
        line = expect_error(ctx, 1, [*sweep, "--out", part, "--resume", flag, value], f"--resume with another {flag}")
        check(f"made with {name} " in line, f"the mismatch named: {line}")
    expect_error(ctx, 1, [*sweep, "--resume"], "--resume without --out")

    rc, out, err = ctx.run(*sweep, "--out", part, "--resume", "--json")
    check(rc == 0, f"--resume: exit {rc}: {err}")
    new = [json.loads(ln) for ln in out.splitlines()]
    check(len(new) == n_rows - len(done), f"--resume ran {len(new)} rows, want the {n_rows - len(done)} missing")
    _, got_rows = results(part)
    check(row_values(got_rows) == row_values(want_rows), "the rows differ from the uninterrupted run's")
    check(summary_values(part) == summary_values(whole), "the summary differs from the uninterrupted run's")
    with open(os.path.join(part, "summary.md")) as f:
        check("Interrupted" not in f.read(), "a finished sweep's summary is not marked interrupted")
    rc, out, err = ctx.run(*sweep, "--out", part, "--resume", "--json")
    check(rc == 0 and out == "", f"nothing left to resume: exit {rc}, {out!r}")


def svg_text(path):
    return "".join(ET.parse(path).getroot().itertext())


def case_eval_plots(ctx):
    """--plots and --kept-map of a needle sweep with text and image needles
    at two prompt lengths: valid SVG naming the model and the synthetic data;
    quality in a panel per needle kind with the full cache as a reference
    line; decode speed as lines in prompt-length order; the needle heatmap
    (a panel per kind and run, depth x prompt length); one kept map per
    layer and run with every kv head and every image, labelled."""
    smol = ctx.model(SMOL)
    plots, maps = os.path.join(ctx.tmp, "plots"), os.path.join(ctx.tmp, "maps")
    rc, out, err = ctx.run("eval", "needle", "-m", smol, *TINY, "--segments", "4,2", "--needle", "both", "--depths",
                           "0,1", "--kv", "snapkv", "--budgets", "0.5", "--plots", plots, "--kept-map", maps)
    check(rc == 0, f"eval: exit {rc}: {err}")
    ns = {"s": "http://www.w3.org/2000/svg"}
    model = SMOL[:-len(".gguf")]
    for name in ("quality.svg", "kv_memory.svg", "decode_speed.svg", "needle_heatmap.svg"):
        text = svg_text(os.path.join(plots, name))
        check(model in text and "synthetic" in text, f"{name}: the title lacks the model or 'synthetic': {text[:200]}")
    quality = svg_text(os.path.join(plots, "quality.svg"))
    check("text needle" in quality and "image needle" in quality, "quality.svg: no panel per needle kind")
    for name in ("quality.svg", "kv_memory.svg"):  # the full cache: a black dashed line across each panel
        root = ET.parse(os.path.join(plots, name)).getroot()
        ref = [ln for ln in root.iterfind("s:line", ns) if ln.get("stroke") == "#000000" and ln.get("stroke-dasharray")
               and float(ln.get("x2")) - float(ln.get("x1")) > 300]
        check(len(ref) == (2 if name == "quality.svg" else 1), f"{name}: {len(ref)} full-cache reference lines")
    root = ET.parse(os.path.join(plots, "decode_speed.svg")).getroot()
    lines = [[float(p.split(",")[0]) for p in pl.get("points").split()] for pl in root.iterfind("s:polyline", ns)]
    check(len(lines) == 2 and all(len(x) >= 2 and x == sorted(x) for x in lines),
          f"decode_speed.svg: a line per method through the prompt lengths in order: {lines}")
    heat = svg_text(os.path.join(plots, "needle_heatmap.svg"))
    for panel in ("text needle: full", "image needle: full", "text needle: snapkv at 0.5", "image needle: snapkv at 0.5"):
        check(panel in heat, f"needle_heatmap.svg: no panel '{panel}'")
    check("needle depth" in heat and "prompt tokens" in heat, "needle_heatmap.svg: axes unnamed")
    files = sorted(os.listdir(maps))
    check(len(files) == 2 * 30 and "snapkv_0.5_layer29.svg" in files, f"kept maps: {len(files)} files, want 2 x 30 layers")
    text = svg_text(os.path.join(maps, "snapkv_0.5_layer29.svg"))
    for label in ("kv head 0", "kv head 1", "kv head 2", "image 0", "image 1", model, "synthetic"):
        check(label in text, f"kept map: no '{label}'")
    cells = ET.parse(os.path.join(maps, "snapkv_0.5_layer29.svg")).getroot().iterfind("s:rect", ns)
    check(sum(1 for c in cells if c.get("width") == c.get("height")) >= 3 * 2 * 4, "kept map: a cell per head, image, entry")


def case_eval_question(ctx):
    """--question after (kvpress's protocol): the context is compressed, then the question appended. The full
    cache answers as with the question in the prompt (the same tokens: a chat template puts the question right
    after the context, and it is tokenized on its own at a word boundary); what was compressed held the context
    alone, the prompt's length is the same. The setting is recorded; --data lines give their "question" apart,
    and a line without one is refused."""
    smol = ctx.model(SMOL)
    sweep = ["eval", "needle", "-m", smol, *TINY, "--kv", "snapkv:window=4", "--budgets", "0.3", "--depths", "0.5"]
    got = {}
    for where in ("with", "after"):
        out = os.path.join(ctx.tmp, "question-" + where)
        shutil.rmtree(out, ignore_errors=True)
        rc, _, err = ctx.run(*sweep, "--question", where, "--out", out)
        check(rc == 0, f"--question {where}: exit {rc}: {err}")
        settings, rows = results(out)
        check(settings["settings"]["--question"] == where, f"settings: {settings}")
        got[where] = {r["kv"]: r for r in rows}
    w, a = got["with"], got["after"]
    check(w["full"]["output"] == a["full"]["output"] and w["full"]["n_prompt"] == a["full"]["n_prompt"],
          f"the full cache after: {a['full']} with: {w['full']}")
    check(w["snapkv:window=4"]["n_prompt"] == a["snapkv:window=4"]["n_prompt"], f"snapkv rows: {w} {a}")
    # what was compressed held the context alone: fewer positions than the whole prompt
    for kv in ("full", "snapkv:window=4"):
        check(a[kv]["kv_full_mib"] < w[kv]["kv_full_mib"], f"{kv}: compressed with / after the question: {w} {a}")
    expect_error(ctx, 1, [*sweep, "--question", "later"], "--question later")
    # --data: a line's "question" follows its "prompt", compressed after it; a line without one is refused
    data = os.path.join(ctx.tmp, "q.jsonl")
    with open(data, "w") as f:
        f.write('{"prompt": "The code is 12345. The weather was mild.", "question": " What is the code?", '
                '"answer": "12345"}\n')
    out = os.path.join(ctx.tmp, "question-data")
    shutil.rmtree(out, ignore_errors=True)
    rc, _, err = ctx.run("eval", "needle", "-m", smol, "-t", "1", "-n", "2", "--kv", "keydiff", "--budgets", "0.5",
                         "--data", data, "--question", "after", "--out", out)
    _, rows = results(out) if rc == 0 else (None, [])
    check(rc == 0 and len(rows) == 2 and rows[0]["kv_full_mib"] > 0, f"--data with a question, after: {rc} {err}")
    with open(data, "w") as f:
        f.write('{"prompt": "x", "answer": "1"}\n')
    line = expect_error(ctx, 2, ["eval", "needle", "-m", smol, "--data", data, "--question", "after"],
                        "--question after, a line without a question")
    check('"question"' in line, f"the missing question named: {line}")


RULER_TASKS = ("niah_single_1", "niah_single_2", "niah_single_3", "niah_multikey_1", "niah_multikey_2",
               "niah_multikey_3", "niah_multivalue", "niah_multiquery", "vt", "cwe", "fwe")
UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"
WORD_KEY = r"[a-z]{3,12}-[a-z]{3,12}"


def ruler_check(task, smp, words, ctx_size):
    """One generated sample against RULER's construction (NVIDIA/RULER scripts/data/synthetic/): -> a list of
    what is wrong."""
    ctx, q, pre, ans = smp["context"], smp["question"], smp["answer_prefix"], smp["answers"]
    bad = []
    if task.startswith("niah"):
        kind = {"niah_single_3": UUID, "niah_multikey_3": UUID}.get(task, r"\d{7}")
        key_re = UUID if task == "niah_multikey_3" else WORD_KEY
        needles = re.findall(r"One of the special magic (\w+) for (%s) is: (%s)\." % (key_re, kind), ctx)
        real = [(k, v) for _, k, v in needles if v in ans]
        n_ans = {"niah_multivalue": 4, "niah_multiquery": 4}.get(task, 1)
        one = n_ans == 1
        if len(ans) != n_ans or len(real) != n_ans:
            bad.append(f"{len(ans)} answers, {len(real)} of them in needles")
        keys = {k for k, _ in real}
        for k in keys:
            if k not in q or k not in pre:
                bad.append(f"the key {k} is not asked")
        if task in ("niah_single_1",):  # noise haystack
            lines = ctx.split("\n")[1:]
            if sum(ln == "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
                   for ln in lines) != len(lines) - 1:
                bad.append("the noise haystack is not noise lines and one needle")
        if task in ("niah_multikey_2", "niah_multikey_3"):  # every line a needle
            if len(needles) != len(ctx.split("\n")) - 1:
                bad.append(f"{len(needles)} needles in {len(ctx.split(chr(10)))} lines")
        if task == "niah_multikey_1" and len(needles) != 4:
            bad.append(f"{len(needles)} needles, want 4 keys")
        head = ("A special magic %s is hidden" if one else "Some special magic %s are hidden") % (
            "uuid" if "uuid" in kind or kind == UUID else "number" if one else "numbers")
        if not ctx.startswith(head.split(" %s")[0].split(" is")[0][:15]):
            bad.append(f"the instruction: {ctx[:80]!r}")
        if not q.startswith("\nWhat is the special magic" if one else "\nWhat are all the special magic"):
            bad.append(f"the question: {q!r}")
    elif task == "vt":
        value = re.search(r"assigned the value (\d{5}) in the text above\.$", q)
        chain = []
        if value:
            m = re.search(r"VAR ([A-Z]{5}) = %s" % value.group(1), ctx)
            while m:
                chain.append(m.group(1))
                m = re.search(r"VAR ([A-Z]{5}) = VAR %s " % chain[-1], ctx)
        if chain != ans or len(ans) != 5:
            bad.append(f"the chain {chain} is not the answers {ans}")
        if ctx.count("Memorize and track") != 2:
            bad.append("not one worked example and the task")
    elif task == "cwe":
        body = ctx.split("\nBelow is a numbered list of words")[-1]
        items = re.findall(r"\d+\. ([a-z]+)", body)
        counts = {w: items.count(w) for w in set(items)}
        common, rare = (30, 3) if ctx_size >= 4096 else (6, 1)  # RULER's settings above and below 4096 tokens
        if len(ans) != 10 or any(counts.get(w) != common for w in ans) or any(c != rare for w, c in counts.items()
                                                                             if w not in ans):
            bad.append(f"the common words are not {common} times each and the others {rare}: "
                       f"{sorted(counts.values())[-12:]}")
        if any(w not in words for w in ans):
            bad.append("a word not from --words")
    elif task == "fwe":
        items = ctx.split(". ", 1)[-1].split(" ")
        items = [w for w in items if w and "." not in w or w == "..."]
        counts = {w: items.count(w) for w in set(items)}
        top = sorted((w for w in counts if w != "..."), key=lambda w: -counts[w])[:3]
        if len(ans) != 3 or sorted(top) != sorted(ans) or counts.get("...", 0) <= max(counts[w] for w in ans):
            bad.append(f"the answers {ans} are not the three most frequent words after '...' ({top})")
    return bad


def case_eval_ruler(ctx):
    """kvfold eval ruler: every task's sample (--dump-samples) checked against RULER's construction, as long as
    --ctx-size allows and not much shorter; rows per task scored by string_match_all against the expected strings;
    the same seed gives the same samples, another seed others; --question after keeps the context apart;
    --questions asks several questions of one context (a key each, a row each), --turns in the turns of one
    conversation; bad task names, a missing word list and --questions outside ruler --question after refused."""
    smol = ctx.model(SMOL)
    words_path = "/usr/share/dict/words"
    if not os.path.isfile(words_path):
        print(f"SKIP: {words_path} is absent (scripts/setup.sh installs Debian's wamerican)")
        return 77
    with open(words_path) as f:
        words = {w.strip() for w in f}
    out = os.path.join(ctx.tmp, "ruler")
    shutil.rmtree(out, ignore_errors=True)
    dump = os.path.join(ctx.tmp, "ruler.jsonl")
    sweep = ["eval", "ruler", "-m", smol, "-t", "1", "-n", "4", "--ctx-size", "1024", "--kv", "keydiff",
             "--budgets", "0.5", "--question", "after"]
    rc, _, err = ctx.run(*sweep, "--out", out, "--dump-samples", dump)
    check(rc == 0, f"eval ruler: exit {rc}: {err}")
    with open(dump) as f:
        samples = [json.loads(ln) for ln in f]
    check([s["task"] for s in samples] == list(RULER_TASKS), f"tasks: {[s['task'] for s in samples]}")
    settings, rows = results(out)
    check(len(rows) == 2 * len(RULER_TASKS), f"{len(rows)} rows")
    for s in samples:
        bad = ruler_check(s["task"], s, words, 1024)
        check(not bad, f"{s['task']}: {bad}\n{json.dumps(s)[:2000]}")
    for r in rows:
        s = samples[r["sample"]]
        check(r["task"] == s["task"] and r["metric"] == "string_match_all", f"row {r}")
        check(r["gt"].split("\n") == s["answers"], f"{r['task']}: gt {r['gt']!r}, answers {s['answers']}")
        want = sum(a.lower() in r["output"].lower() for a in s["answers"]) / len(s["answers"])
        check(abs(r["score"] - want) < 1e-9, f"{r['task']}: score {r['score']}, string_match_all {want}")
        # the sample and its answer fit --ctx-size, and fill most of it
        check(920 <= r["n_prompt"] + 4 <= 1024, f"{r['task']}: {r['n_prompt']} prompt tokens for --ctx-size 1024")
    # the same seed, the same samples; another seed, others
    dump2 = os.path.join(ctx.tmp, "ruler2.jsonl")
    rc, _, err = ctx.run("eval", "ruler", "-m", smol, "-t", "1", "-n", "1", "--ctx-size", "1024", "--kv", "streaming",
                         "--budgets", "0.5", "--tasks", "niah_single_1,cwe", "--dump-samples", dump2)
    with open(dump2) as f:
        again = [json.loads(ln) for ln in f]
    check(rc == 0 and again == [samples[0], samples[9]], f"--seed 1 again: {rc} {err}")
    rc, _, err = ctx.run("eval", "ruler", "-m", smol, "-t", "1", "-n", "1", "--ctx-size", "1024", "--kv", "streaming",
                         "--budgets", "0.5", "--tasks", "niah_single_1", "--seed", "2", "--dump-samples", dump2)
    with open(dump2) as f:
        other = [json.loads(ln) for ln in f]
    check(rc == 0 and other[0]["answers"] != samples[0]["answers"], f"--seed 2: {rc} {err} {other}")
    # --questions 3: each NIAH context compressed once and asked three questions of a key each (two for
    # multiquery's four keys a question); vt keeps its one
    qout, qdump = os.path.join(ctx.tmp, "ruler-q"), os.path.join(ctx.tmp, "ruler-q.jsonl")
    shutil.rmtree(qout, ignore_errors=True)
    rc, _, err = ctx.run("eval", "ruler", "-m", smol, "-t", "1", "-n", "4", "--ctx-size", "1024", "--kv", "keydiff",
                         "--budgets", "0.5", "--question", "after", "--tasks", "niah_single_1,niah_multiquery,vt",
                         "--questions", "3", "--out", qout, "--dump-samples", qdump)
    check(rc == 0, f"eval ruler --questions 3: exit {rc}: {err}")
    with open(qdump) as f:
        qs = [json.loads(ln) for ln in f]
    want_tasks = ["niah_single_1"] * 3 + ["niah_multiquery"] * 2 + ["vt"]
    check([q["task"] for q in qs] == want_tasks, f"--questions 3: the dump's tasks {[q['task'] for q in qs]}")
    first = {}  # task -> its sample's index in the dump's order
    for i, q in enumerate(qs):
        first.setdefault(q["task"], i)
        check(q["context"] == qs[first[q["task"]]]["context"], f"{q['task']}: the questions' contexts differ")
        if q["task"] != "vt":
            keys = re.search(r"numbers? for (.*) mentioned", q["question"]).group(1).replace(", and ", ", ").split(", ")
            check(len(keys) == len(q["answers"]), f"{q['task']}: keys {keys}, answers {q['answers']}")
            for k, v in zip(keys, q["answers"]):
                check(f"One of the special magic numbers for {k} is: {v}." in q["context"],
                      f"{q['task']}: the needle of {k} ({v}) is not in the context")
    check(len({q["question"] for q in qs}) == len(qs), "--questions 3: a question asked twice")
    _, qrows = results(qout)
    check(len(qrows) == 2 * len(qs), f"--questions 3: {len(qrows)} rows for {len(qs)} questions under 2 runs")
    for r in qrows:
        i = first[r["task"]] + r.get("question", 0)
        check(r["gt"].split("\n") == qs[i]["answers"], f"{r['task']} question {r.get('question')}: gt {r['gt']!r}")
        check(r["n_prompt"] + 4 <= 1024, f"{r['task']}: {r['n_prompt']} prompt tokens over --ctx-size 1024")
    check(sorted((r["task"], r["kv"], r.get("question")) for r in qrows if r["task"] == "niah_single_1") ==
          sorted((t, kv, j) for t in ["niah_single_1"] for kv in ["full", "keydiff"] for j in range(3)),
          "--questions 3: niah_single_1's rows are not a row per question and run")
    # --turns: the same questions in turn in one conversation, each a message after the last answer, the cache
    # compressed after every message: the conversation grows by each question's message and answer, the full
    # cache answers the first question as a copy of the context does, keydiff keeps half of what the cache saw
    tout = os.path.join(ctx.tmp, "ruler-t")
    shutil.rmtree(tout, ignore_errors=True)
    rc, _, err = ctx.run("eval", "ruler", "-m", smol, "-t", "1", "-n", "4", "--ctx-size", "1024", "--kv", "keydiff",
                         "--budgets", "0.5", "--question", "after", "--tasks", "niah_single_1", "--questions", "3",
                         "--turns", "--out", tout)
    check(rc == 0, f"eval ruler --turns: exit {rc}: {err}")
    tsettings, trows = results(tout)
    check(tsettings["settings"].get("--turns") is True, f"--turns is not in the settings: {tsettings}")
    for kv in ["full", "keydiff"]:
        t = sorted((r for r in trows if r["kv"] == kv), key=lambda r: r.get("question", 0))
        check([r.get("question", 0) for r in t] == [0, 1, 2], f"--turns {kv}: questions {[r.get('question') for r in t]}")
        for a, b in zip(t, t[1:]):
            check(b["n_prompt"] >= a["n_prompt"] + 4 + 10 and b["kv_full_mib"] > a["kv_full_mib"],
                  f"--turns {kv}: the conversation did not grow by a message and an answer: {a} then {b}")
        for r in t:
            i = first["niah_single_1"] + r.get("question", 0)
            check(r["gt"].split("\n") == qs[i]["answers"], f"--turns question {r.get('question')}: gt {r['gt']!r}")
            half = 0.5 * r["kv_full_mib"]
            check(r["kv_mib"] == r["kv_full_mib"] if kv == "full" else 0.9 * half <= r["kv_mib"] <= 1.1 * half,
                  f"--turns {kv}: {r['kv_mib']} MiB of {r['kv_full_mib']}")
    fork0 = [r for r in qrows if r["task"] == "niah_single_1" and r["kv"] == "full" and not r.get("question")]
    turn0 = [r for r in trows if r["kv"] == "full" and not r.get("question")]
    check(fork0[0]["output"] == turn0[0]["output"], f"--turns: the full cache's first answer {turn0[0]['output']!r}, "
          f"not {fork0[0]['output']!r}")
    expect_error(ctx, 1, ["eval", "ruler", "-m", smol, "--questions", "2", "--turns"], "--turns without --question after")
    expect_error(ctx, 1, ["eval", "ruler", "-m", smol, "--questions", "2"], "--questions without --question after")
    expect_error(ctx, 1, ["eval", "needle", "-m", smol, "--questions", "2", "--question", "after"],
                 "--questions outside ruler")
    expect_error(ctx, 1, ["eval", "ruler", "-m", smol, "--tasks", "niah_single_1,qa_1"], "an unknown task")
    expect_error(ctx, 2, ["eval", "ruler", "-m", smol, "--words", os.path.join(ctx.tmp, "absent.txt")],
                 "a missing word list")
    expect_error(ctx, 1, ["eval", "ruler", "-m", smol, "--ctx-size", "100", "--tasks", "cwe"],
                 "a context too short for the task")


def main():
    if len(sys.argv) < 6:
        print(__doc__, file=sys.stderr)
        return 2
    name, ctx = sys.argv[1], Ctx(*sys.argv[2:6])
    return run_case({"eval_resume": case_eval_resume, "eval_plots": case_eval_plots, "eval_question": case_eval_question,
                     "eval_ruler": case_eval_ruler}, name, ctx)


if __name__ == "__main__":
    sys.exit(main())
