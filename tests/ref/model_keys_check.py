#!/usr/bin/env python3
"""Nothing in a model file is silently ignored: each key that changes the
arithmetic and that kvfold does not implement, and each tensor its decoder
does not use, planted into a tiny fixture, makes `kvfold info` refuse the
file with a message naming it; the same keys at their neutral values load.

    model_keys_check.py KVFOLD FIXTURES TMP

GGUF files are written with the gguf package (gguf_edit.py), config.json
with json. Exit status 0 = pass, 1 = fail, 77 = skipped (no fixtures or no
gguf package).
"""
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

SKIP = 77
YARN = {"llama.rope.scaling.type": "yarn", "llama.rope.scaling.factor": 4.0,
        "llama.rope.scaling.original_context_length": 64}

# (fixture, keys set, tensors added, the text the refusal must name; None: the file loads)
GGUF_CASES = [
    ("llama", {"llama.attention.logit_softcapping": 50.0}, {}, "llama.attention.logit_softcapping"),
    ("llama", {"llama.final_logit_softcapping": 30.0}, {}, "llama.final_logit_softcapping"),
    ("llama", {"llama.attention.scale": 0.5}, {}, "llama.attention.scale"),
    ("llama", {"llama.embedding_scale": 12.0}, {}, "llama.embedding_scale"),
    ("llama", {"llama.residual_scale": 0.2}, {}, "llama.residual_scale"),
    ("llama", {"llama.logit_scale": 0.3}, {}, "llama.logit_scale"),
    ("llama", {"llama.expert_count": 8}, {}, "llama.expert_count"),
    ("llama", {"llama.attention.causal": False}, {}, "llama.attention.causal"),
    ("llama", {"llama.attention.layer_norm_epsilon": 1e-5}, {}, "llama.attention.layer_norm_epsilon"),
    ("llama", {"llama.rope.scaling.type": "longrope"}, {}, "llama.rope.scaling.type"),
    ("llama", dict(YARN, **{"llama.rope.scaling.attn_factor": 2.0}), {}, "llama.rope.scaling.attn_factor"),
    ("llama", {"llama.rope.scaling.type": "yarn", "llama.rope.scaling.factor": 4.0}, {},
     "llama.rope.scaling.original_context_length"),
    ("llama", {"llama.rope.dimension_count": 8}, {}, "llama.rope.dimension_count"),
    ("llama", {"llama.attention.value_length": 8}, {}, "llama.attention.value_length"),
    ("llama", {"llama.vocab_size": 301}, {}, "llama.vocab_size"),
    ("llama", {}, {"blk.0.ffn_gate_inp.weight": [0.0] * 64}, "blk.0.ffn_gate_inp.weight"),
    ("llama", {}, {"rope_freqs.weight": [1.0] * 7}, "rope_freqs.weight"),
    ("gemma3", {"gemma3.attention.sliding_window_pattern": 4}, {}, "gemma3.attention.sliding_window_pattern"),
    ("gemma3", {"gemma3.rope.freq_base_swa": 5000.0}, {}, "gemma3.rope.freq_base_swa"),
    ("qwen2", {"qwen2.attention.logit_softcapping": 50.0}, {}, "qwen2.attention.logit_softcapping"),
    # neutral values, and a vision tower's tensors in a decoder file: the file loads
    ("llama", {"llama.final_logit_softcapping": 0.0, "llama.attention.causal": True, "llama.vocab_size": 300,
               "llama.rope.scaling.type": "none", "llama.rope.scaling.factor": 1.0, "llama.expert_count": 0,
               "llama.logit_scale": 1.0, "llama.embedding_scale": 0.0},
     {"v.blk.0.attn_q.weight": [0.0] * 4}, None),
    ("llama", dict(YARN, **{"llama.rope.scaling.attn_factor": 1.0}), {}, None),
]

# What `kvfold info` says of the scaling a file carries.
INFO_CASES = [
    ("llama", YARN, {}, "scaling yarn x4"),
    ("llama", {"llama.rope.scaling.factor": 8.0}, {}, "scaling linear x8"),  # no type: linear, as llama.cpp reads it
    ("llama", {}, {"rope_freqs.weight": [1.0, 1.0, 2.0, 4.0, 8.0, 8.0, 8.0, 8.0]}, "scaling rope_freqs"),
    ("gemma3", {"gemma3.rope.scaling.type": "linear", "gemma3.rope.scaling.factor": 8.0}, {},
     "scaling linear x8 (global layers)"),
]

