#!/usr/bin/env python3
"""kvfold and NVIDIA kvpress side by side: the same model, prompts and rules.

    .venv-kvpress/bin/python bench/kvpress_side.py --kvfold build/kvfold \\
        --gguf models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf --out DIR \\
        [--samples 5] [--ratios 0.5,0.8,0.9] [--rules snapkv,keydiff,...] [--tokens 1500] [--threads 2]

A benchmark, not a test (the conformance test is tests/ref/kvpress_check.py).
Needs .venv-kvpress (scripts/setup-kvpress.sh: kvpress 0.5.5, transformers
5.2, wonderwords for RULER's keys, PyTorch and gguf from .venv-hf).

Samples: RULER's niah_single_1 (Hsieh et al. 2024; its public code's
template and needle): a haystack of "The grass is green. The sky is blue.
..." lines with one "One of the special magic numbers for KEY is: VALUE."
at a random line, KEY an adjective-noun pair of wonderwords' lists, VALUE a
7-digit number; about --tokens tokens. Both engines get kvpress's protocol:
the context (the instruction and the haystack) is compressed, then the
question is appended ("What is the special magic number for KEY mentioned in
the provided text?"), both inside one user turn of the model's chat template
(ChatML without Qwen's default system message, as kvfold writes it; kvpress
gets the same template). A sample is correct when the greedy answer (32
tokens) contains VALUE.

kvpress runs the GGUF dequantised to float32 by transformers (sdpa
attention), kvfold the GGUF as it is (Q4_K_M weights, float32 cache): the
weights differ by their quantisation, so answers may differ where a rule is
near its edge. Each rule at compression ratio r is kvfold's budget 1 - r;
seconds per sample are wall time of one sample (prefill, compression and
answer), on --threads threads for both. Writes DIR/samples.jsonl,
DIR/kvfold/ (kvfold eval's results), DIR/kvpress.jsonl and DIR/summary.md.

    .venv-kvpress/bin/python bench/kvpress_side.py --gguf GGUF --out DIR \
        --samples-from SAMPLES.jsonl [--ratios 0.8] [--rules kvzip,...] [--n-predict 64]

runs kvpress alone on the RULER samples `kvfold eval ruler --dump-samples`
wrote (kvpress's fields: context, question, answer_prefix, answers; kvfold's
scores for them are in that eval's results.jsonl), scored as RULER scores
them (the share of the answers found in the output, ignoring case), ChatML
as above. Writes DIR/kvpress.jsonl and DIR/summary.md (per task).
"""
import argparse
import json
import os
import random
import subprocess
import sys
import time

N_PREDICT = 32  # the answer follows a restatement of the question (RULER's answer prefix is not given)
HAYSTACK = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
NEEDLE = "One of the special magic numbers for {key} is: {value}."
INSTRUCTION = ("A special magic number is hidden within the following text. Make sure to memorize it. "
               "I will quiz you about the number afterwards.\n")
QUESTION = "\nWhat is the special magic number for {key} mentioned in the provided text?"
CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def rules(kp):
    """name -> (kvpress press at ratio r, kvfold spec, run at budget 1 - r)."""
    return {
        "snapkv": (lambda r: kp.SnapKVPress(r, window_size=64, kernel_size=5), "snapkv:window=64"),
        "pyramidkv": (lambda r: kp.PyramidKVPress(r, window_size=64, kernel_size=5), "pyramidkv:window=64"),
        "adakv": (lambda r: kp.AdaKVPress(kp.SnapKVPress(r, window_size=64, kernel_size=5)),
                  "snapkv:window=64+budget=adaptive"),
        "streaming": (lambda r: kp.StreamingLLMPress(r, n_sink=4), "streaming"),
        "tova": (lambda r: kp.TOVAPress(r), "tova"),
        "keydiff": (lambda r: kp.KeyDiffPress(r), "keydiff"),
        "knorm": (lambda r: kp.KnormPress(r), "knorm"),
        "expected": (lambda r: kp.ExpectedAttentionPress(r), "expected"),
        "kvzip": (lambda r: kp.KVzipPress(r), "kvzip"),
    }


def make_samples(n, tokens, tok, seed):
    import wonderwords.random_word as rw
    nouns = rw._get_words_from_text_file("nounlist.txt")
    adjs = rw._get_words_from_text_file("adjectivelist.txt")
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        key = "%s-%s" % (rnd.choice(adjs), rnd.choice(nouns))
        value = str(rnd.randint(10 ** 6, 10 ** 7 - 1))
        lines = 1
        while True:  # the most haystack lines within the token count
            ctx = INSTRUCTION + "\n".join([HAYSTACK] * lines)
            if len(tok.encode(ctx + QUESTION.format(key=key), add_special_tokens=False)) > tokens:
                break
            lines += 1
        hay = [HAYSTACK] * (lines - 1)
        hay.insert(rnd.randrange(len(hay) + 1), NEEDLE.format(key=key, value=value))
        out.append({"prompt": INSTRUCTION + "\n".join(hay), "question": QUESTION.format(key=key), "answer": value,
                    "kind": "text"})
    return out


