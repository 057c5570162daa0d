#!/usr/bin/env python3
"""Brute-force reference for the entries kvfold's KV cache policies keep.

    ref_kv.py KVFOLD FIXTURE_DIR [-v]

For each tiny fixture (llama, qwen2 and gemma3 f32 GGUF: 4 query heads on 2
kv heads; gemma3 also has layers with a sliding window of 4) a prompt of
155 tokens runs through

    kvfold generate -m FIXTURE -p TEXT -n 1 --kv SPEC --dump-kv FILE -t 1

and the positions each (layer, kv head) holds right after compression
("compressed") are compared with the set that the method's rule picks from
the full attention matrices and post-RoPE keys of ref_model.RefModel (numpy
float64). The rules are written from docs/METHODS.md (sections 1 and 4)
and the comments of src/kv/policy/*.c: budget (ratio: floor(budget N +
0.5), count: min(count, N)), selection (higher score kept first, ties: the
earlier entry; entries that are always kept count even past the budget), GQA
(a kv head's score is the mean over the query heads that share it), and each
method's score. Where the two differed, the documented rule decided: RoCo
never evicts the sinks (docs/METHODS.md §4.6; this test found roco.c
protecting only the last 10 entries and the largest deviations; fixed).
imgrand runs on a pseudo-image prompt (llama), whose image positions follow
from the token counts of the text around the marker.

The merging and per-layer methods (docs/METHODS.md §4.10-4.12 and §5.4,
src/kv/policy/lookm.c, merge.c, prefixkv.c):
  lookm     H2O's score per kv head; the recent share of the budget is kept,
            then text_prior=1 keeps text before images within the budget
            (when the text alone exceeds what is left, text competes by score
            and images go; text_prior=all keeps every text entry past the
            budget, as the released code); `important` is the other
            share (alone: recent = 1 - important; both: recent / (recent +
            important)). Every evicted entry is merged into the kept entry
            whose post-RoPE key is most similar (cosine; ties: the earlier):
            the dump's "merged" pairs are checked against that assignment
            (near-ties in cosine within CTOL accepted and counted). Runs on
            text prompts (text_prior=0) and on a pseudo-image prompt (llama),
            whose image rows are the token embeddings of the words file.
  elastic   one kept set per layer from the layer score (attention sums
            averaged over the layer's kv heads), the first `sinks` and the
            last entry kept; evicted entries merge into the kept entry nearest
            in position (ties: the earlier).
  prefixkv  the same selection with per-layer budgets from PrefixKV's binary
            search on the layers' cumulative priority curves, scaled to L x
            keep exactly by largest remainders; generate --json's
            kv.layer_budgets (ratio, Gini) are checked against it too.
  csp       Cross-Self Pruning (src/kv/policy/csp.c, src/session.c
            window_attention): the last `recent` entries kept; the last
            `window` prompt queries (0: `recent` of them) observe; each
            observing row is weighted by its n-softmax factor Z / (Z + n),
            Z = sum_k exp(x_k) (the logits come from RefModel's roped queries,
            checked against its probabilities), averaged over the kv head's
            query heads and summed into S_self (entries of the query's
            modality) and S_cross (the other). Before the recent window: the
            top k_cross = floor(k cross_ratio + 0.5) by S_cross, the top
            k - k_cross by S_self, their union refilled to k = keep - recent
            by S_self + S_cross. On text S_cross is 0, so the cross list takes
            the first entries. A float32 near-tie may swap entries at the cut
            of any of the three rankings: combinations of those are accepted.
            decode_softmax=1 must compress the prompt as decode_softmax=0.
  expected  Expected Attention (src/kv/policy/expected.c): per query head,
            the mean and covariance (over n) of its queries before RoPE
            (RefModel.rope's input) past the sinks, rotated by the mean of
            RoPE's matrices over the next `future` positions (RefModel.rope
            of the identity); logits s mu.k + s^2/2 k^T S k over the entries
            past the sinks, softmaxed, averaged over the group, times |v|.
  tova      TOVA (src/kv/policy/tova.c): the prompt's last query's
            attention, averaged over every query head of the layer; the last
            entry kept.
  kvzip     KVzip (src/kv/policy/kvzip.c, its pass run by
            src/session/session.c): the prompt, then per chunk of its text
            (BOS left out) the instruction, "\n" (the fixtures have no chat
            template) and the chunk run through RefModel as one sequence; an
            entry's score is the largest attention any query after the
            prompt pays it in any query head of its kv head, over the
            chunks. Its budget stage is global: every head of every layer
            ranked as one list (ties: lower layer, lower head, earlier
            entry); a float32 near-tie at the model's cut may move an entry
            between heads, accepted as under budget=adaptive.

C computes in float32, the reference in float64, so entries whose reference
scores differ by less than TOL x (the head's largest |score|) may swap at the
cut; such swaps are accepted and counted. Everything else must match, and
every head must hold exactly the rule's count. Exact ties (the zeros that a
sliding window leaves in SnapKV's scores on gemma3) are exact in float32 too,
so there the earlier entry must win.

The script also checks that each non-default key it passes changes the
reference's choice (so the comparison proves the key is honoured; for the
WEAK_KEYS: in some case on some prompt, by more than a near-tie), and that
deliberately wrong rules (no pooling, no GQA mean, reversed ties, ...) do
NOT match kvfold, so the comparison can fail.
"""
import argparse
import copy
import itertools
import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ref_model import RefModel  # noqa: E402

TOL = 1e-4
CTOL = 1e-4    # cosine near-ties (merge assignment), absolute
GTOL = 1e-6    # Gini coefficients of the layers' priority curves, absolute
PTOL = 1e-6    # PrefixKV's search: a cumulative share this close to the threshold may flip in float32
PREFIX_TOL, PREFIX_ITERS = 5, 64  # src/session.c prefix_search, src/kv/policy/prefixkv.c
M64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
ROCO_LAST = 10  # RoCo protects the last 10 entries (EasyKV)

FIXTURES = ("llama-f32.gguf", "qwen2-f32.gguf", "gemma3-f32.gguf")
PROMPT = ("A small model reads a long prompt about rivers, mountains and the people who live near them; "
          "then it must answer one short question about the weather in the valley before the night falls "
          "again, and the cold wind comes down from the hills.")
IMAGE_PREFIX, IMAGE_SUFFIX, IMAGE_GRID = "Describe what you see in ", " in a few words, please.", (8, 8)
IMAGE_WORDS = "apple river stone cloud green light window mountain"

# Preset defaults (src/kv/policy.c; every preset starts from sinks 4, beta 20).
BASE = dict(budget=0.2, sinks=4, recent=0.0, window=0, kernel=0, seed=0, alloc="uniform", beta=20,
            important=0.0, merge="none", text_prior=0, online=1, pool=0, width=5, floor=0.2)
PRESETS = {
    "full": dict(budget=1.0),
    "streaming": dict(),
    "h2o": dict(recent=0.5),
    "snapkv": dict(window=32, kernel=5),
    "pyramidkv": dict(window=32, kernel=5, alloc="pyramid"),
    "roco": dict(recent=0.3),
    "keydiff": dict(),
    "knorm": dict(),
    "random": dict(seed=1),
    "imgrand": dict(seed=1),
    "lookm": dict(recent=0.5, merge="pivotal", text_prior=1),
    "elastic": dict(merge="position", protect=32),
    "prefixkv": dict(alloc="prefix", protect=32),
    "csp": dict(recent=0.5, cross_ratio=0.5, n=1.0, decode_softmax=0),
    "expected": dict(future=512),
    "kvzip": dict(chunk=2048, alloc="global"),
    "tova": dict(window=1),
}
INT_KEYS = ("sinks", "window", "kernel", "seed", "beta", "text_prior", "online", "decode_softmax", "protect",
            "future", "chunk")
# KVzip's reconstruction prompt (src/kv/policy/kvzip.c, kvzip_run); the
# fixtures have no chat template, so the turn to the assistant is "\n".
RECON_FIRST = "\n\nRepeat the previous context exactly."
RECON_NEXT = "\n\nRepeat the part of the previous context exactly, starting with"
RECON_TURN = "\n"
RECON_OVERLAP = 8
# Keys whose effect is small on these fixtures: CSP's n reweights a window
# row by Z / (Z + n), Z = sum_k exp(x_k) ~ 100 here, so n=0 and n=4 move
# the scores by a few 1e-3 and change a choice only in some prompts. Each
# value used must change the choice by more than a float32 near-tie in at
# least one case on one prompt (not in every case).
WEAK_KEYS = ("n",)
# Keys that change only decoding: the compressed prompt must be the one
# without them (checked against that run's dump, not by the reference).
DECODE_ONLY = ("decode_softmax",)
# Merge modes that share the cosine assignment (they differ only in the
# arithmetic of the merged rows, which the dump does not show; that is
# test_rule_merge).
COSINE = ("avg", "pivotal", "weighted")
# Rules whose scores C computes exactly (integers, or the splitmix64 stream):
# no tolerance.
EXACT = ("streaming", "random", "imgrand")