# (fixture, config.json changes, the text the refusal must name; None: loads)
CONFIG_CASES = [
    ("llama", {"final_logit_softcapping": 30.0}, "final_logit_softcapping"),
    ("gemma3", {"attn_logit_softcapping": 50.0}, "attn_logit_softcapping"),
    ("llama", {"partial_rotary_factor": 0.5}, "partial_rotary_factor"),
    ("llama", {"rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}, "dynamic"),
    ("qwen2", {"rope_scaling": {"rope_type": "longrope", "factor": 2.0}}, "longrope"),
    ("llama", {"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, "low_freq_factor"),
    ("llama", {"mlp_bias": True}, "mlp_bias"),
    ("llama", {"hidden_act": "gelu"}, "hidden_act"),
    ("gemma3", {"rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 1e6},
                                    "sliding_attention": {"rope_type": "linear", "factor": 2.0,
                                                          "rope_theta": 1e4}}}, "sliding-window"),
    ("gemma3", {"final_logit_softcapping": None, "attn_logit_softcapping": None}, None),
    ("llama", {"mlp_bias": False, "partial_rotary_factor": 1.0, "rope_scaling": {"rope_type": "default"}}, None),
]


def info(kvfold, path):
    p = subprocess.run([kvfold, "info", "-m", path], capture_output=True, text=True, timeout=120)
    return p.returncode, p.stderr.strip(), p.stdout


def check(what, rc, err, out, want):
    if want is None:
        ok = rc == 0
        print(f"{what:60s} {'loads' if ok else 'FAIL: refused: ' + err}")
    else:
        ok = rc != 0 and want in err and err.startswith("kvfold: error: ") and len(err.splitlines()) == 1
        print(f"{what:60s} {'refused' if ok else f'FAIL: exit {rc}, {err!r} (want it named: {want})'}")
    return not ok


def main():
    if len(sys.argv) != 4:
        print(__doc__)
        return 2
    kvfold, fixtures, tmp = sys.argv[1:]
    try:
        from gguf_edit import gguf_copy
    except ImportError as e:
        print(f"SKIP: {e}")
        return SKIP
    for fam in ("llama", "qwen2", "gemma3"):
        if not os.path.isfile(os.path.join(fixtures, f"{fam}-f32.gguf")):
            print(f"SKIP: the {fam} fixtures are absent (the fixtures_make test writes them)")
            return SKIP
    os.makedirs(tmp, exist_ok=True)
    bad = 0
    for i, (fam, keys, tensors, want) in enumerate(GGUF_CASES):
        path = os.path.join(tmp, f"planted-{i}.gguf")
        gguf_copy(os.path.join(fixtures, f"{fam}-f32.gguf"), path, set_kv=keys, tensors=tensors)
        bad += check(f"{fam} GGUF + {', '.join(list(keys) + list(tensors))}", *info(kvfold, path), want)
    for i, (fam, change, want) in enumerate(CONFIG_CASES):
        path = os.path.join(tmp, f"planted-{i}-st")
        shutil.rmtree(path, ignore_errors=True)
        shutil.copytree(os.path.join(fixtures, f"{fam}-st"), path)
        with open(os.path.join(path, "config.json")) as f:
            cfg = json.load(f)
        cfg.update(change)
        with open(os.path.join(path, "config.json"), "w") as f:
            json.dump(cfg, f)
        bad += check(f"{fam} config.json + {', '.join(change)}", *info(kvfold, path), want)
    for i, (fam, keys, tensors, want) in enumerate(INFO_CASES):
        path = os.path.join(tmp, f"scaled-{i}.gguf")
        gguf_copy(os.path.join(fixtures, f"{fam}-f32.gguf"), path, set_kv=keys, tensors=tensors)
        rc, err, out = info(kvfold, path)
        ok = rc == 0 and want in out
        print(f"{fam} GGUF + {', '.join(list(keys) + list(tensors)):50s} {want if ok else 'FAIL: ' + err + out}")
        bad += not ok
    print("FAIL" if bad else "ok")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
