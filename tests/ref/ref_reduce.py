#!/usr/bin/env python3
"""Checks kvfold's reduce stage (LightKV, ToMe, FastV: vision rows merged or
dropped inside the decoder during prefill) against an independent float64
numpy reference on the tiny LLaVA fixture.

    ref_reduce.py --dump BUILD/tests/dump_logits MODEL [--mmproj F]

The reference runs the decoder layer by layer from tests/ref/ref_model.py's
pieces (RefModel's norm, attention, ffn, rope) on the image embeddings of
tests/ref/ref_llava.py, and after layer lambda (a count: lambda = 1 is after
the first layer) applies the rule, written from docs/METHODS.md §5.6 and
the LightKV paper's section 3.2, not from kvfold's C code:

  LightKV  weights xi_i = sum_h sum_{j text} softmax_i(scale q_i . k_j) of
           layer lambda's post-RoPE queries (every row of the pass) and keys
           (text rows), no mask, softmax over the query axis, query head h
           on kv head h // (n_head / n_head_kv). Per image (run of image rows
           of one media index, grid = max row/col + 1 of its original rows)
           with at least 8 w^2 rows: w x w windows, the row at (r, c) in
           window (r*w // rows, c*w // cols); per window the rows in order
           alternate A (even places) / B (odd); each A's best B by cosine of
           the hidden states after layer lambda (ties: earlier B); the
           r = min(floor(ratio m), m // 2) A of highest similarity (ties:
           earlier A) merge: x_b' = (xi_b x_b + sum xi_a x_a) / (xi_b +
           sum xi_a), the A rows removed.
  ToMe     the same matching over each whole image, on the layer's keys
           before RoPE averaged over kv heads; size-weighted means (sizes
           start at 1 and add up).
  FastV    after layer K, each row's score is the causal attention the
           pass's last row pays it, mean over query heads; of the v image
           rows the v - floor(v (1 - R) + 0.5) lowest go (ties: the later
           first).
  The pass's last row is never reduced; survivors keep their positions.

For each spec, dump_logits --kv SPEC runs the prompt PROMPT with two test
images (those of compare_llava.py) and writes the last position's logits and
each layer's cached positions. Checks: the reference's own layer loop
without a rule equals RefModel.logits; per spec the last position's logits
within --tol (max |a - b| / max |b|) and every layer's entry count and
positions; and each of several wrong rules (MUTATIONS) moves the logits more
than 10x the bound from the engine's, so agreement pins the rules.
Exit status 0 on success, 1 on a failed check, 77 when numpy, Pillow, gguf
or a file is absent (skip).
"""
import argparse
import math
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    np_missing = None
except ImportError as e:
    np_missing = e

SKIP = 77
PROMPT = "USER: <image>\n<image>\nWhat changed? ASSISTANT:"
SPECS = ["lightkv:layers=1,windows=2", "lightkv:layers=1,windows=1,ratio=0.3", "tome:layers=1", "fastv:k=1",
         "fastv:k=1,r=0.75"]
# (what is wrong, spec, flag the reference's rules read). LightKV's softmax
# over the key axis instead of the query axis needs no entry of its own: it
# gives every row xi = n_head, the plain mean of "uniform".
MUTATIONS = [
    ("lightkv: plain mean, not weighted by xi", "lightkv:layers=1,windows=2", "uniform"),
    ("lightkv: xi over every key column, not text", "lightkv:layers=1,windows=2", "all_keys"),
    ("lightkv: A = odd places, B = even", "lightkv:layers=1,windows=2", "swap_ab"),
    ("lightkv: one window, not 2x2", "lightkv:layers=1,windows=2", "one_window"),
    ("tome: metric = keys after RoPE", "tome:layers=1", "rope_metric"),
    ("fastv: the highest scores dropped", "fastv:k=1", "drop_high"),
    ("fastv: positions renumbered after the drop", "fastv:k=1", "renumber"),
]


class Rule:
    """A kv_spec of the three reduce presets, with kvfold's defaults (ratio
    0.5; fastv k=2); `mut` names a deliberately wrong variant."""

    def __init__(self, spec, mut=None):
        name, _, args = spec.partition(":")
        if name not in ("lightkv", "tome", "fastv"):
            raise ValueError("spec %r: not a reduce preset" % spec)
        kv = dict(a.split("=") for a in args.split(",")) if args else {}
        self.name, self.mut = name, mut
        self.ratio = float(kv.get("ratio", kv.get("r", 0.5)))
        if name == "fastv":
            self.layers = [int(kv.get("k", 2))]
        elif "layers" in kv:
            self.layers = [int(v) for v in kv["layers"].split(",")]
        else:
            raise ValueError("spec %r: the fixture has too few layers for the default ones; give layers=" % spec)
        self.windows = [int(v) for v in kv["windows"].split(",")] if "windows" in kv else [4, 2, 1][:len(self.layers)]


