#!/usr/bin/env python3
"""kvfold's rules against NVIDIA kvpress's presses, on one model and prompt.

    kvpress_check.py KVFOLD FIXTURES TMP

Runs in .venv-kvpress (scripts/setup-kvpress.sh: kvpress 0.5.5 from PyPI,
transformers 5.2); exits 77 (skipped) without kvpress.

The tiny random Qwen2 fixture (FIXTURES/qwen2-st, a safetensors directory;
copied with its tokenizer's BOS turned off, as a chat model's context has
none) runs a 154-token prompt in transformers (sdpa attention) under each
press below, and in kvfold (`generate --kv SPEC --dump-kv`) under the rule
that is meant to be the same. The entries each (layer, kv head) keeps must
be the same sets. A press that evicts (ScorerPress) leaves the kept keys in
the cache, found in the full cache's keys; AdaKV and KVzip mask, and their
modules' masked_key_indices give the evicted ones. Both engines compute in
float32, in different orders, so entries whose kvpress scores lie within
TOL x the head's largest |score| of the cut may swap: such swaps are
accepted and counted (the scores are read from the presses' own score
calls); anything else fails.

Budgets are counts here, kvpress's int(n x (1 - ratio)) (KVzip's global
count: L x H x n - int(L x H x n x ratio), equal to it at ratio 0.5).
KVzip runs one chunk: over several, kvpress softmaxes a pass's scores over
the sinks, its chunk and itself, kvfold over the whole cache (METHODS §4.19).
"""
import json
import os
import shutil
import subprocess
import sys

SKIP = 77
TOL = 1e-4
PROMPT = ("A small model reads a long prompt about rivers, mountains and the people who live near them; "
          "then it must answer one short question about the weather in the valley before the night falls "
          "again, and the cold wind comes down from the hills.")


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, OMP_WAIT_POLICY="PASSIVE"))
    if r.returncode:
        sys.exit("kvpress_check: %s failed (%d):\n%s" % (" ".join(cmd), r.returncode, r.stderr))
    return r.stdout


def kvfold_kept(kvfold, model, spec, tmp):
    path = os.path.join(tmp, "kv.json")
    run([kvfold, "generate", "-m", model, "-p", PROMPT, "-n", "1", "--kv", spec, "--dump-kv", path, "-t", "1",
         "--kv-type", "f32"])
    with open(path) as fh:
        return [[sorted(h) for h in layer] for layer in json.load(fh)["compressed"]]