def parse_spec(spec):
    """"preset:k=v,...[+budget=pyramid:beta=N]" -> policy dict."""
    head, *stages = spec.split("+")
    name, _, args = head.partition(":")
    p = dict(BASE, method=name, **PRESETS[name])
    given = set()
    for kv in filter(None, args.split(",")):
        k, v = kv.split("=")
        p[k] = 2 if (k, v) == ("text_prior", "all") else int(v) if k in INT_KEYS else v if k == "merge" else float(v)
        given.add(k)
    for st in stages:
        what, _, args = st.partition(":")
        if what == "pool=avg":
            p["pool"] = 1
        elif what == "budget=pyramid":
            p["alloc"] = "pyramid"
        elif what == "budget=adaptive":
            p["alloc"] = "adaptive"
        elif what in ("budget=global", "budget=uniform"):
            p["alloc"] = what[7:]
        else:
            raise ValueError("ref_kv: stage %r not modelled" % st)
        for kv in filter(None, args.split(",")):
            k, v = kv.split("=")
            p[k] = float(v) if k == "floor" else int(v)
    # LOOK-M's recent and important shares of the budget: one gives the other
    # (docs/METHODS.md §1.1 and §4.10: recent 0.1N + important 0.1N), whether
    # or not the budget is given too. recent_only: the recent share as if
    # `important` were not there (a wrong rule's).
    p["recent_only"] = p["recent"]
    if "important" in given:
        p["recent"] = p["recent"] / (p["recent"] + p["important"]) if "recent" in given else 1.0 - p["important"]
    return p


def pool(s, width):
    """The pool stage (docs/METHODS.md §5.8): every finite score becomes the
    sum of the finite scores within width // 2 entries, over width (zero
    padding); infinite scores stay and count 0 for their neighbours."""
    fin = np.where(np.isfinite(s), s, 0.0)
    half = width // 2
    out = np.convolve(fin, np.ones(width))[half: half + len(s)] / width
    return np.where(np.isfinite(s), out, s)


def spec_keys(spec):
    """The keys a spec sets explicitly."""
    return [kv.split("=")[0] for part in spec.split("+") for kv in part.partition(":")[2].split(",") if kv]


def spec_without(spec, key):
    """The spec with `key` left to its default."""
    parts = []
    for part in spec.split("+"):
        head, _, args = part.partition(":")
        args = ",".join(kv for kv in args.split(",") if kv and kv.split("=")[0] != key)
        parts.append(head + (":" + args if args else ""))
    return "+".join(parts)


# ---------------------------------------------------------------- the rules --

def keep_count(p, n, wrong=None):
    if p["method"] == "full":
        return n
    b = p["budget"]
    if b <= 1.0:
        k = math.floor(b * n) if wrong == "budget-floor" else math.floor(b * n + 0.5)
    else:
        k = b
    return n if k >= n else int(k)


def pyramid_keep(p, n, keep, layer, n_layer):
    w = min(p["window"], keep)
    cw = keep - w
    if n_layer < 2 or cw <= 0 or n < 2 * cw:
        return keep
    lo = cw // p["beta"]
    hi = 2 * cw - lo
    step = (hi - lo) // (n_layer - 1)
    return min(hi - layer * step + w, n)


def layer_keep(p, n, layer, n_layer, wrong=None):
    keep = keep_count(p, n, wrong)
    if p["alloc"] != "pyramid":
        return keep
    if wrong == "pyramid-reversed":
        layer = n_layer - 1 - layer
    return pyramid_keep(p, n, keep, layer, n_layer)


def prefix_budgets(imp, total, floor=1, noscale=False):
    """PrefixKV's layer budgets (docs/METHODS.md §5.2.3, PrefixKV's Algorithm
    1, src/kv/policy/prefixkv.c): imp [L][n] importance (>= 0). Each layer's priority curve is
    the cumulative share of its importance in its k most important entries;
    binary search for the threshold p in [0, 1] at which the shortest
    prefixes reaching p add up to `total` within PREFIX_TOL entries (or the
    iterations run out), then scale to `total` exactly: floor of the scaled
    size in [floor, n], the rest by largest remainder (ties: the lower
    layer).
    -> dict(keep, gini, margin: how close a cumulative share came to a
    threshold the search compared it with)."""
    n_layer, n = imp.shape
    cum, gini = [], []
    for l in range(n_layer):
        c = np.sort(np.maximum(imp[l], 0.0))[::-1]
        tot = c.sum()
        c = np.cumsum(c) / tot if tot > 0 else np.arange(1, n + 1) / n
        c[-1] = 1.0
        cum.append(c)
        # Gini: twice the area between the curve and the diagonal (trapezoids).
        gini.append(2.0 * ((np.concatenate(([0.0], c[:-1])) + c) / 2.0).sum() / n - 1.0)
    lo, hi, margin = 0.0, 1.0, np.inf
    for _ in range(PREFIX_ITERS):
        p = (lo + hi) / 2.0
        keep = []
        for c in cum:
            k = min(int(np.searchsorted(c, p, side="left")) + 1, n)  # smallest k with c[k-1] >= p
            keep.append(k)
            margin = min(margin, abs(c[k - 1] - p), abs(c[k - 2] - p) if k >= 2 else np.inf)
        got = sum(keep)
        if abs(got - total) < PREFIX_TOL:
            break
        lo, hi = (p, hi) if got < total else (lo, p)
    if not noscale:
        x = [k * total / got for k in keep]
        keep = [min(n, max(floor, math.floor(v))) for v in x]
        rem = [v - k for v, k in zip(x, keep)]
        have = sum(keep)
        while have != total:
            up = have < total
            room = [l for l in range(n_layer) if (keep[l] < n if up else keep[l] > floor)]
            best = max(room, key=lambda l: (rem[l], -l)) if up else min(room, key=lambda l: (rem[l], l))
            keep[best] += 1 if up else -1
            rem[best] += -1.0 if up else 1.0
            have += 1 if up else -1
    return dict(keep=keep, gini=gini, margin=margin)


def splitmix64(state, count):
    out = []
    for _ in range(count):
        state = (state + GOLDEN) & M64
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        out.append(z ^ (z >> 31))
    return out


def select(score, keep, wrong=None):
    """Indices kept: `keep` best (higher first, ties: earlier entry), and
    every +inf entry even past `keep`."""
    n = len(score)
    keep = max(keep, int((score == np.inf).sum()))
    if keep >= n:
        return list(range(n))
    idx = np.arange(n)
    order = np.lexsort((-idx if wrong == "tie-later" else idx, -score))
    return sorted(order[:keep].tolist())


def top(s, cand, take, later=False):
    """The `take` best of the entries cand by s (higher first, ties: the
    earlier entry; `later`: the later)."""
    cand = np.asarray(cand, dtype=int)
    return cand[np.lexsort((-cand if later else cand, -s[cand]))][: max(take, 0)]


def top_options(s, cand, take, tol, later=False, cap=64):
    """The sets float32 may take for top(s, cand, take): the exact one first,
    then those that swap entries within tol x max |s[cand]| of the cut
    (entries of exactly equal score still go by the tie rule); at most cap."""
    exact = top(s, cand, take, later)
    if take <= 0 or take >= len(cand):
        return [frozenset(exact.tolist())]
    cut, t = s[exact[-1]], tol * (np.abs(s[cand]).max() or 1.0)
    sure = [int(e) for e in cand if s[e] > cut + t]
    groups = {}
    for e in (reversed(cand) if later else cand):
        if abs(s[e] - cut) <= t:
            groups.setdefault(s[e], []).append(int(e))
    groups = list(groups.values())

    def fill(gi, need):
        if gi == len(groups):
            if need == 0:
                yield []
            return
        for c in range(min(need, len(groups[gi])), -1, -1):
            for rest in fill(gi + 1, need - c):
                yield groups[gi][:c] + rest

    out = [frozenset(exact.tolist())]
    for amb in itertools.islice(fill(0, take - len(sure)), cap):
        o = frozenset(sure + amb)
        if o not in out:
            out.append(o)
    return out


