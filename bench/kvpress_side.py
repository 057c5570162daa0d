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


def run_kvfold(a, specs, data, out):
    cmd = [a.kvfold, "eval", "needle", "-m", a.gguf, "-t", str(a.threads), "--data", data, "--question", "after",
           "-n", str(N_PREDICT), "--budgets", ",".join("%.4g" % (1 - r) for r in a.ratios), "--out", out, "--no-progress",
           "--chat-template", "chatml"]
    for s in specs:
        cmd += ["--kv", s]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    rows = [json.loads(x) for x in open(os.path.join(out, "results.jsonl"))]
    return [r for r in rows if "score" in r]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kvfold", required=True)
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
    from transformers import AutoModelForCausalLM, AutoTokenizer, pipeline
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

    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32, attn_implementation="sdpa")
    model.config.name_or_path = tok_dir
    model.eval()
    pipe = pipeline("kv-press-text-generation", model=model, tokenizer=tok, device="cpu")
    kp_rows = []
    with open(os.path.join(a.out, "kvpress.jsonl"), "w") as fh:
        for i, s in enumerate(samples):
            for name in ["none"] + names:
                for r in ([None] if name == "none" else a.ratios):
                    press = None if name == "none" else table[name][0](r)
                    t = time.time()
                    try:
                        ans = pipe(s["prompt"], question=s["question"], press=press, max_new_tokens=N_PREDICT)["answer"]
                        err = None
                    except RuntimeError as e:  # a press that fails in kvpress's pipeline: recorded, not scored
                        ans, err = "", str(e).splitlines()[0]
                    row = {"sample": i, "rule": name, "ratio": r, "score": None if err else int(s["answer"] in ans),
                           "seconds": time.time() - t, "answer": ans, "error": err}
                    kp_rows.append(row)
                    fh.write(json.dumps(row) + "\n")
                    fh.flush()
                    print("kvpress: sample %d %s %s: %s (%.1f s)" % (i, name, r, err or row["score"], row["seconds"]),
                          file=sys.stderr)

    def kvfold_cell(name, r):
        rows = [x for x in kv_rows if x["kv"] == table[name][1] and abs(x["budget"] - (1 - r)) < 1e-6]
        if not rows:
            return None, None
        return (sum(x["score"] for x in rows) / len(rows),
                sum((x["prefill_ms"] + x["compress_ms"]) / 1e3 + N_PREDICT * x["decode_ms_per_token"] / 1e3 for x in rows)
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
    fs = sum(x["prefill_ms"] / 1e3 + N_PREDICT * x["decode_ms_per_token"] / 1e3 for x in full) / len(full)
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