class Pass:
    """The rows of one forward pass: hidden states x [T, E], true positions
    pos, media index (-1: text), grid row and col, ToMe sizes."""

    def __init__(self, x, ids, grid):
        self.x = x
        T = len(ids)
        self.pos = np.arange(T, dtype=np.float64)
        self.media = np.full(T, -1)
        self.row = np.full(T, -1)
        self.col = np.full(T, -1)
        self.size = np.ones(T)
        k, t = -1, 0
        for i in range(T):
            if ids[i] < 0:
                if i == 0 or ids[i - 1] >= 0 or t == grid * grid:
                    k, t = k + 1, 0
                self.media[i], self.row[i], self.col[i] = k, t // grid, t % grid
                t += 1
        # An image's grid from its original rows: later steps keep it.
        self.grid = {m: (int(self.row[self.media == m].max()) + 1, int(self.col[self.media == m].max()) + 1)
                     for m in range(k + 1)}

    def groups(self):
        """Each image's rows (maximal runs of one media index), the last row
        of the pass left out: it is never reduced."""
        out, i, m = [], 0, len(self.pos) - 1
        while i < m:
            if self.media[i] < 0:
                i += 1
                continue
            j = i
            while j < m and self.media[j] == self.media[i]:
                j += 1
            out.append(np.arange(i, j))
            i = j
        return out

    def apply(self, into, w):
        """Merges a into into[a] (w-weighted means; w None: unit weights),
        drops into = -1, keeps rows with into[i] == i in order; w's totals
        become the rows' sizes."""
        T = len(self.pos)
        w = np.ones(T) if w is None else np.asarray(w, dtype=np.float64)
        keep = into == np.arange(T)
        x, tot = self.x.copy(), w.copy()
        for b in np.flatnonzero(keep):
            part = np.flatnonzero(into == b)  # b itself and the rows merged into it
            if len(part) > 1:
                tot[b] = w[part].sum()
                x[b] = (w[part] @ self.x[part]) / tot[b] if tot[b] > 0 else self.x[part].mean(axis=0)
        self.x, self.size = x[keep], tot[keep]
        for name in ("pos", "media", "row", "col"):
            setattr(self, name, getattr(self, name)[keep])


class Margins:
    """The closest call among the matching's decisions (relative cosine
    gaps): a float32 engine may decide a near-tie the other way."""

    def __init__(self):
        self.min = math.inf

    def note(self, gap):
        self.min = min(self.min, gap)