class Stats:
    """What the rules read, from the full float64 attention of one prompt."""

    def __init__(self, model, ids):
        c = model.c
        # CSP's n-softmax needs each row's normaliser sum_k exp(x_k), which
        # the probabilities do not keep: the post-RoPE queries come from
        # RefModel.rope (attention ropes q, then k, per layer) and the logits
        # are checked against the recorded probabilities below.
        ropes, rope, unroped = [], model.rope, []

        def keep_rope(x, pos, base):
            unroped.append(x)
            ropes.append(rope(x, pos, base))
            return ropes[-1]

        model.record, model.rope = [], keep_rope
        try:
            model.hidden(ids)
        finally:
            del model.rope
        rec, model.record = model.record, None
        if len(ropes) != 2 * len(rec):
            sys.exit("ref_kv: RefModel.rope ran %d times for %d layers, not twice a layer" % (len(ropes), len(rec)))
        self.model, self.ids, self.recon = model, list(ids), {}
        self.n, self.n_layer = len(ids), c["n_layer"]
        self.n_head, self.n_head_kv = c["n_head"], c["n_head_kv"]
        group = self.n_head // self.n_head_kv
        n = self.n
        i, j = np.arange(n)[:, None], np.arange(n)[None, :]
        self.layers = []
        for il, r in enumerate(rec):
            assert r["layer"] == il
            vis = j <= i
            if model.is_local(il):
                vis &= (i - j) < c["sliding_window"]
            a = r["attn"].reshape(self.n_head_kv, group, n, n)  # query head h -> kv head h // group
            q, k = ropes[2 * il], ropes[2 * il + 1]
            if not np.array_equal(k, r["k"]):
                sys.exit("ref_kv: layer %d: the second rope of the layer is not its recorded keys" % il)
            scale = c["attn_scale"] if c["arch"] == "gemma3" else 1.0 / math.sqrt(c["head_dim"])
            x = np.einsum("ihd,jhd->hij", q, np.repeat(k, group, axis=1)) * scale
            x = np.where(vis, x, -np.inf)
            mx = x.max(axis=2, keepdims=True)
            lz = mx[..., 0] + np.log(np.exp(x - mx).sum(axis=2))  # log sum_k exp(x_k), [query head][query]
            err = np.abs(np.exp(x - lz[..., None]) - r["attn"]).max()
            if err > 1e-9:
                sys.exit("ref_kv: layer %d: logits from the roped queries miss the recorded attention by %.3g"
                         % (il, err))
            self.layers.append(dict(
                a=a,                                   # [kv head][query head of it][query][key]
                mean=a.mean(axis=1),                   # GQA: mean over the group
                sum=a.mean(axis=1).sum(axis=1),        # sum over every prompt query
                sq=(a * a).mean(axis=1).sum(axis=1),   # sum of squares
                count=vis.sum(axis=0).astype(np.float64),  # queries that saw each entry
                lz=lz.reshape(self.n_head_kv, group, n),  # log of each row's sum_k exp(x_k)
                k=r["k"],                              # [pos][kv head][head_dim], post-RoPE
                v=r["v"],                              # [pos][kv head][head_dim]
                qpre=unroped[2 * il],                  # [pos][query head][head_dim], before RoPE
                scale=scale,
            ))
        self.rbar = {}

    def avg_rope(self, l, first, count):
        """The mean of RoPE's rotation matrices over positions first ..
        first + count - 1 in layer l: R with R @ x = mean_t rope(x, t)."""
        key = (l, first, count)
        if key not in self.rbar:
            m, d = self.model, self.model.c["head_dim"]
            base = m.c["rope_base_local"] if m.c["arch"] == "gemma3" and m.is_local(l) else m.c["rope_base"]
            basis = np.broadcast_to(np.eye(d), (count, d, d)).copy()  # [t][i] = e_i
            cols = m.rope(basis, np.arange(first, first + count, dtype=np.float64), base)  # [t][i] = R_t e_i
            self.rbar[key] = cols.mean(axis=0).T
        return self.rbar[key]

    def recon_max(self, chunk, first, nxt, turn, text, reduce="max"):
        """KVzip: for each layer [kv head][entry], the most attention any
        query of a reconstruction pass, in any query head of the kv head,
        pays each prompt entry. Pass i runs after the prompt: the
        instruction (first, or nxt and the previous chunk's last
        RECON_OVERLAP tokens), the turn and chunk i of `text`."""
        if (chunk, reduce) not in self.recon:
            n, H, group = self.n, self.n_head_kv, self.n_head // self.n_head_kv
            out = [np.zeros((H, n)) for _ in range(self.n_layer)]
            for a in range(0, len(text), chunk):
                ins = first if a == 0 else nxt + text[max(0, a - RECON_OVERLAP): a]
                self.model.record = []
                try:
                    self.model.hidden(self.ids + ins + turn + text[a: a + chunk])
                finally:
                    rec, self.model.record = self.model.record, None
                for l, r in enumerate(rec):
                    a_ = r["attn"][:, n:, :n].reshape(H, group, -1, n)  # the pass's queries on the prompt
                    per_q = a_.max(axis=1) if reduce == "max" else a_.mean(axis=1)  # over the group
                    out[l] = np.maximum(out[l], per_q.max(axis=1))
            self.recon[chunk, reduce] = out
        return self.recon[chunk, reduce]


