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


def main():
    if len(sys.argv) < 6:
        print(__doc__, file=sys.stderr)
        return 2
    name, ctx = sys.argv[1], Ctx(*sys.argv[2:6])
    return run_case({"eval_resume": case_eval_resume, "eval_plots": case_eval_plots, "eval_question": case_eval_question},
                    name, ctx)


if __name__ == "__main__":
    sys.exit(main())