def bipartite(feat, rows, ratio, into, margins, swap=False):
    """ToMe's bipartite soft matching on rows (in order): A = even places, B =
    odd (swap: the other way round); each A's most similar B by cosine (ties:
    the earlier B); the r = min(floor(ratio m), m // 2) A rows of highest
    similarity (ties: the earlier A) get into[a] = their B."""
    m = len(rows)
    r = min(int(math.floor(ratio * m)), m // 2)
    if r <= 0:
        return
    A, B = (rows[1::2], rows[0::2]) if swap else (rows[0::2], rows[1::2])
    na = np.linalg.norm(feat[A], axis=1)
    nb = np.linalg.norm(feat[B], axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        cos = (feat[A] @ feat[B].T) / na[:, None] / nb[None, :]
    cos = np.where(np.isfinite(cos), cos, 0.0)
    match = cos.argmax(axis=1)  # the first maximum: the earlier B
    best = cos[np.arange(len(A)), match]
    order = np.argsort(-best, kind="stable")  # ties: the earlier A
    for a in order[:r]:
        into[A[a]] = B[match[a]]
        if len(B) > 1:
            margins.note(best[a] - np.sort(cos[a])[-2])
    if r < len(A):
        margins.note(best[order[r - 1]] - best[order[r]])


def qk(dec, xn, il, pos):
    """Layer il's queries and keys of the normed rows xn: (keys before RoPE,
    queries after, keys after), as RefModel.attention computes them (Llama,
    Qwen2: the LLaVA decoders)."""
    c = dec.c
    T, hd = len(xn), c["head_dim"]
    p = "blk.%d." % il
    q = dec.linear(xn, p + "attn_q").reshape(T, c["n_head"], hd)
    k = dec.linear(xn, p + "attn_k").reshape(T, c["n_head_kv"], hd)
    return k, dec.rope(q, pos, c["rope_base"]), dec.rope(k, pos, c["rope_base"])


def lightkv_weights(q, k, text, scale, mut):
    """xi_i = sum_h sum_{j text} softmax over i of scale q_i . k_j."""
    T, nh, _ = q.shape
    if mut == "uniform":
        return np.ones(T)
    group = nh // k.shape[1]
    J = np.arange(T) if mut == "all_keys" else np.flatnonzero(text)
    xi = np.zeros(T)
    for h in range(nh):
        s = scale * q[:, h, :] @ k[J, h // group, :].T  # [T queries, text keys]
        s = np.exp(s - s.max(axis=0, keepdims=True))
        xi += (s / s.sum(axis=0, keepdims=True)).sum(axis=1)
    return xi


def reduce_step(dec, rule, step, ps, xn, il, rec, margins):
    T = len(ps.pos)
    into = np.arange(T)
    w = None
    if rule.name == "lightkv":
        k_pre, q, k = qk(dec, xn, il, ps.pos)
        w = lightkv_weights(q, k, ps.media < 0, 1.0 / math.sqrt(dec.c["head_dim"]), rule.mut)
        win = 1 if rule.mut == "one_window" else rule.windows[step]
        for g in ps.groups():
            if len(g) < 8 * win * win:
                continue
            R, C = ps.grid[int(ps.media[g[0]])]
            for wr in range(win):
                for wc in range(win):
                    rows = g[(ps.row[g] * win // R == wr) & (ps.col[g] * win // C == wc)]
                    bipartite(ps.x, rows, rule.ratio, into, margins, swap=rule.mut == "swap_ab")
    elif rule.name == "tome":
        k_pre, _, k = qk(dec, xn, il, ps.pos)
        metric = (k if rule.mut == "rope_metric" else k_pre).mean(axis=1)
        for g in ps.groups():
            bipartite(metric, g, rule.ratio, into, margins)
        w = ps.size
    else:
        score = rec["attn"][:, -1, :].mean(axis=0)
        vis = np.flatnonzero(ps.media[:T - 1] >= 0)
        keep = int(math.floor(len(vis) * (1.0 - rule.ratio) + 0.5))
        s = score[vis] if rule.mut != "drop_high" else -score[vis]
        order = np.argsort(-s, kind="stable")  # ties: the earlier kept, the later dropped
        into[vis[order[keep:]]] = -1
        if 0 < keep < len(vis):
            margins.note((s[order[keep - 1]] - s[order[keep]]) / np.abs(s).max())
    ps.apply(into, w)
    if rule.mut == "renumber":
        ps.pos = np.arange(len(ps.pos), dtype=np.float64)


def forward(dec, x, ids, grid, rule=None):
    """Last position's logits and every layer's cached positions for input
    embeddings x, with the rule's reduce steps after its layers."""
    c = dec.c
    if c["arch"] not in ("llama", "qwen2"):
        raise ValueError("arch %r: the LLaVA decoders are Llama or Qwen2" % c["arch"])
    ps = Pass(x, ids, grid)
    steps = {l - 1: i for i, l in enumerate(rule.layers)} if rule else {}
    margins = Margins()
    cached = []
    for il in range(c["n_layer"]):
        p = "blk.%d." % il
        cached.append([int(v) for v in ps.pos])
        xn = dec.norm(ps.x, p + "attn_norm.weight")
        dec.record = [] if il in steps else None
        try:
            h = ps.x + dec.attention(xn, il, ps.pos)
            rec = dec.record[0] if dec.record else None
        finally:
            dec.record = None
        ps.x = h + dec.ffn(dec.norm(h, p + "ffn_norm.weight"), il)
        if il in steps:
            reduce_step(dec, rule, steps[il], ps, xn, il, rec, margins)
    h = dec.norm(ps.x[-1:], "output_norm.weight")
    out = dec.W("output.weight" if dec.w.has("output.weight") else "token_embd.weight")
    return (h @ out.T)[0], cached, margins.min


def run_engine(dump, model, mmproj, images, spec, tmp):
    out = os.path.join(tmp, "logits.bin")
    cmd = [dump] + (["--mmproj", mmproj] if mmproj else [])
    for p in images:
        cmd += ["--image", p]
    cmd += ["--kv", spec, "--prompt", PROMPT, model, out]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stdout + r.stderr)
        raise SystemExit("FAIL: %s exited with %d" % (" ".join(cmd), r.returncode))
    info, cached = {}, {}
    for line in r.stdout.splitlines():
        k, _, v = line.partition(" ")
        if k == "layer_pos":
            l, _, rest = v.partition(" ")
            cached[int(l)] = [int(t) for t in rest.split()]
        else:
            info[k] = v
    n_vocab = int(info["n_vocab"])
    ids = [int(t) for t in info["ids"].split()]
    entries = [int(t) for t in info["layer_entries"].split()]
    logits = np.fromfile(out, dtype="<f4").astype(np.float64)
    if logits.size != n_vocab or len(ids) != int(info["n_tokens"]):
        raise SystemExit("FAIL: %s holds %d floats for n_vocab %d, %d ids for %s tokens"
                         % (out, logits.size, n_vocab, len(ids), info["n_tokens"]))
    return ids, logits, entries, [cached[l] for l in range(len(entries))]


def rel_err(a, b):
    return float(np.abs(a - b).max() / np.abs(b).max())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dump", required=True, help="path of the dump_logits program")
    ap.add_argument("model")
    ap.add_argument("--mmproj", help="vision projector GGUF for a decoder GGUF")
    ap.add_argument("--tol", type=float, default=1e-4)
    a = ap.parse_args()
    for p in (a.dump, a.model, a.mmproj):
        if p and not os.path.exists(p):
            print("SKIP: %s is absent" % p)
            return SKIP
    missing = np_missing
    try:
        import gguf  # noqa: F401
        import PIL  # noqa: F401
    except ImportError as e:
        missing = missing or e
    if missing:
        print("SKIP: %s (the reference needs numpy, gguf and Pillow)" % missing)
        return SKIP
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from ref_llava import RefLlava, make_test_images

    ref = RefLlava(a.model, a.mmproj)
    if not ref.vis.c["drop_cls"]:
        raise SystemExit("FAIL: a CLS row has no grid cell; the fixture's projector drops it")
    grid = ref.vis.c["image_size"] // ref.vis.c["patch_size"]
    failed = 0

    def check(ok, what):
        nonlocal failed
        failed += not ok
        print("%-4s %s" % ("ok" if ok else "FAIL", what))

    with tempfile.TemporaryDirectory() as tmp:
        images = make_test_images(tmp)
        embd = np.concatenate([ref.vis.embed_image(p) for p in images])
        ref_ids, x0, engine = None, None, {}
        for spec in SPECS:
            ids, got, entries, cached = run_engine(a.dump, a.model, a.mmproj, images, spec, tmp)
            if ref_ids is None:
                ref_ids, x0 = ids, ref.dec.embed(ids, embd)
                full = ref.dec.logits(ids, embd)[-1]
                plain = forward(ref.dec, x0, ids, grid)[0]
                check(rel_err(plain, full) < 1e-12, "reference layer loop without a rule == RefModel (%.1e); "
                      "%d positions, %d of them image rows" % (rel_err(plain, full), len(ids),
                                                              sum(i < 0 for i in ids)))
            if ids != ref_ids:
                check(False, "%s: the prompt's ids differ between runs" % spec)
                continue
            engine[spec] = got, cached
            want, want_cached, margin = forward(ref.dec, x0, ids, grid, Rule(spec))
            err = rel_err(got, want)
            print("     %s: entries per layer engine %s, reference %s; closest matching call %.1e"
                  % (spec, entries, [len(c) for c in want_cached], margin))
            check(entries == [len(c) for c in cached], "%s: layer_entries agree with layer_pos" % spec)
            check(entries == [len(c) for c in want_cached], "%s: entries per layer" % spec)
            for l, (g, w) in enumerate(zip(cached, want_cached)):
                if g != w:
                    check(False, "%s: layer %d keeps positions %s; the reference %s (engine only %s, "
                          "reference only %s)" % (spec, l, g, w, sorted(set(g) - set(w)), sorted(set(w) - set(g))))
                    break
            else:
                check(True, "%s: every layer's cached positions" % spec)
            check(bool(np.isfinite(got).all()) and err <= a.tol,
                  "%s: last position's logits, max rel err %.3e (bound %.1e)" % (spec, err, a.tol))

        # Each wrong rule must miss the engine by more than 10x the bound.
        for what, spec, mut in MUTATIONS:
            if spec not in engine:
                continue
            got, cached = engine[spec]
            bad, bad_cached, _ = forward(ref.dec, x0, ref_ids, grid, Rule(spec, mut))
            err = rel_err(got, bad)
            check(err > 10 * a.tol, "wrong rule (%s) misses the engine by %.2e%s" % (
                what, err, "" if bad_cached == cached else " and keeps other positions"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