class Ref:
    """The reference rules; `wrong` names one deliberately broken variant."""

    def __init__(self, stats, image=None, wrong=None):
        self.st, self.image, self.wrong = stats, image, wrong
        self.budgets = {}  # PrefixKV's layer budgets by budget

    def target(self, p, l):
        if p["alloc"] == "prefix" and self.wrong != "prefix-uniform":
            return self.prefix(p)["keep"][l]
        return layer_keep(p, self.st.n, l, self.st.n_layer, self.wrong)

    def prefix(self, p):
        """PrefixKV online: the layer budgets searched on the prompt's layer
        importance (no protected entries in the search); no layer below what
        the rule always keeps (the sinks and the protected tail, within the
        even share; METHODS.md §5.2.3)."""
        even = keep_count(p, self.st.n)
        key = self.prefix_key(p)
        if key not in self.budgets:
            imp = np.array([self.st.layers[l]["sum"][0] if self.wrong == "layer-head0"
                            else self.st.layers[l]["sum"].mean(axis=0) for l in range(self.st.n_layer)])
            self.budgets[key] = prefix_budgets(imp, self.st.n_layer * even, key[1], self.wrong == "prefix-noscale")
        return self.budgets[key]

    def prefix_key(self, p):
        """(budget, floor) of a PrefixKV search."""
        even = keep_count(p, self.st.n)
        return p["budget"], 1 if self.wrong == "prefix-nofloor" else max(1, min(even, p["sinks"] + p["protect"]))

    def layer_score(self, l, g):
        """Elastic Cache's and PrefixKV's importance: the attention sums
        averaged over the layer's kv heads (one set per layer)."""
        L = self.st.layers[l]
        if self.wrong == "layer-head0":
            return L["sum"][0].copy()
        if self.wrong == "layer-perhead":
            return L["sum"][g].copy()
        return L["sum"].mean(axis=0)

    def merges(self, p, l, g, kept):
        """The merge stage for the kept positions `kept` of head (l, g):
        {evicted position: (the kept position it goes to, the set of kept
        positions within CTOL of the best cosine)}; {} without merging."""
        n, w = self.st.n, self.wrong
        if p["merge"] == "none" or len(kept) == n:
            return {}
        kept = np.asarray(kept)
        ev = np.setdiff1d(np.arange(n), kept)
        if p["merge"] == "position":
            out = {}
            for e in ev:
                d = np.abs(kept - e)
                near = kept[d == d.min()]
                c = int(near.max() if w == "merge-tie-later" else near.min())
                out[int(e)] = (c, {c})
            return out
        k = self.st.layers[l]["k"][:, g, :]
        if w == "merge-dot":
            sim, tol = k[ev] @ k[kept].T, 0.0
        else:
            nn = np.sqrt((k * k).sum(axis=1))
            u = k / np.where(nn > 0, nn, 1.0)[:, None]
            sim, tol = u[ev] @ u[kept].T, CTOL
        best = sim.argmax(axis=1)  # the first maximum: ties go to the earlier kept entry
        return {int(e): (int(kept[b]), set(kept[sim[i] >= sim[i, b] - tol].tolist()))
                for i, (e, b) in enumerate(zip(ev, best))}

    def scores(self, p, l, g, keep):
        """Score arrays for one head: the reference first, then (RoCo only,
        when its protected set sits on a near-tie) the other valid ones;
        pooled when the spec has a pool stage."""
        s = self.rule_scores(p, l, g, keep)
        return [pool(x, p["width"]) for x in s] if p["pool"] else s

    def rule_scores(self, p, l, g, keep):
        """The rule's own score arrays (see scores)."""
        L, n, w = self.st.layers[l], self.st.n, self.wrong
        m = p["method"]
        if m == "full":
            return [np.full(n, np.inf)]
        if m == "streaming":
            s = np.arange(n, dtype=np.float64)
            if w != "streaming-nosinks":
                s[: p["sinks"]] = np.inf
            return [s]
        if m == "h2o":
            recent = math.floor(keep * p["recent"] + 0.5)
            s = (L["a"][g, 0].sum(axis=0) if w == "h2o-head0" else L["sum"][g]).copy()
            if recent > 0:
                s[n - recent:] = np.inf
            return [s]
        if m in ("snapkv", "pyramidkv"):
            win = min(p["window"], n)
            body = n - win
            attn = L["mean"][g, n - win:, :].sum(axis=0)
            kernel = 1 if w == "snapkv-nopool" else p["kernel"]
            s = np.full(n, np.inf)
            if body > 0:
                half = kernel // 2
                s[:body] = np.convolve(attn[:body], np.ones(kernel))[half: half + body] / kernel
            return [s]
        if m == "roco":
            return self.roco(p, L, g, keep)
        if m in ("keydiff", "knorm"):
            k = L["k"][:, g, :]
            nn = np.sqrt((k * k).sum(axis=1))
            if m == "knorm":
                return [-nn]
            unit = k if w == "keydiff-rawmean" else k / np.where(nn > 0, nn, 1.0)[:, None]
            anchor = unit.sum(axis=0)
            an = np.sqrt(anchor @ anchor)
            return [np.where((nn > 0) & (an > 0), -(k @ anchor) / np.maximum(nn * an, 1e-300), 0.0)]
        if m == "lookm":
            share = p["recent_only"] if w == "lookm-noimportant" else p["recent"]
            recent = 0 if w == "lookm-norecent" else math.floor(keep * share + 0.5)
            s = (L["a"][g, 0].sum(axis=0) if w == "h2o-head0" else L["sum"][g]).copy()
            if p["text_prior"] and w != "lookm-noprior":
                # text before images; text_prior=1 holds the budget: when the text before the
                # recent window exceeds the slots left, text competes and images go
                text = np.ones(n, bool) if self.image is None else ~self.image
                body = np.arange(n) < n - min(recent, n)
                if p["text_prior"] == 2 or w == "lookm-alltext" or (text & body).sum() <= keep - min(recent, n):
                    s[text] = np.inf
                else:
                    s[~text] = -np.inf
            if recent > 0:
                s[n - recent:] = np.inf
            return [s]
        if m in ("elastic", "prefixkv"):
            s = self.layer_score(l, g)
            s[: p["sinks"]] = np.inf
            # the last `protect` entries (the question, the chat template's assistant prefix),
            # within the layer's budget: at most keep - sinks of them, at least the last one
            protect = 1 if w == "layer-nolast" else min(p["protect"], max(1, keep - p["sinks"]), n)
            s[n - protect:] = np.inf
            return [s]
        if m == "expected":
            return [self.expected(p, l, g)]
        if m == "tova":
            # the last query's attention, mean over every query head of the layer; the last entry kept
            last = L["mean"][:, n - 1, :]
            s = (last[g] if w == "tova-perhead" else last.mean(axis=0)).copy()
            s[n - 1] = np.inf
            return [s]
        if m == "kvzip":
            r = self.st.recon_max(p["chunk"], *self.st.recon_ids)[l][g].copy()
            if w == "kvzip-groupmean":
                r = self.st.recon_max(p["chunk"], *self.st.recon_ids, reduce="mean")[l][g].copy()
            r[: p["sinks"]] = np.inf
            return [r]
        if m in ("random", "imgrand"):
            mix = 1 if w == "random-oneseed" else (GOLDEN * (l * 4099 + g + 1)) & M64
            s = np.array([(z >> 40) / 16777216.0 for z in splitmix64(p["seed"] ^ mix, n)])
            if m == "imgrand":
                s[~self.image] = np.inf
            return [s]
        raise ValueError(m)

    def expected(self, p, l, g):
        """Expected Attention (src/kv/policy/expected.c, kvpress's
        ExpectedAttentionPress): per query head of g, the mean mu and the
        covariance S (over n) of its queries before RoPE past the sinks; R the
        mean rotation over the next `future` positions; logits
        s R mu . k + s^2 / 2 k^T R S R^T k over the entries past the sinks,
        softmaxed, averaged over the group, times |v|; sinks kept."""
        L, n, w = self.st.layers[l], self.st.n, self.wrong
        H = self.st.n_head_kv
        group = self.st.n_head // H
        sinks = min(p["sinks"], n)
        R = np.eye(L["k"].shape[2]) if w == "expected-norope" else self.st.avg_rope(l, n, p["future"])
        k, s = L["k"][sinks:, g, :], L["scale"]
        acc = np.zeros(n - sinks)
        for h in range(g * group, (g + 1) * group):
            q = L["qpre"][sinks:, h, :]
            if len(q) == 0:
                continue
            mu = q.mean(axis=0)
            S = (q - mu).T @ (q - mu) / len(q)
            mu, S = R @ mu, R @ S @ R.T
            x = s * (k @ mu)
            if w != "expected-nocov":
                x = x + s * s / 2 * np.einsum("jd,de,je->j", k, S, k)
            x = np.exp(x - x.max())
            acc += x / x.sum() / group
        if w != "expected-novnorm":
            acc = acc * np.sqrt((L["v"][sinks:, g, :] ** 2).sum(axis=1))
        return np.concatenate([np.full(sinks, np.inf), acc])

    def global_(self, p):
        """The budget stage global (src/kv/policy/kvzip.c): every kv head of
        every layer ranked as one list (ties: the lower layer, the lower
        head, the earlier entry), sum over layers of H x keep kept. -> kept
        per (l, g), each head's scores, the cut and the scale."""
        key = ("global", json.dumps(p, sort_keys=True))
        if key not in self.budgets:
            n, H, Ln = self.st.n, self.st.n_head_kv, self.st.n_layer
            raw = {(l, g): self.scores(p, l, g, self.target(p, l))[0] for l in range(Ln) for g in range(H)}
            cat = np.concatenate([raw[l, g] for l in range(Ln) for g in range(H)])
            total = sum(H * self.target(p, l) for l in range(Ln))
            kept = select(cat, total, self.wrong)
            fin = np.sort(cat[np.isfinite(cat)])[::-1]
            take = total - int(np.isinf(cat).sum())
            cut = fin[take - 1] if 0 < take <= len(fin) else np.inf
            per = {(l, g): [j - (l * H + g) * n for j in kept if (l * H + g) * n <= j < (l * H + g + 1) * n]
                   for l in range(Ln) for g in range(H)}
            scale = np.abs(cat[np.isfinite(cat)]).max() if np.isfinite(cat).any() else 1.0
            self.budgets[key] = dict(kept=per, raw=raw, cut=cut, scale=scale)
        return self.budgets[key]

    def kept(self, p, l, g, keep):
        """The positions the rule keeps in head (l, g)."""
        if p["method"] == "csp":
            return self.csp(p, l, g, keep)["want"]
        if p["alloc"] == "global" and self.wrong != "global-uniform":
            return self.global_(p)["kept"][l, g]
        if p["alloc"] == "adaptive" and self.wrong != "adaptive-uniform":
            return self.adaptive(p, l, keep)["kept"][g]
        return select(self.scores(p, l, g, keep)[0], keep, self.wrong)

    def adaptive(self, p, l, keep):
        """Ada-KV's head-wise budgets (docs/METHODS.md §5.9,
        src/kv/policy/adakv.c): each kv head's best floor(floor x keep)
        entries are always kept, then the layer keeps its H x keep best
        entries over all heads (ties: the lower head, then the earlier
        entry). -> kept per head, each head's own scores, the layer's cut
        and each head's safeguard cut (its floor-th best score)."""
        n, H = self.st.n, self.st.n_head_kv
        safe = 0 if self.wrong == "adaptive-nofloor" else math.floor(p["floor"] * keep)
        raw = [self.scores(p, l, g, keep)[0] for g in range(H)]
        boosted = []
        for s in raw:
            s = s.copy()
            if safe > 0:
                s[select(s, safe)] = np.inf
            boosted.append(s)
        cat = np.concatenate(boosted)
        kept = select(cat, H * keep, self.wrong)
        fin = np.sort(cat[np.isfinite(cat)])[::-1]
        take = H * keep - int(np.isinf(cat).sum())
        cut = fin[take - 1] if 0 < take <= len(fin) else np.inf
        guard = [np.sort(s[np.isfinite(s)])[::-1][safe - 1] if 0 < safe <= np.isfinite(s).sum() else -np.inf
                 for s in raw]
        return dict(kept=[[j - g * n for j in kept if g * n <= j < (g + 1) * n] for g in range(H)], raw=raw,
                    cut=cut, guard=guard, scale=np.abs(cat[np.isfinite(cat)]).max() if np.isfinite(cat).any() else 1.0)

    def describe(self, p, l, g, keep, idx):
        """The reference scores of entries idx, for a failure message."""
        if p["method"] == "csp":
            c = self.csp(p, l, g, keep)
            return ["self %.7g cross %.7g" % (c["self"][j], c["cross"][j]) for j in idx]
        return np.round(self.scores(p, l, g, keep)[0][idx], 7).tolist()

    def csp(self, p, l, g, keep):
        """Cross-Self Pruning (docs/METHODS.md §4.13, src/kv/policy/csp.c) for
        head (l, g): the last `recent` entries kept; the observation window
        is the last `window` prompt queries (0: `recent` of them); each
        window query's attention row, weighted by its n-softmax factor
        Z / (Z + n) (Z = sum_k exp(x_k): exp(x_j) / (n + Z) = A_j Z / (Z + n)),
        averaged over the query heads of g and summed over the window, into
        S_self (entries of the query's modality) and S_cross (the other).
        Of the k = keep - recent entries before the recent window: the top
        k_cross = floor(k cross_ratio + 0.5) by S_cross, the top k - k_cross
        by S_self, their union, refilled to k by S_self + S_cross.
        -> dict(self, cross, both, body, k_cross, k_self, want)."""
        L, n, w = self.st.layers[l], self.st.n, self.wrong
        share = p["recent_only"] if w == "lookm-noimportant" else p["recent"]
        recent = min(n, math.floor(keep * share + 0.5))
        obs = n if w == "csp-window-all" else min(n, p["window"] if p["window"] > 0 else recent)
        a, lz = L["a"][g][:, n - obs:, :], L["lz"][g][:, n - obs:]
        if w == "h2o-head0":
            a, lz = a[:1], lz[:1]
        nsm = np.ones_like(lz) if w == "csp-softmax" else 1.0 / (1.0 + p["n"] * np.exp(-lz))
        wa = (a * nsm[..., None]).mean(axis=0)  # [window query][entry]
        mod = np.zeros(n, bool) if self.image is None else self.image
        same = mod[n - obs:, None] == mod[None, :]
        s_self, s_cross = (wa * same).sum(axis=0), (wa * ~same).sum(axis=0)
        if p["pool"]:  # CSP chooses inside its rule: the pool stage smooths the window sums
            s_self, s_cross = pool(s_self, p["width"]), pool(s_cross, p["width"])
        if w == "csp-nosplit":
            s_self = s_cross = s_self + s_cross
        body = n - recent
        k = max(0, min(keep - recent, body))
        k_cross = math.floor(k * p["cross_ratio"] + 0.5)
        k_self = k - k_cross
        if w == "csp-swapped":
            k_cross, k_self = k_self, k_cross
        later = w == "tie-later"
        cand = np.arange(body)
        chosen = set(top(s_cross, cand, k_cross, later).tolist()) | set(top(s_self, cand, k_self, later).tolist())
        both = s_self + s_cross
        if w != "csp-norefill":
            rest = np.array([j for j in cand if j not in chosen], dtype=int)
            chosen |= set(top(both, rest, k - len(chosen), later).tolist())
        return dict(self=s_self, cross=s_cross, both=both, body=body, k_cross=k_cross, k_self=k_self,
                    want=sorted(chosen) + list(range(body, n)))

    def roco(self, p, L, g, keep):
        n = self.st.n
        protect = math.floor(keep * p["recent"] + 0.5)
        cnt = np.where(L["count"] > 0, L["count"], 1.0)
        mean = L["sum"][g] / cnt
        sd = np.sqrt(np.maximum(L["sq"][g] / cnt - mean * mean, 0.0))
        # docs/METHODS.md §4.6: the sinks and the last 10 entries are never
        # candidates; then the largest deviations (ties: the earlier entry)
        # are protected, `protect` entries in all; the rest go by mean.
        j = np.arange(n)
        fixed = j >= n - ROCO_LAST
        if self.wrong != "roco-nosinks":
            fixed |= j < p["sinks"]
        extra = 0 if self.wrong == "roco-noprotect" else max(0, protect - int(fixed.sum()))
        cand = np.flatnonzero(~fixed)
        order = cand[np.lexsort((cand, -sd[cand]))]

        def score(prot):
            s = mean.copy()
            s[fixed] = np.inf
            s[list(prot)] = np.inf
            return s

        out = [score(order[:extra])]
        if 0 < extra < len(order):
            # Other protected sets float32 may pick: entries within TOL of the cut.
            cut, tol = sd[order[extra - 1]], TOL * sd[cand].max()
            sure = [e for e in order if sd[e] > cut + tol]
            amb = [e for e in order if abs(sd[e] - cut) <= tol]
            need = extra - len(sure)
            if 0 <= need <= len(amb) and math.comb(len(amb), need) <= 2000:
                out += [score(sure + list(c)) for c in itertools.combinations(amb, need)]
        return out


