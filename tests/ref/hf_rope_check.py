#!/usr/bin/env python3
"""Checks kvfold's RoPE scaling against Hugging Face transformers.

    hf_rope_check.py --dump DUMP_LOGITS FIXTURES TMP

Needs PyTorch and transformers (the .venv-hf of scripts/setup-hf.sh; exits
77 = skipped without them) and the gguf package.

Each case takes a tiny fixture (random weights, make_fixture.c) as a
safetensors directory and as the GGUF holding the same weights, and gives it
a RoPE scaling the way each format writes it:
  - config.json: transformers' rope_scaling (linear, llama3, yarn; Gemma 3's
    applies to its global layers, its sliding ones keeping rope_local_base_freq);
  - GGUF: llama.cpp's keys (rope.scaling.type linear or yarn, factor,
    original_context_length, yarn_beta_fast/slow, yarn_attn_factor) or, for
    llama3, the rope_freqs.weight tensor its converter writes (each pair's
    frequency divisor). YaRN without truncation, DeepSeek's mscale pair and
    llama3 without an original context have no GGUF form: the directory alone.
Qwen3's fixture is also compared as it is, without scaling: the family itself
against transformers' Qwen3ForCausalLM, from the directory and the GGUF.
An original context of 64 and 200 positions put most of them past it, where
the scaling matters. transformers' model from the directory gives the
reference logits; kvfold's from the directory and from the GGUF must be
within 1e-4 of max|logit| with the same argmax at every position, while the
same model without the scaling is far from them (> 1e-2: the check can fail).
"""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

SKIP = 77
N_POS = 200
ORIG = 64