def match_all(output, answers):
    """RULER's string_match_all."""
    return sum(x.lower() in output.lower() for x in answers) / len(answers)


def run_kvpress(pipe, table, samples, names, ratios, n_predict, path, score, label):
    """Every sample under no press and every (rule, ratio); rows appended to path as they finish."""
    rows = []
    with open(path, "w") as fh:
        for i, s in enumerate(samples):
            for name in ["none"] + names:
                for r in ([None] if name == "none" else ratios):
                    press = None if name == "none" else table[name][0](r)
                    t = time.time()
                    try:
                        ans = pipe(s["context"], question=s["question"], answer_prefix=s.get("answer_prefix", ""),
                                   press=press, max_new_tokens=n_predict)["answer"]
                        err = None
                    except RuntimeError as e:  # a press that fails in kvpress's pipeline: recorded, not scored
                        ans, err = "", str(e).splitlines()[0]
                    row = {"sample": i, "task": label(s), "rule": name, "ratio": r,
                           "score": None if err else score(ans, s), "seconds": time.time() - t, "answer": ans,
                           "error": err}
                    rows.append(row)
                    fh.write(json.dumps(row) + "\n")
                    fh.flush()
                    print("kvpress: sample %d %s %s: %s (%.1f s)" % (i, name, r, err or row["score"], row["seconds"]),
                          file=sys.stderr)
    return rows


def load_kvpress(a, tok_dir):
    import torch
    from transformers import AutoModelForCausalLM
    d, f = os.path.split(os.path.abspath(a.gguf))
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32, attn_implementation="sdpa")
    model.config.name_or_path = tok_dir
    model.eval()
    return model


def ruler_side(a, kp, tok, tok_dir):
    """--samples-from: kvpress alone on kvfold eval ruler's samples, per task."""
    from transformers import pipeline
    samples = [json.loads(x) for x in open(a.samples_from)]
    names = [n for n in a.rules.split(",") if n]
    pipe = pipeline("kv-press-text-generation", model=load_kvpress(a, tok_dir), tokenizer=tok, device="cpu")
    rows = run_kvpress(pipe, rules(kp), samples, names, a.ratios, a.n_predict, os.path.join(a.out, "kvpress.jsonl"),
                       lambda ans, s: match_all(ans, s["answers"]), lambda s: s["task"])
    tasks = list(dict.fromkeys(s["task"] for s in samples))
    cols = [("none", None)] + [(n, r) for n in names for r in a.ratios]
    lines = ["| task | " + " | ".join("%s%s" % (n, "" if r is None else " %g" % r) for n, r in cols) + " |",
             "|---" * (len(cols) + 1) + "|"]
    def mean(xs):
        xs = [x["score"] for x in xs if x["error"] is None]
        return sum(xs) / len(xs) if xs else None
    for t in tasks + [None]:
        cells = []
        for n, r in cols:
            m = mean([x for x in rows if (t is None or x["task"] == t) and x["rule"] == n and x["ratio"] == r])
            cells.append("error" if m is None else "%.2f" % m)
        lines.append("| %s | %s |" % (t or "**mean**", " | ".join(cells)))
    secs = ["%s%s %.0f s" % (n, "" if r is None else " %g" % r,
                             sum(x["seconds"] for x in rows if x["rule"] == n and x["ratio"] == r)
                             / max(1, sum(1 for x in rows if x["rule"] == n and x["ratio"] == r))) for n, r in cols]
    with open(os.path.join(a.out, "summary.md"), "w") as fh:
        fh.write("kvpress on %d samples of %s, question after compression, %d threads, %d tokens\n\n"
                 % (len(samples), a.samples_from, a.threads, a.n_predict) + "\n".join(lines)
                 + "\n\nseconds per sample: " + ", ".join(secs) + "\n")
    print("\n".join(lines))