def consistent(kept, s, keep, tol, later=False):
    """Whether `kept` is a valid choice for scores s: the rule's count, every
    +inf entry, no dropped entry better than a kept one by more than tol x
    the scale, and exact zero ties decided for the earlier entry (`later`:
    for the later one)."""
    n = len(s)
    inf = np.isinf(s)
    kin = np.zeros(n, bool)
    kin[kept] = True
    if len(kept) != min(n, max(keep, int(inf.sum()))) or not kin[inf].all():
        return False
    fk, fd = kin & ~inf, ~kin
    if fk.any() and fd.any():
        scale = np.abs(s[~inf]).max() or 1.0
        if s[fk].min() < s[fd].max() - tol * scale:
            return False
        zk, zd = np.flatnonzero(fk & (s == 0)), np.flatnonzero(fd & (s == 0))
        if len(zk) and len(zd) and (zk.min() < zd.max() if later else zk.max() > zd.min()):
            return False
    return True


def judge(ref, p, l, g, kept):
    """-> ("exact" | "near" | "bad", reference set, swapped count)."""
    keep = ref.target(p, l)
    if p["method"] == "csp":
        return judge_csp(ref, p, l, g, kept, keep)
    if p["alloc"] == "adaptive" and ref.wrong != "adaptive-uniform":
        return judge_adaptive(ref, p, l, g, kept, keep)
    if p["alloc"] == "global" and ref.wrong != "global-uniform":
        return judge_global(ref, p, l, g, kept)
    cands = ref.scores(p, l, g, keep)
    want = ref.kept(p, l, g, keep)
    if kept == want:
        return "exact", want, 0
    swapped = len(set(want) - set(kept))
    if p["method"] not in EXACT:
        if any(consistent(kept, s, keep, TOL, ref.wrong == "tie-later") for s in cands):
            return "near", want, swapped
    return "bad", want, swapped


def judge_adaptive(ref, p, l, g, kept, keep):
    """Ada-KV: a float32 near-tie at the layer's cut or at a head's
    safeguard cut may move an entry between heads, so kvfold's set is
    accepted when it is a valid top set of the head's own scores whose kept
    entries all score within TOL of the layer's cut or above (or of the
    head's safeguard cut, for those it keeps for sure), and whose dropped
    entries all score within TOL of it or below."""
    a = ref.adaptive(p, l, keep)
    want = a["kept"][g]
    if kept == want:
        return "exact", want, 0
    s, t = a["raw"][g], TOL * a["scale"]
    fin = np.isfinite(s)
    kin = np.zeros(len(s), bool)
    kin[kept] = True
    low = min(a["cut"], a["guard"][g]) - t
    ok = (consistent(kept, s, len(kept), TOL, ref.wrong == "tie-later") and abs(len(kept) - len(want)) <= 4
          and not (kin & fin & (s < low)).any() and not (~kin & fin & (s > a["cut"] + t)).any())
    return ("near" if ok else "bad"), want, len(set(want) - set(kept))


def judge_global(ref, p, l, g, kept):
    """budget=global: as judge_adaptive, with the model's cut and no
    safeguard (a near-tie at the cut may move an entry between any heads)."""
    a = ref.global_(p)
    want = a["kept"][l, g]
    if kept == want:
        return "exact", want, 0
    s, t = a["raw"][l, g], TOL * a["scale"]
    fin = np.isfinite(s)
    kin = np.zeros(len(s), bool)
    kin[kept] = True
    ok = (consistent(kept, s, len(kept), TOL, ref.wrong == "tie-later") and abs(len(kept) - len(want)) <= 4
          and not (kin & fin & (s < a["cut"] - t)).any() and not (~kin & fin & (s > a["cut"] + t)).any())
    return ("near" if ok else "bad"), want, len(set(want) - set(kept))


def judge_csp(ref, p, l, g, kept, keep):
    """CSP's three rankings may each meet a float32 near-tie at their cut:
    kvfold's set is accepted when some combination of the cross and self
    lists' valid top sets, refilled by a valid top of S_self + S_cross,
    gives it."""
    c = ref.csp(p, l, g, keep)
    want = c["want"]
    if kept == want:
        return "exact", want, 0
    swapped = len(set(want) - set(kept))
    later, body, n = ref.wrong == "tie-later", c["body"], ref.st.n
    cand = np.arange(body)
    for co in top_options(c["cross"], cand, c["k_cross"], TOL, later):
        for so in top_options(c["self"], cand, c["k_self"], TOL, later):
            chosen = sorted(co | so)
            s = c["both"].copy()
            s[chosen] = np.inf
            s[body:] = np.inf
            if consistent(kept, s, len(chosen) + n - body if ref.wrong == "csp-norefill" else keep, TOL, later):
                return "near", want, swapped
    return "bad", want, swapped


def judge_merge(ref, p, l, g, kept, pairs):
    """kvfold's [evicted, merged into] pairs of head (l, g) against the merge
    rule applied to kvfold's own kept set -> ("exact" | "near" | "bad",
    message, entries accepted as cosine near-ties)."""
    want = ref.merges(p, l, g, kept)
    got = {}
    for e, c in pairs:
        if e in got:
            return "bad", "entry %d merged twice" % e, 0
        got[e] = c
    if set(got) != set(want):
        return "bad", ("merged %d entries for %d evicted: merged but not evicted %s, evicted but not merged %s"
                       % (len(got), len(want), sorted(set(got) - set(want))[:8],
                          sorted(set(want) - set(got))[:8])), 0
    off = [e for e in sorted(want) if got[e] not in want[e][1]]
    near = sum(1 for e in want if got[e] != want[e][0] and got[e] in want[e][1])
    if off:
        e = off[0]
        msg = "%d of %d evicted entries merged elsewhere, e.g. %d into %d, rule: into %d" % (
            len(off), len(want), e, got[e], want[e][0])
        if p["merge"] in COSINE:
            k = ref.st.layers[l]["k"][:, g, :]
            cos = [float(k[e] @ k[c] / np.sqrt((k[e] @ k[e]) * (k[c] @ k[c]))) for c in (got[e], want[e][0])]
            msg += " (reference cosines %.7f vs %.7f)" % tuple(cos)
        return "bad", msg, near
    return ("near" if near else "exact"), "", near