# (case, fixture, arch, transformers' rope_scaling, llama.cpp's keys: a dict, FREQS for the rope_freqs.weight
# tensor, or None where no GGUF key says it: the directory alone)
FREQS = "rope_freqs.weight"
CASES = [
    ("llama linear", "llama", "llama", {"rope_type": "linear", "factor": 4.0},
     {"rope.scaling.type": "linear", "rope.scaling.factor": 4.0}),
    ("llama llama3", "llama", "llama",
     {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
      "original_max_position_embeddings": ORIG}, FREQS),
    ("llama yarn", "llama", "llama", {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": ORIG},
     {"rope.scaling.type": "yarn", "rope.scaling.factor": 4.0, "rope.scaling.original_context_length": ORIG}),
    ("qwen2 yarn", "qwen2", "qwen2", {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": ORIG},
     {"rope.scaling.type": "yarn", "rope.scaling.factor": 4.0, "rope.scaling.original_context_length": ORIG}),
    ("gemma3 linear (global layers)", "gemma3", "gemma3", {"rope_type": "linear", "factor": 8.0},
     {"rope.scaling.type": "linear", "rope.scaling.factor": 8.0}),
    ("llama yarn attention_factor, betas", "llama", "llama",
     {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": ORIG, "attention_factor": 0.8,
      "beta_fast": 16.0, "beta_slow": 2.0},
     {"rope.scaling.type": "yarn", "rope.scaling.factor": 4.0, "rope.scaling.original_context_length": ORIG,
      "rope.scaling.yarn_attn_factor": 0.8, "rope.scaling.yarn_beta_fast": 16.0, "rope.scaling.yarn_beta_slow": 2.0}),
    ("qwen2 yarn no truncate, mscale pair", "qwen2", "qwen2",
     {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": ORIG, "truncate": False,
      "mscale": 1.0, "mscale_all_dim": 0.5}, None),
    ("llama llama3 no original context", "llama", "llama",
     {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0}, None),
    # Qwen3 (per-head q/k norms, head_dim apart from hidden / heads): as it is, then with YaRN.
    ("qwen3 without scaling", "qwen3", "qwen3", None, {}),
    ("qwen3 yarn", "qwen3", "qwen3", {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": ORIG},
     {"rope.scaling.type": "yarn", "rope.scaling.factor": 4.0, "rope.scaling.original_context_length": ORIG}),
]


def llama3_factors(cfg, s):
    """rope_freqs.weight as llama.cpp's converter computes it from Llama 3's rope_scaling."""
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    orig = s["original_max_position_embeddings"]
    out = []
    for i in range(0, head_dim, 2):
        wavelen = 2 * math.pi * cfg["rope_theta"] ** (i / head_dim)
        low, high = orig / s["low_freq_factor"], orig / s["high_freq_factor"]
        if wavelen < high:
            out.append(1.0)
        elif wavelen > low:
            out.append(s["factor"])
        else:
            smooth = (orig / wavelen - s["low_freq_factor"]) / (s["high_freq_factor"] - s["low_freq_factor"])
            out.append(1 / ((1 - smooth) / s["factor"] + smooth))
    return np.array(out, np.float32)


def kvfold_logits(dump, model, ids, tmp):
    out = os.path.join(tmp, "logits.bin")
    p = subprocess.run([dump, model, out, *map(str, ids)], capture_output=True, text=True)
    if p.returncode:
        raise AssertionError(f"dump_logits {model}: {p.stderr.strip()}")
    n_vocab = int(p.stdout.split("n_vocab")[1].split()[0])
    return np.fromfile(out, np.float32).reshape(len(ids), n_vocab)


def hf_logits(directory, ids):
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging
    logging.disable_progress_bar()
    model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32).eval()
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].numpy()


def err(a, b):
    return float(np.abs(a - b).max() / np.abs(b).max())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dump", required=True)
    ap.add_argument("fixtures")
    ap.add_argument("tmp")
    args = ap.parse_args()
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
        from gguf_edit import gguf_copy
    except ImportError as e:
        print(f"SKIP: {e} (scripts/setup-hf.sh installs PyTorch and transformers)")
        return SKIP
    os.makedirs(args.tmp, exist_ok=True)
    rng = np.random.default_rng(7)
    ids = [int(x) for x in rng.integers(2, 300, N_POS)]
    bad = 0
    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
        for name, fixture, arch, scaling, keys in CASES:
            st_src = os.path.join(args.fixtures, f"{fixture}-st")
            gguf_src = os.path.join(args.fixtures, f"{fixture}-f32.gguf")
            if not os.path.isdir(st_src) or not os.path.isfile(gguf_src):
                print(f"SKIP: {st_src} or {gguf_src} is absent (the fixtures_make test writes them)")
                return SKIP
            tag = "-".join(name.replace(",", "").replace("(", "").replace(")", "").split())
            st = os.path.join(tmp, tag + "-st")
            shutil.copytree(st_src, st)
            with open(os.path.join(st, "config.json")) as f:
                cfg = json.load(f)
            plain = hf_logits(st, ids)
            gguf_path = os.path.join(tmp, tag + ".gguf")
            if scaling is None:  # the family itself: the fixture as it is
                want, gguf_path = plain, gguf_src
                line = f"{name:36s} as the fixture is"
            else:
                cfg["rope_scaling"] = scaling
                with open(os.path.join(st, "config.json"), "w") as f:
                    json.dump(cfg, f)
                if keys == FREQS:
                    gguf_copy(gguf_src, gguf_path, tensors={FREQS: llama3_factors(cfg, scaling)})
                elif keys:
                    gguf_copy(gguf_src, gguf_path, set_kv={f"{arch}.{k}": v for k, v in keys.items()})
                want = hf_logits(st, ids)
                moved = err(plain, want)
                line = f"{name:36s} scaling moves transformers' logits by {moved:.2e}"
                if moved < 1e-2:
                    bad += 1
                    line += " (too little: the positions do not reach where the scaling matters)"
            for what, model in (("safetensors", st), ("GGUF", gguf_path))[:2 if keys is not None else 1]:
                got = kvfold_logits(args.dump, model, ids, tmp)
                e = err(got, want)
                same = float((got.argmax(1) == want.argmax(1)).mean())
                ok = e < 1e-4 and same == 1.0
                bad += not ok
                line += f"; {what} err {e:.2e} argmax {same:.3f}{'' if ok else ' FAIL'}"
            print(line)
    print("FAIL" if bad else "ok")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