def cases(n, kp):
    """(name, press factory, kvfold spec, allocation: head, layer or model,
    whether they must match: the pairs that must not show that the
    comparison can fail)."""
    r = 0.7
    k = max(1, int(n * (1 - r)))  # kvpress's compute_n_kept
    return [
        ("knorm", lambda: kp.KnormPress(r), "knorm:budget=%d" % k, "head", True),
        ("keydiff", lambda: kp.KeyDiffPress(r), "keydiff:budget=%d" % k, "head", True),
        ("streaming", lambda: kp.StreamingLLMPress(r, n_sink=4), "streaming:budget=%d,sinks=4" % k, "head", True),
        ("snapkv", lambda: kp.SnapKVPress(r, window_size=16, kernel_size=5),
         "snapkv:budget=%d,window=16,kernel=5" % k, "head", True),
        ("adakv(snapkv)", lambda: kp.AdaKVPress(kp.SnapKVPress(r, window_size=16, kernel_size=5), alpha_safeguard=0.2),
         "snapkv:budget=%d,window=16,kernel=5+budget=adaptive:floor=0.2" % k, "layer", True),
        ("tova", lambda: kp.TOVAPress(r), "tova:budget=%d" % k, "head", True),
        ("expected", lambda: kp.ExpectedAttentionPress(r), "expected:budget=%d" % k, "head", True),
        ("expected future 32", lambda: kp.ExpectedAttentionPress(r, n_future_positions=32),
         "expected:budget=%d,future=32" % k, "head", True),
        ("kvzip", lambda: kp.KVzipPress(0.5), "kvzip:budget=%d" % (n // 2), "model", True),
        # layerwise: each layer the same share, its heads ranked together (Ada-KV without a floor)
        ("kvzip layerwise", lambda: kp.KVzipPress(0.5, layerwise=True),
         "kvzip:budget=%d+budget=adaptive:floor=0" % (n // 2), "layer", True),
        ("knorm as keydiff", lambda: kp.KnormPress(r), "keydiff:budget=%d" % k, "head", False),
        ("snapkv window 32", lambda: kp.SnapKVPress(r, window_size=16, kernel_size=5),
         "snapkv:budget=%d,window=32,kernel=5" % k, "head", False),
        ("expected future 512", lambda: kp.ExpectedAttentionPress(r, n_future_positions=32),
         "expected:budget=%d" % k, "head", False),
        ("expected no covariance", lambda: kp.ExpectedAttentionPress(r, use_covariance=False),
         "expected:budget=%d" % k, "head", False),
        ("kvzip uniform", lambda: kp.KVzipPress(0.5), "kvzip:budget=%d+budget=uniform" % (n // 2), "model", False),
    ]


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    kvfold, fixtures, tmp = sys.argv[1:]
    try:
        import torch
        import kvpress as kp
        from transformers import AutoModelForCausalLM, DynamicCache
        from transformers.utils import logging
    except ImportError as e:
        print("SKIP: %s (scripts/setup-kvpress.sh installs kvpress)" % e)
        return SKIP
    logging.disable_progress_bar()
    logging.set_verbosity_error()
    src = os.path.join(fixtures, "qwen2-st")
    if not os.path.isdir(src):
        print("SKIP: %s is absent (the fixtures_make test writes it)" % src)
        return SKIP
    os.makedirs(tmp, exist_ok=True)
    model_dir = os.path.join(tmp, "qwen2-st-nobos")
    shutil.rmtree(model_dir, ignore_errors=True)
    shutil.copytree(src, model_dir)
    tc = os.path.join(model_dir, "tokenizer_config.json")
    with open(tc) as fh:
        cfg = json.load(fh)
    cfg["add_bos_token"] = False
    with open(tc, "w") as fh:
        json.dump(cfg, fh)
    out = run([kvfold, "generate", "-m", model_dir, "-p", PROMPT, "-n", "1", "--dump-tags", "-t", "1"])
    ids = [int(f[5]) for f in (line.split() for line in out.splitlines()) if len(f) > 5 and f[1] == "text"]
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="sdpa").eval()
    L, H = model.config.num_hidden_layers, model.config.num_key_value_heads
    x = torch.tensor([ids])
    with torch.no_grad():
        full_cache = DynamicCache()
        model(input_ids=x, past_key_values=full_cache)
    full = [full_cache.layers[l].keys[0] for l in range(L)]  # [H][n][d]
    n = len(ids)
    print("qwen2-st (BOS off): %d layers, %d kv heads, prompt %d tokens" % (L, H, n))

    bad, near, swapped = [], 0, 0
    for name, make, spec, alloc, same in cases(n, kp):
        press = make()
        scores = {}
        inner = press.press if isinstance(press, kp.AdaKVPress) else press
        if isinstance(inner, kp.ScorerPress):
            own = inner.score

            def record(module, *args, _own=own, **kw):
                s = _own(module, *args, **kw)
                scores[module.layer_idx] = s[0].detach().clone()
                return s
            inner.score = record
        else:  # KVzip: its scores of every layer, before the final selection
            post = press.compress_post

            def keep_scores(model_, _post=post, _press=press):
                for l in range(L):
                    scores[l] = _press.score_val[l][0].detach().clone()
                return _post(model_)
            press.compress_post = keep_scores
        for layer in model.model.layers:
            layer.self_attn.masked_key_indices = None
        cache = DynamicCache()
        with torch.no_grad(), press(model):
            model(input_ids=x, past_key_values=cache)
        want = []
        for l in range(L):
            attn = model.model.layers[l].self_attn
            masked = getattr(attn, "masked_key_indices", None)
            heads = []
            for g in range(H):
                if masked is not None:
                    gone = set(masked[2][masked[1] == g].tolist())
                    heads.append(sorted(set(range(n)) - gone))
                else:
                    k = cache.layers[l].keys[0, g]
                    eq = (k[:, None, :] == full[l][g][None, :, :]).all(-1)
                    heads.append(sorted(eq.float().argmax(1).tolist()))
            want.append(heads)
        got = kvfold_kept(kvfold, model_dir, spec, tmp)
        # The cut: the head's (adaptive: the layer's, kvzip: the model's) last kept score.
        cut = {}
        for l in range(L):
            for g in range(H):
                s = scores[l][g].double()
                fin = torch.isfinite(s) & (s < torch.finfo(torch.float32).max / 2)
                pool = {"head": [(l, g)], "layer": [(l, h) for h in range(H)],
                        "model": [(m, h) for m in range(L) for h in range(H)]}[alloc]
                kept = torch.cat([scores[a][b].double()[want[a][b]] for a, b in pool])
                kept = kept[torch.isfinite(kept) & (kept < torch.finfo(torch.float32).max / 2)]
                cut[l, g] = (kept.min().item() if len(kept) else float("inf"), s[fin].abs().max().item())
        total_got = sum(len(h) for layer in got for h in layer)
        total_want = sum(len(h) for layer in want for h in layer)
        msgs, case_near, case_swapped = [], 0, 0
        if total_got != total_want:
            msgs.append("kvfold keeps %d entries in all, kvpress %d" % (total_got, total_want))
        for l in range(L):
            for g in range(H):
                a, b = set(got[l][g]), set(want[l][g])
                if a == b:
                    continue
                s, (c, scale) = scores[l][g].double(), cut[l, g]
                t = TOL * scale
                only_f, only_p = sorted(a - b), sorted(b - a)
                ok = all(abs(s[j].item() - c) <= t for j in only_f + only_p)
                if alloc == "head":
                    ok &= len(a) == len(b)
                if ok:
                    case_near += 1
                    case_swapped += len(only_f)
                else:
                    msgs.append("layer %d head %d: kvfold only %s (kvpress scores %s), kvpress only %s (%s); cut %.7g"
                                % (l, g, only_f, [round(s[j].item(), 7) for j in only_f], only_p,
                                   [round(s[j].item(), 7) for j in only_p], c))
        if not same:
            print("  %-24s %-58s %s" % (name, spec, "differs: ok" if msgs else "FAIL: the comparison cannot tell"))
            if not msgs:
                bad.append("%s (%s): matches, but the rules differ" % (name, spec))
            continue
        near, swapped = near + case_near, swapped + case_swapped
        print("  %-24s %-58s %s" % (name, spec, "FAIL" if msgs else "ok"))
        if msgs:
            bad.append("%s (%s):\n      %s" % (name, spec, "\n      ".join(msgs[:4])))
    print("%d head(s) matched up to float32 near-ties at the cut (%d entries swapped, within %g of the scale)"
          % (near, swapped, TOL))
    if bad:
        print("FAIL:\n  " + "\n  ".join(bad))
        return 1
    print("OK: every press keeps what kvfold's rule keeps")
    return 0


if __name__ == "__main__":
    sys.exit(main())