# ------------------------------------------------------------------- kvfold --

class Failed(Exception):
    """A kvfold run of one case failed (the other cases still run)."""

    def __init__(self, rc, err):
        super().__init__("kvfold %s; stderr: %s" % ("crashed (signal %d)" % -rc if rc < 0 else "exited %d" % rc,
                                                     err.strip()[-400:] or "-"))


def run(cmd, fatal=True):
    # generate prints a token's bytes, which need not be whole UTF-8.
    # Passive OpenMP waits: spinning threads crawl on a busy 2-core machine.
    r = subprocess.run(cmd, capture_output=True, env=dict(os.environ, OMP_WAIT_POLICY="PASSIVE"))
    if r.returncode != 0:
        err = r.stderr.decode(errors="replace")
        if fatal:
            sys.exit("ref_kv: %s failed (%d):\n%s" % (" ".join(cmd), r.returncode, err))
        raise Failed(r.returncode, err)
    return r.stdout.decode(errors="replace")


def tokenize(kvfold, model, text, bos):
    out = run([kvfold, "tokenize", "-m", model, "-p", text] + (["--bos"] if bos else []))
    return [int(x) for x in out.split()]


def prompt_ids(kvfold, model, text, extra=()):
    """The text token ids generate runs, from its --dump-tags lines
    ("pos text media row col id piece")."""
    out = run([kvfold, "generate", "-m", model, "-p", text, "-n", "1", "--dump-tags", "-t", "1"] + list(extra))
    return [int(f[5]) for f in (line.split() for line in out.splitlines()) if len(f) > 5 and f[1] == "text"]


def generate(kvfold, model, text, spec, tmp, extra=()):
    """-> (the --dump-kv JSON, generate --json's output)."""
    path = os.path.join(tmp, "kv.json")
    # --swa-full: gemma3's sliding-window layers keep what left their window,
    # so the rules choose among every entry as here (tests/tools/kv_swa.c
    # checks the freeing of those entries).
    out = run([kvfold, "generate", "-m", model, "-p", text, "-n", "1", "--kv", spec, "--dump-kv", path, "-t", "1",
               "--kv-type", "f32", "--json", "--swa-full"] + list(extra), fatal=False)
    with open(path) as fh:
        return json.load(fh), json.loads(out)


# -------------------------------------------------------------------- cases --

def cases(n):
    """(spec, extra kvfold arguments) for a prompt of n tokens."""
    # A ratio whose budget x n ends in .6: floor(x + 0.5) and floor(x) differ.
    odd = "%.6f" % ((int(0.25 * n) + 0.6) / n)
    return [
        ("full", []),
        ("streaming:budget=0.3", []),
        ("streaming:budget=40,sinks=2", []),
        ("streaming:budget=3,sinks=5", []),          # the sinks alone exceed the budget
        ("h2o:budget=0.3", []),
        ("h2o:budget=0.3+pool=avg", []),                # the pool stage on H2O's scores
        ("h2o:budget=0.3+pool=avg:width=3", []),
        ("h2o:budget=40,recent=0.3", []),
        ("h2o:budget=0.2,recent=0", []),
        ("h2o:budget=%d" % (n - 5), []),             # a few evictions: kv_select_keep's scan path
        ("h2o:budget=0.3", ["-b", "7"]),              # statistics summed over several batches
        ("h2o:budget=0.3", ["-t", "2"]),              # ... and over threads
        ("snapkv:budget=0.3", []),
        ("snapkv:budget=40,window=8,kernel=3", []),
        ("snapkv:budget=0.3,window=8,kernel=1", []),
        ("snapkv:budget=5,window=8", []),            # the window alone exceeds the budget
        ("snapkv:budget=%d,window=8,kernel=3" % (n - 3), []),  # scan path; gemma3: among exact ties
        ("snapkv:budget=0.3,window=8,kernel=3", ["-b", "5"]),  # the window split over batches
        ("snapkv:budget=0.3,window=8,kernel=3", ["-t", "2"]),
        ("pyramidkv:budget=0.3,window=8", []),
        ("pyramidkv:budget=0.3,window=8,kernel=3,beta=5", []),
        ("snapkv:budget=0.3,window=8+budget=pyramid:beta=5", []),
        # Ada-KV: the kv heads of a layer share its budget by score.
        ("snapkv:budget=0.3+budget=adaptive", []),
        ("snapkv:budget=0.3,window=8,kernel=3+budget=adaptive:floor=1", []),  # floor 1: the even split
        ("h2o:budget=0.2,recent=0+budget=adaptive", []),
        ("keydiff:budget=0.25+budget=adaptive", []),
        ("keydiff:budget=0.1+budget=adaptive:floor=0.75", []),  # a floor that binds some heads
        ("roco:budget=0.3", []),
        ("roco:budget=40,recent=0.9", []),
        ("roco:budget=0.4,recent=0.6", []),
        ("roco:budget=0.3", ["-b", "7"]),
        ("roco:budget=0.3", ["-t", "2"]),
        ("keydiff:budget=0.3", []),
        ("keydiff:budget=40", []),
        ("knorm:budget=0.3", []),
        ("knorm:budget=" + odd, []),
        ("random:budget=0.3", []),
        ("random:budget=40,seed=7", []),
        # LOOK-M on text: every entry is text, so text_prior=1 (which holds the
        # budget) is H2O's rule and a merge by cosine, as without the prior;
        # text_prior=all keeps everything (nothing merged).
        ("lookm", []),
        ("lookm:text_prior=all", []),
        ("lookm:budget=0.3", []),
        ("lookm:budget=40,recent=0.2,merge=none", []),
        ("lookm:important=0.8,merge=avg", []),             # recent = 1 - important
        ("lookm:budget=0.3,important=0.3,merge=weighted", []),  # with a budget too: recent 0.7
        ("lookm:budget=0.3", ["-b", "7", "-t", "2"]),
        # Elastic Cache: one set per layer, merged by position.
        # (The first entries are heavy hitters anyway: sinks change the
        # choice only where the budget is small.)
        ("elastic:budget=0.3", []),
        ("elastic:budget=0.5", []),
        ("elastic:budget=0.5,protect=6", []),
        ("elastic:budget=0.5,protect=1", []),          # the authors' protect_size
        ("elastic:budget=5,sinks=2", []),
        ("elastic:budget=%d" % (n - 4), []),           # scan path: 4 evictions, each merged
        ("elastic:budget=4,sinks=0", []),              # no sinks: the last entry is still kept
        # PrefixKV: per-layer budgets searched on the prompt.
        ("prefixkv:budget=0.3", []),
        ("prefixkv:budget=0.5", []),
        ("prefixkv:budget=0.5,protect=1", []),
        ("prefixkv:budget=0.03,sinks=2", []),
        ("prefixkv:budget=0.3", ["-b", "7"]),
        # Expected Attention: query statistics from every prompt position past the sinks.
        ("expected:budget=0.3", []),
        ("expected:budget=40,future=16", []),
        ("expected:budget=0.3,sinks=1", []),
        ("expected:budget=0.3", ["-b", "7", "-t", "2"]),  # statistics summed over batches and threads
        ("expected:budget=0.25+budget=adaptive", []),
        # KVzip: the prompt's reconstruction in one pass, or in chunks of 40 (3-4 passes).
        ("kvzip:budget=0.3", []),
        ("kvzip:budget=0.2,chunk=40", []),
        ("kvzip:budget=30,sinks=2", ["-b", "7", "-t", "2"]),
        ("kvzip:budget=0.3+budget=uniform", []),
        ("keydiff:budget=0.25+budget=global", []),
        ("tova:budget=0.3", []),
        ("tova:budget=40", ["-b", "7", "-t", "2"]),
    ] + csp_cases()


def csp_cases():
    """CSP, on text and on the pseudo-image prompt. On text every (query,
    entry) pair is "self": S_cross is 0 and the cross list is all ties, so
    it takes the first k_cross entries."""
    return [
        ("csp:budget=0.3", []),
        ("csp:budget=0.3+pool=avg", []),                # ... on CSP's window sums
        ("csp:budget=0.3,decode_softmax=1", []),       # decoding only: the same compressed prompt
        ("csp:budget=0.3,cross_ratio=0", []),
        ("csp:budget=0.3,cross_ratio=1", []),
        ("csp:budget=0.3,cross_ratio=0.3", []),
        ("csp:budget=0.3,n=0", []),                    # plain softmax
        ("csp:budget=0.3,n=4", []),
        ("csp:budget=0.3,n=1000", []),                 # n near the rows' sum_k exp(x_k): reweights them
        # n=0 and n=4 where they change the choice (most on gemma3's sliding
        # layers, whose rows see a few keys: Z ~ 1..30)
        ("csp:budget=24,window=24,recent=0.25,n=0", []),
        ("csp:budget=0.2,window=24,cross_ratio=0.3,recent=0.1,n=4", []),
        ("csp:budget=0.3,window=8", []),
        ("csp:budget=0.3,recent=0.25", []),
        ("csp:budget=0.3,important=0.6", []),          # recent = 1 - important
        ("csp:budget=0.3,recent=0", []),               # empty default window: all scores 0, the first entries
        ("csp:budget=40", []),
        ("csp:budget=0.3", ["-b", "7"]),               # the window's queries held over several batches
        ("csp:budget=0.3,window=8,n=4", ["-b", "5", "-t", "2"]),
    ]


