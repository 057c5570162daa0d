#!/usr/bin/env python3
"""Checks the numpy reference itself, so that agreement with it means
something.

    check_ref.py fixtures DIR     each convention the reference implements
                                  (RoPE form, sliding window, local RoPE base,
                                  attention scale, Gemma's (1 + w) norms, GQA
                                  head mapping) changes the fixtures' logits by
                                  far more than the 1e-4 test bound, and each
                                  model stored as GGUF and as safetensors gives
                                  the same reference logits
    check_ref.py real MODEL...    on real weights the implemented conventions
                                  give a low perplexity on an English sentence,
                                  lower than every altered convention, and
                                  "The capital of France is" ranks " Paris"
                                  among the top 3 (exit 77 when no model exists)
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ref_model import RefModel  # noqa: E402

FIXTURE_IDS = [0, 5, 77, 290, 12, 258, 100, 299, 1, 45, 260, 33]
SENTENCE = ("The quick brown fox jumps over the lazy dog . The capital of France is Paris , and the capital of "
            "Germany is Berlin . Water is made of hydrogen and oxygen , and it boils at one hundred degrees .")


def mutations(m, n_tokens):
    """(name, config overrides) that each break one convention (and can
    matter on n_tokens tokens)."""
    c = m.c
    out = [("rope form", {"rope_style": "neox" if c["rope_style"] == "norm" else "norm"}),
           ("attention scale x2", {"attn_scale": 2.0 / np.sqrt(c["head_dim"])} if c["arch"] == "gemma3" else None),
           ("GQA heads interleaved", {"gqa_interleave": True} if 1 < c["n_head_kv"] < c["n_head"] else None),
           ("no q/k norm", {"no_qk_norm": True} if c["arch"] in ("gemma3", "qwen3") else None)]
    if c["arch"] == "gemma3":
        out += [("no sliding window", {"sliding_window": 1 << 30} if n_tokens > c["sliding_window"] else None),
                ("local rope base = global", {"rope_base_local": c["rope_base"]}),
                ("norm (1 + w) toggled", {"norm_plus_one": not c["norm_plus_one"]})]
    return [(n, o) for n, o in out if o is not None]


def with_config(m, overrides, fn):
    saved = dict(m.c)
    m.c.update(overrides)
    try:
        return fn()
    finally:
        m.c = saved


def fixtures(d):
    failed = 0
    for name in ["llama-f32.gguf", "qwen2-f32.gguf", "gemma3-f32.gguf", "qwen3-f32.gguf"]:
        m = RefModel(os.path.join(d, name))
        base = m.logits(FIXTURE_IDS)
        scale = np.abs(base).max()
        for mut, o in mutations(m, len(FIXTURE_IDS)):
            diff = np.abs(with_config(m, o, lambda: m.logits(FIXTURE_IDS)) - base).max() / scale
            ok = diff > 1e-2
            failed += not ok
            print("%-4s %-16s %-26s changes logits by %.2e" % ("ok" if ok else "FAIL", name, mut, diff))
    for a, b in [("llama-st", "llama-f32.gguf"), ("qwen2-st", "qwen2-f32.gguf"), ("gemma3-st", "gemma3-f32.gguf"),
                 ("qwen3-st", "qwen3-f32.gguf"),
                 ("llama-st-sharded", "llama-st")]:
        la, lb = RefModel(os.path.join(d, a)).logits(FIXTURE_IDS), RefModel(os.path.join(d, b)).logits(FIXTURE_IDS)
        diff = np.abs(la - lb).max() / np.abs(lb).max()
        ok = diff < 1e-6
        failed += not ok
        print("%-4s %s == %s: %.2e" % ("ok" if ok else "FAIL", a, b, diff))
    return 1 if failed else 0


def perplexity(m, ids):
    lg = m.logits(ids)
    lp = lg - lg.max(axis=1, keepdims=True)
    lp -= np.log(np.exp(lp).sum(axis=1, keepdims=True))
    return float(np.exp(-np.mean([lp[i, ids[i + 1]] for i in range(len(ids) - 1)])))


def real(paths):
    paths = [p for p in paths if os.path.exists(p)]
    if not paths:
        print("SKIP: no real model present")
        return 77
    failed = 0
    for p in paths:
        m = RefModel(p)
        idx = {s: i for i, s in enumerate(m.vocab)}
        sp = "Ġ" if "Ġthe" in idx else "▁"
        bos = [int(m.w.field("tokenizer.ggml.bos_token_id"))] if m.w.field("tokenizer.ggml.add_bos_token", False) else []
        words = SENTENCE.split()
        ids = bos + [idx[w if i == 0 or w in ",." else sp + w] for i, w in enumerate(words)]
        ppl = perplexity(m, ids)
        ok = ppl < 30
        failed += not ok
        print("%-4s %s: perplexity %.2f on %d tokens" % ("ok" if ok else "FAIL", os.path.basename(p), ppl, len(ids)))
        for mut, o in mutations(m, len(ids)):
            mp = with_config(m, o, lambda: perplexity(m, ids))
            ok = mp > ppl
            failed += not ok
            print("%-4s   %-26s perplexity %.2f" % ("ok" if ok else "FAIL", mut, mp))
        prompt = bos + [idx["The"]] + [idx[sp + w] for w in "capital of France is".split()]
        top = list(np.argsort(-m.logits(prompt)[-1])[:3])
        ok = idx[sp + "Paris"] in top
        failed += not ok
        print("%-4s   next after 'The capital of France is': %s" % ("ok" if ok else "FAIL", [m.piece(t) for t in top]))
    return 1 if failed else 0


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "fixtures":
        return fixtures(sys.argv[2])
    if len(sys.argv) >= 3 and sys.argv[1] == "real":
        return real(sys.argv[2:])
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main())