def run_kvfold(a, specs, data, out):
    cmd = [a.kvfold, "eval", "needle", "-m", a.gguf, "-t", str(a.threads), "--data", data, "--question", "after",
           "-n", str(a.n_predict), "--budgets", ",".join("%.4g" % (1 - r) for r in a.ratios), "--out", out, "--no-progress",
           "--chat-template", "chatml"]
    for s in specs:
        cmd += ["--kv", s]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    rows = [json.loads(x) for x in open(os.path.join(out, "results.jsonl"))]
    return [r for r in rows if "score" in r]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kvfold")
    ap.add_argument("--samples-from")
    ap.add_argument("--n-predict", type=int, default=N_PREDICT)
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--samples", type=int, default=5)
    ap.add_argument("--ratios", default="0.5,0.8,0.9")
    ap.add_argument("--rules", default="snapkv,pyramidkv,adakv,tova,streaming,keydiff,knorm,expected,kvzip")
    ap.add_argument("--tokens", type=int, default=1500)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=42)
    a = ap.parse_args()
    a.ratios = [float(x) for x in a.ratios.split(",")]
    import torch
    import kvpress as kp
    from transformers import AutoTokenizer, pipeline
    from transformers.utils import logging
    logging.set_verbosity_error()
    logging.disable_progress_bar()
    torch.set_num_threads(a.threads)
    os.makedirs(a.out, exist_ok=True)
    d, f = os.path.split(os.path.abspath(a.gguf))
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    tok.chat_template = CHATML
    tok_dir = os.path.join(a.out, "tokenizer")  # KVzipPress reloads it from config.name_or_path
    tok.save_pretrained(tok_dir)
    if a.samples_from:
        return ruler_side(a, kp, tok, tok_dir)
    if not a.kvfold:
        ap.error("--kvfold is needed unless --samples-from is given")
    samples = make_samples(a.samples, a.tokens, tok, a.seed)
    data = os.path.join(a.out, "samples.jsonl")
    with open(data, "w") as fh:
        for s in samples:
            fh.write(json.dumps(s) + "\n")
    names = a.rules.split(",")
    table = rules(kp)

    # kvfold: one eval over every rule and budget (each sample prefilled once, forked per rule).
    specs = [table[n][1] for n in names]
    t0 = time.time()
    kv_rows = run_kvfold(a, specs, data, os.path.join(a.out, "kvfold"))
    print("kvfold: %d rows in %.0f s" % (len(kv_rows), time.time() - t0), file=sys.stderr)

    pipe = pipeline("kv-press-text-generation", model=load_kvpress(a, tok_dir), tokenizer=tok, device="cpu")
    kvp_samples = [{"context": s["prompt"], "question": s["question"], "answer": s["answer"]} for s in samples]
    kp_rows = run_kvpress(pipe, table, kvp_samples, names, a.ratios, a.n_predict, os.path.join(a.out, "kvpress.jsonl"),
                          lambda ans, s: int(s["answer"] in ans), lambda s: "niah_single_1")

    def kvfold_cell(name, r):
        rows = [x for x in kv_rows if x["kv"] == table[name][1] and abs(x["budget"] - (1 - r)) < 1e-6]
        if not rows:
            return None, None
        return (sum(x["score"] for x in rows) / len(rows),
                sum((x["prefill_ms"] + x["compress_ms"]) / 1e3 + a.n_predict * x["decode_ms_per_token"] / 1e3 for x in rows)
                / len(rows))

    def kvpress_cell(name, r):
        rows = [x for x in kp_rows if x["rule"] == name and x["ratio"] == r and x["error"] is None]
        if not rows:
            return None, None
        return sum(x["score"] for x in rows) / len(rows), sum(x["seconds"] for x in rows) / len(rows)

    full = [x for x in kv_rows if x["kv"] == "full"]
    lines = ["| rule | ratio | kvfold accuracy | kvpress accuracy | kvfold s/sample | kvpress s/sample |",
             "|---|---|---|---|---|---|"]
    fa = sum(x["score"] for x in full) / len(full)
    fs = sum(x["prefill_ms"] / 1e3 + a.n_predict * x["decode_ms_per_token"] / 1e3 for x in full) / len(full)
    def cell(x, fmt):
        return "error" if x is None else fmt % x

    pa, ps = kvpress_cell("none", None)
    lines.append("| none | 0 | %.2f | %s | %.1f | %s |" % (fa, cell(pa, "%.2f"), fs, cell(ps, "%.1f")))
    for name in names:
        for r in a.ratios:
            ka, ks = kvfold_cell(name, r)
            pa, ps = kvpress_cell(name, r)
            lines.append("| %s | %g | %s | %s | %s | %s |" % (name, r, cell(ka, "%.2f"), cell(pa, "%.2f"),
                                                              cell(ks, "%.1f"), cell(ps, "%.1f")))
    with open(os.path.join(a.out, "summary.md"), "w") as fh:
        fh.write("%d samples of RULER niah_single_1 (~%d tokens), question after compression, %d threads\n\n"
                 % (a.samples, a.tokens, a.threads) + "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