def image_cases(n, n_text):
    """The same for the pseudo-image prompt of n tokens, n_text of them text."""
    return [
        ("imgrand:budget=0.8", []),
        ("imgrand:budget=%d,seed=3" % (n_text + 20), []),
        ("lookm:budget=0.6", []),                      # text + recent kept, image entries by score
        ("lookm:budget=0.6+pool=avg", []),
        ("lookm", []),                                 # the text alone exceeds the budget: text competes
        ("lookm:text_prior=all", []),                  # ... or all text kept, past it (the released code)
        ("lookm:budget=0.6,recent=0.6,important=0.2,merge=weighted", []),  # recent 0.75
        ("lookm:budget=0.6,text_prior=0", []),
        ("lookm:budget=%d,merge=none" % (n_text + 30), []),
    ] + csp_cases()


# Deliberately wrong rules, and the methods they apply to; each must fail to
# match kvfold in at least one case.
WRONG = {
    "tie-later": None,                   # ties kept for the later entry (every method)
    "h2o-head0": ("h2o", "lookm", "csp"),  # no GQA mean: the first query head only
    "snapkv-nopool": ("snapkv", "pyramidkv"),
    "pyramid-reversed": ("snapkv", "pyramidkv"),
    "roco-noprotect": ("roco",),
    "roco-nosinks": ("roco",),           # sinks left to compete (METHODS §4.6 protects them)
    "keydiff-rawmean": ("keydiff",),     # anchor = mean of raw keys, not of unit keys
    "streaming-nosinks": ("streaming",),
    "random-oneseed": ("random", "imgrand"),  # the same stream for every head
    "budget-floor": ("knorm",),          # floor(budget N) instead of floor(budget N + 0.5)
    "lookm-noprior": ("lookm",),         # text entries compete like image entries
    "lookm-norecent": ("lookm",),        # no recent window
    "lookm-alltext": ("lookm",),         # text_prior=1 keeps all text past the budget (the released code's rule)
    "lookm-noimportant": ("lookm", "csp"),  # the important share ignored (recent as given or default)
    "merge-dot": ("lookm",),             # merged into the largest dot product, not cosine
    "merge-tie-later": ("elastic",),     # an entry midway between two kept ones goes to the later
    "layer-head0": ("elastic", "prefixkv"),    # the layer score from the first kv head only
    "layer-perhead": ("elastic", "prefixkv"),  # a set per kv head from its own score
    "layer-nolast": ("elastic", "prefixkv"),   # only the last entry protected (the authors' protect_size 1)
    "prefix-uniform": ("prefixkv",),     # every layer the same budget
    "prefix-noscale": ("prefixkv",),     # the searched sizes, not scaled to the total
    "prefix-nofloor": ("prefixkv",),     # layers searched below their protected entries
    "csp-softmax": ("csp",),             # the window rows' plain softmax, not the n-softmax
    "csp-nosplit": ("csp",),             # both lists ranked by all the window's attention (no self/cross)
    "csp-norefill": ("csp",),            # the slots of entries on both lists left empty
    "adaptive-uniform": ("snapkv", "h2o", "keydiff"),  # budget=adaptive: every head its own even share
    "adaptive-nofloor": ("snapkv", "h2o", "keydiff"),  # ... without the safeguard
    "csp-swapped": ("csp",),             # cross_ratio taken as the self list's share
    "csp-window-all": ("csp",),          # every prompt query observed, not the last O
    "expected-nocov": ("expected",),     # the mean query alone (kvpress's use_covariance=False)
    "expected-novnorm": ("expected",),   # no value-norm weighting
    "expected-norope": ("expected",),    # the queries' statistics not rotated to the next positions
    "kvzip-groupmean": ("kvzip",),       # a kv head's score: the mean over its query heads, not the max
    "global-uniform": ("kvzip", "keydiff"),  # budget=global: every head its own even share
    "tova-perhead": ("tova",),           # each kv head's own query heads, not the layer's
}


class Report:
    def __init__(self, verbose):
        self.verbose, self.fail, self.near, self.swapped, self.heads = verbose, [], 0, 0, 0
        self.merged, self.merge_near, self.budget_near, self.layers_budgeted, self.gini_diff = 0, 0, 0, 0, 0.0
        self.wrong_hits = {k: 0 for k in WRONG}
        self.decode_only = 0
        self.weak = {}  # (key, value) -> heads where the default would fail (WEAK_KEYS)

    def budgets(self, case, ref, p, js):
        """PrefixKV's layer budgets (generate --json kv.layer_budgets) against
        the reference search -> the Ref to judge the kept sets with (its
        budgets replaced by kvfold's where they differ by a float32 near-tie
        of the search), or None after a failure."""
        lb = js["kv"].get("layer_budgets")
        if p["alloc"] != "prefix":
            if lb is not None:
                self.fail.append("%s: kv.layer_budgets reported without budget=prefix" % case)
            return ref
        n, n_layer = ref.st.n, ref.st.n_layer
        if not lb or len(lb) != n_layer or any("gini" not in b for b in lb):
            self.fail.append("%s: kv.layer_budgets is %r, not %d layers of {ratio, gini}" % (case, lb, n_layer))
            return None
        # src/session.c layer_target: floor(ratio x n + 0.5) in [1, n].
        got = [max(1, min(n, math.floor(b["ratio"] * n + 0.5))) for b in lb]
        want = ref.prefix(p)
        self.layers_budgeted += n_layer
        gini = [abs(b["gini"] - w) for b, w in zip(lb, want["gini"])]
        self.gini_diff = max(self.gini_diff, max(gini))
        if max(gini) > GTOL:
            self.fail.append("%s: Gini coefficients %s, reference %s" % (
                case, [round(b["gini"], 7) for b in lb], np.round(want["gini"], 7).tolist()))
        if got != want["keep"]:
            if want["margin"] >= PTOL:
                self.fail.append("%s: layer budgets %s (total %d), reference %s (total %d; search margin %.2g)" % (
                    case, got, sum(got), want["keep"], sum(want["keep"]), want["margin"]))
                return None
            self.budget_near += 1
            if self.verbose:
                print("    layer budgets %s accepted for %s: a search near-tie (margin %.2g)"
                      % (got, want["keep"], want["margin"]))
            ref = copy.copy(ref)
            ref.budgets = dict(ref.budgets)
            ref.budgets[ref.prefix_key(p)] = dict(want, keep=got)
        return ref

    def check(self, name, ref, refs_wrong, spec, extra, dump, js):
        p = parse_spec(spec)
        n_layer, n_kv = ref.st.n_layer, ref.st.n_head_kv
        case = " ".join([name, "--kv", spec] + list(extra))
        if dump["n_prompt"] != ref.st.n:
            self.fail.append("%s: kvfold's prompt has %d tokens, the reference %d"
                             % (case, dump["n_prompt"], ref.st.n))
            return
        if dump["final"] != dump["compressed"] or dump["n_past"] != dump["n_prompt"]:
            self.fail.append("%s: -n 1 decoded a token (final differs from compressed)" % case)
        comp, merged = dump["compressed"], dump["merged"]
        if any(len(x) != n_layer or any(len(h) != n_kv for h in x) for x in (comp, merged)):
            self.fail.append("%s: dump shape is not [%d][%d]" % (case, n_layer, n_kv))
            return
        ref = self.budgets(case, ref, p, js)
        if ref is None:
            return
        counts, bad, bad_heads = [], [], set()
        if p["method"] in ("elastic", "prefixkv"):
            for l in range(n_layer):
                if any(comp[l][g] != comp[l][0] for g in range(n_kv)):
                    bad.append("layer %d: the kv heads keep different sets (one set per layer)" % l)
        for l in range(n_layer):
            for g in range(n_kv):
                kept = comp[l][g]
                verdict, want, swapped = judge(ref, p, l, g, kept)
                self.heads += 1
                counts.append(len(kept))
                cm, rm = sorted(set(kept) - set(want)), sorted(set(want) - set(kept))
                diff = ("kept %d, rule keeps %d; kvfold only %s (ref scores %s), reference only %s (ref scores %s)"
                        % (len(kept), len(want), cm, ref.describe(p, l, g, ref.target(p, l), cm), rm,
                           ref.describe(p, l, g, ref.target(p, l), rm)))
                if verdict == "near":
                    self.near += 1
                    self.swapped += swapped
                    if self.verbose:
                        print("    near-tie accepted, layer %d head %d: %s" % (l, g, diff))
                elif verdict == "bad":
                    bad.append("layer %d head %d: %s" % (l, g, diff))
                    bad_heads.add((l, g))
                mv, msg, mnear = judge_merge(ref, p, l, g, kept, merged[l][g])
                self.merged += len(merged[l][g])
                self.merge_near += mnear
                if mv == "bad":
                    bad.append("layer %d head %d merge: %s" % (l, g, msg))
                    bad_heads.add((l, g))
                elif mv == "near" and self.verbose:
                    print("    %d cosine near-ties accepted in the merge, layer %d head %d" % (mnear, l, g))
        hits = []
        for wname, r in refs_wrong.items():
            methods = WRONG[wname]
            if methods is not None and p["method"] not in methods:
                continue
            verdicts = [v for l in range(n_layer) for g in range(n_kv)
                        for v in (judge(r, p, l, g, comp[l][g])[0],
                                  judge_merge(r, p, l, g, comp[l][g], merged[l][g])[0])]
            if "bad" not in verdicts:
                if bad:
                    bad.insert(0, "kvfold's sets are what the wrong rule %r picks" % wname)
            elif not bad:  # a catch counts only where the right rule matches
                self.wrong_hits[wname] += 1
                hits.append(wname)
        if bad:
            self.fail.append("%s: %d of %d heads differ from the rule\n      %s"
                             % (case, len(bad_heads), n_layer * n_kv, "\n      ".join(bad[:4])))
        if self.verbose:
            nm = sum(len(merged[l][g]) for l in range(n_layer) for g in range(n_kv))
            print("  %-60s kept per head %s%s; wrong rules caught: %s"
                  % (" ".join([spec] + list(extra)), counts, ", %d merged" % nm if nm else "", ", ".join(hits) or "-"))


def choice(ref, p):
    """What the rule picks for every head: kept set and merge assignment."""
    out = []
    for l in range(ref.st.n_layer):
        keep = ref.target(p, l)
        for g in range(ref.st.n_head_kv):
            kept = ref.kept(p, l, g, keep)
            out.append((kept, sorted((e, c) for e, (c, _) in ref.merges(p, l, g, kept).items())))
    return out


def params_matter(name, ref, spec, rep):
    """Each key the spec sets to a non-default value changes the reference's
    choice somewhere, so that matching kvfold proves kvfold honours it."""
    p = parse_spec(spec)
    mine = None
    for key in spec_keys(spec):
        q = parse_spec(spec_without(spec, key))
        if q[key] == p[key] or (key == "merge" and p[key] in COSINE and q[key] in COSINE) or key in DECODE_ONLY:
            continue  # a default; the same cosine assignment (test_rule_merge checks the rest); or
            #           a decoding key (run_cases checks it leaves the compressed prompt alone)
        if key in WEAK_KEYS:
            # heads where kvfold ignoring the key would fail the comparison
            bad = sum(judge(ref, p, l, g, ref.kept(q, l, g, ref.target(q, l)))[0] == "bad"
                      for l in range(ref.st.n_layer) for g in range(ref.st.n_head_kv))
            rep.weak[key, p[key]] = rep.weak.get((key, p[key]), 0) + bad
            continue
        mine = mine or choice(ref, p)
        if choice(ref, q) == mine:
            rep.fail.append("%s %s: %s=%s chooses the same entries as the default %s; the case proves nothing"
                            % (name, spec, key, p[key], q[key]))


def run_cases(kvfold, path, name, text, ref, wrong, specs, tmp, rep):
    dumps = {}
    for spec, extra in specs:
        params_matter(name, ref, spec, rep)
        try:
            dump, js = generate(kvfold, path, text, spec, tmp, extra)
        except Failed as e:
            rep.fail.append("%s --kv %s: %s" % (" ".join([name] + list(extra)), spec, e))
            continue
        dumps[spec, tuple(extra)] = dump
        rep.check(name, ref, wrong, spec, extra, dump, js)
        for key in DECODE_ONLY:
            if key not in spec_keys(spec):
                continue
            base = dumps.get((spec_without(spec, key), tuple(extra)))
            if base is None:
                sys.exit("ref_kv: case %s needs the same case without %s before it" % (spec, key))
            rep.decode_only += 1
            if base["compressed"] != dump["compressed"]:
                rep.fail.append("%s %s %s: %s changes the compressed prompt (it is for decoding only)"
                                % (name, spec, " ".join(extra), key))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kvfold")
    ap.add_argument("fixtures")
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args()
    rep = Report(a.verbose)
    with tempfile.TemporaryDirectory() as tmp:
        for fx in FIXTURES:
            path = os.path.join(a.fixtures, fx)
            model = RefModel(path)
            c = model.c
            if c["n_head_kv"] >= c["n_head"]:
                sys.exit("ref_kv: %s is not GQA (%d heads, %d kv heads)" % (fx, c["n_head"], c["n_head_kv"]))
            # generate adds BOS as the model's tokenizer says: tokenize --bos.
            ids = tokenize(a.kvfold, path, PROMPT, True)
            if prompt_ids(a.kvfold, path, PROMPT) != ids:
                sys.exit("ref_kv: %s: generate's prompt tokens are not tokenize --bos's" % fx)
            st = Stats(model, ids)
            bare = tokenize(a.kvfold, path, PROMPT, False)
            bos = ids[0] if ids[1:] == bare else None
            st.recon_ids = tuple(tokenize(a.kvfold, path, t, False) for t in (RECON_FIRST, RECON_NEXT, RECON_TURN)) + (
                [t for t in ids if t != bos],)
            print("%s: %d layers, %d heads on %d kv heads, prompt %d tokens"
                  % (fx, c["n_layer"], c["n_head"], c["n_head_kv"], st.n))
            run_cases(a.kvfold, path, fx, PROMPT, Ref(st), {w: Ref(st, wrong=w) for w in WRONG}, cases(st.n),
                      tmp, rep)

            if fx == FIXTURES[0]:
                # A pseudo-image: image positions from the token counts of the
                # text around the marker; its rows are the token embeddings of
                # the words file's tokens in order, repeated (src/prompt.c;
                # llama scales no embedding), so the reference runs them as
                # those tokens. Text entries: imgrand and LOOK-M's text prior
                # keep them all.
                words = os.path.join(tmp, "words.txt")
                with open(words, "w") as fh:
                    fh.write(IMAGE_WORDS)
                media = ["--pseudo-image", "%s:%dx%d" % (words, *IMAGE_GRID)]
                text = IMAGE_PREFIX + "<image>" + IMAGE_SUFFIX
                pre, suf = tokenize(a.kvfold, path, IMAGE_PREFIX, True), tokenize(a.kvfold, path, IMAGE_SUFFIX, False)
                if prompt_ids(a.kvfold, path, text, media) != pre + suf:
                    sys.exit("ref_kv: %s: generate's text tokens around the image are not tokenize's" % fx)
                wid = tokenize(a.kvfold, path, IMAGE_WORDS, False)
                n_img = IMAGE_GRID[0] * IMAGE_GRID[1]
                ist = Stats(model, pre + [wid[t % len(wid)] for t in range(n_img)] + suf)
                image = np.zeros(ist.n, bool)
                image[len(pre): len(pre) + n_img] = True
                print("%s: pseudo-image prompt, %d text + %d image tokens" % (fx, ist.n - n_img, n_img))
                run_cases(a.kvfold, path, fx, text, Ref(ist, image=image),
                          {w: Ref(ist, image=image, wrong=w) for w in WRONG},
                          [(spec, extra + media) for spec, extra in image_cases(ist.n, ist.n - n_img)], tmp, rep)

    print("%d heads checked; %d matched up to float32 near-ties (%d entries swapped at the cut, |score diff| < %g "
          "of the head's scale)" % (rep.heads, rep.near, rep.swapped, TOL))
    print("%d merged entries checked; %d went to a kept entry within %g of the best cosine but not the best"
          % (rep.merged, rep.merge_near, CTOL))
    print("%d layer budgets checked; %d case(s) accepted on a search near-tie (margin < %g); Gini within %.2g"
          % (rep.layers_budgeted, rep.budget_near, PTOL, rep.gini_diff))
    print("%d decoding-only run(s) compressed the prompt as without the key" % rep.decode_only)
    for (key, val), bad in sorted(rep.weak.items()):
        print("  %s=%g: the default %s fails the comparison in %d head(s) over all prompts" % (key, val, key, bad))
        if bad == 0:
            rep.fail.append("%s=%g never changes the choice beyond a float32 near-tie: no case proves it honoured"
                            % (key, val))
    for w, hits in rep.wrong_hits.items():
        print("  wrong rule %-18s mismatches kvfold in %d case(s)" % (w, hits))
        if hits == 0:
            rep.fail.append("the deliberately wrong rule %r matches kvfold everywhere: kvfold follows it, or "
                            "the comparison cannot tell it from the right one" % w)
    if rep.fail:
        print("FAIL (%d):" % len(rep.fail))
        for f in rep.fail:
            print("  " + f)
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
