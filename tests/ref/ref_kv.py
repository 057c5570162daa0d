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
float64). The rules are written from DESIGN.md section 7 and the comments
of src/kv/policy/*.c: budget (ratio: floor(budget N + 0.5), count: min(count,
N)), selection (higher score kept first, ties: the earlier entry; entries
that are always kept count even past the budget), GQA (a kv head's score is
the mean over the query heads that share it), and each method's score.
Where the two differed, DESIGN.md decided: its RoCo never evicts the sinks
(this test found roco.c protecting only the last 10 entries and the largest
deviations; fixed). imgrand runs on a pseudo-image prompt (llama), whose
image positions follow from the token counts of the text around the marker.

C computes in float32, the reference in float64, so entries whose reference
scores differ by less than TOL x (the head's largest |score|) may swap at the
cut; such swaps are accepted and counted. Everything else must match, and
every head must hold exactly the rule's count. Exact ties (the zeros that a
sliding window leaves in SnapKV's scores on gemma3) are exact in float32 too,
so there the earlier entry must win.

The script also checks that each non-default key it passes changes the
reference's choice (so the comparison proves the key is honoured), and that
deliberately wrong rules (no pooling, no GQA mean, reversed ties, ...) do
NOT match kvfold, so the comparison can fail.
"""
import argparse
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
BASE = dict(budget=0.2, sinks=4, recent=0.0, window=0, kernel=0, seed=0, alloc="uniform", beta=20)
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
}
# Rules whose scores C computes exactly (integers, or the splitmix64 stream):
# no tolerance.
EXACT = ("streaming", "random", "imgrand")


def parse_spec(spec):
    """"preset:k=v,...[+budget=pyramid:beta=N]" -> policy dict."""
    head, *stages = spec.split("+")
    name, _, args = head.partition(":")
    p = dict(BASE, method=name, **PRESETS[name])
    for kv in filter(None, args.split(",")):
        k, v = kv.split("=")
        p[k] = int(v) if k in ("sinks", "window", "kernel", "seed", "beta") else float(v)
    for st in stages:
        what, _, args = st.partition(":")
        if what != "budget=pyramid":
            raise ValueError("ref_kv: stage %r not modelled" % st)
        p["alloc"] = "pyramid"
        for kv in filter(None, args.split(",")):
            k, v = kv.split("=")
            p[k] = int(v)
    return p


def spec_keys(spec):
    """The keys a spec sets explicitly."""
    return [kv.split("=")[0] for part in spec.split("+") for kv in part.partition(":")[2].split(",") if kv]


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
    keep = max(keep, int(np.isinf(score).sum()))
    if keep >= n:
        return list(range(n))
    idx = np.arange(n)
    order = np.lexsort((-idx if wrong == "tie-later" else idx, -score))
    return sorted(order[:keep].tolist())


class Stats:
    """What the rules read, from the full float64 attention of one prompt."""

    def __init__(self, model, ids):
        c = model.c
        model.record = []
        model.hidden(ids)
        rec, model.record = model.record, None
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
            self.layers.append(dict(
                a=a,                                   # [kv head][query head of it][query][key]
                mean=a.mean(axis=1),                   # GQA: mean over the group
                sum=a.mean(axis=1).sum(axis=1),        # sum over every prompt query
                sq=(a * a).mean(axis=1).sum(axis=1),   # sum of squares
                count=vis.sum(axis=0).astype(np.float64),  # queries that saw each entry
                k=r["k"],                              # [pos][kv head][head_dim], post-RoPE
            ))


class Ref:
    """The reference rules; `wrong` names one deliberately broken variant."""

    def __init__(self, stats, image=None, wrong=None):
        self.st, self.image, self.wrong = stats, image, wrong

    def target(self, p, l):
        return layer_keep(p, self.st.n, l, self.st.n_layer, self.wrong)

    def scores(self, p, l, g, keep):
        """Score arrays for one head: the reference first, then (RoCo only,
        when its protected set sits on a near-tie) the other valid ones."""
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
        if m in ("random", "imgrand"):
            mix = 1 if w == "random-oneseed" else (GOLDEN * (l * 4099 + g + 1)) & M64
            s = np.array([(z >> 40) / 16777216.0 for z in splitmix64(p["seed"] ^ mix, n)])
            if m == "imgrand":
                s[~self.image] = np.inf
            return [s]
        raise ValueError(m)

    def roco(self, p, L, g, keep):
        n = self.st.n
        protect = math.floor(keep * p["recent"] + 0.5)
        cnt = np.where(L["count"] > 0, L["count"], 1.0)
        mean = L["sum"][g] / cnt
        sd = np.sqrt(np.maximum(L["sq"][g] / cnt - mean * mean, 0.0))
        # DESIGN.md section 7: the sinks and the last 10 entries are never
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
    cands = ref.scores(p, l, g, keep)
    want = select(cands[0], keep, ref.wrong)
    if kept == want:
        return "exact", want, 0
    swapped = len(set(want) - set(kept))
    if p["method"] not in EXACT:
        if any(consistent(kept, s, keep, TOL, ref.wrong == "tie-later") for s in cands):
            return "near", want, swapped
    return "bad", want, swapped


# ------------------------------------------------------------------- kvfold --

def run(cmd):
    # generate prints a token's bytes, which need not be whole UTF-8.
    # Passive OpenMP waits: spinning threads crawl on a busy 2-core machine.
    r = subprocess.run(cmd, capture_output=True, env=dict(os.environ, OMP_WAIT_POLICY="PASSIVE"))
    if r.returncode != 0:
        sys.exit("ref_kv: %s failed (%d):\n%s" % (" ".join(cmd), r.returncode, r.stderr.decode(errors="replace")))
    return r.stdout.decode(errors="replace")


def tokenize(kvfold, model, text, bos):
    out = run([kvfold, "tokenize", "-m", model, "-p", text] + (["--bos"] if bos else []))
    return [int(x) for x in out.split()]


def prompt_ids(kvfold, model, text):
    """The token ids generate runs, from its --dump-tags lines
    ("pos text media row col id piece")."""
    out = run([kvfold, "generate", "-m", model, "-p", text, "-n", "1", "--dump-tags", "-t", "1"])
    return [int(f[5]) for f in (line.split() for line in out.splitlines()) if len(f) > 5 and f[1] == "text"]


def generate(kvfold, model, text, spec, tmp, extra=()):
    path = os.path.join(tmp, "kv.json")
    run([kvfold, "generate", "-m", model, "-p", text, "-n", "1", "--kv", spec, "--dump-kv", path, "-t", "1"]
        + list(extra))
    with open(path) as fh:
        return json.load(fh)


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
    ]


# Deliberately wrong rules, and the methods they apply to; each must fail to
# match kvfold in at least one case.
WRONG = {
    "tie-later": None,                   # ties kept for the later entry (every method)
    "h2o-head0": ("h2o",),               # no GQA mean: the first query head only
    "snapkv-nopool": ("snapkv", "pyramidkv"),
    "pyramid-reversed": ("snapkv", "pyramidkv"),
    "roco-noprotect": ("roco",),
    "roco-nosinks": ("roco",),           # sinks left to compete (DESIGN protects them)
    "keydiff-rawmean": ("keydiff",),     # anchor = mean of raw keys, not of unit keys
    "streaming-nosinks": ("streaming",),
    "random-oneseed": ("random", "imgrand"),  # the same stream for every head
    "budget-floor": ("knorm",),          # floor(budget N) instead of floor(budget N + 0.5)
}


class Report:
    def __init__(self, verbose):
        self.verbose, self.fail, self.near, self.swapped, self.heads = verbose, [], 0, 0, 0
        self.wrong_hits = {k: 0 for k in WRONG}

    def check(self, name, ref, refs_wrong, spec, extra, dump, n_layer, n_kv):
        p = parse_spec(spec)
        case = " ".join([name, "--kv", spec] + list(extra))
        if dump["n_prompt"] != ref.st.n:
            self.fail.append("%s: kvfold's prompt has %d tokens, the reference %d"
                             % (case, dump["n_prompt"], ref.st.n))
            return
        if dump["final"] != dump["compressed"] or dump["n_past"] != dump["n_prompt"]:
            self.fail.append("%s: -n 1 decoded a token (final differs from compressed)" % case)
        comp = dump["compressed"]
        if len(comp) != n_layer or any(len(h) != n_kv for h in comp):
            self.fail.append("%s: dump shape is not [%d][%d]" % (case, n_layer, n_kv))
            return
        counts, bad = [], []
        for l in range(n_layer):
            for g in range(n_kv):
                kept = comp[l][g]
                verdict, want, swapped = judge(ref, p, l, g, kept)
                self.heads += 1
                counts.append(len(kept))
                s = ref.scores(p, l, g, ref.target(p, l))[0]
                cm, rm = sorted(set(kept) - set(want)), sorted(set(want) - set(kept))
                diff = ("kept %d, rule keeps %d; kvfold only %s (ref scores %s), reference only %s (ref scores %s)"
                        % (len(kept), len(want), cm, np.round(s[cm], 7).tolist(), rm, np.round(s[rm], 7).tolist()))
                if verdict == "near":
                    self.near += 1
                    self.swapped += swapped
                    if self.verbose:
                        print("    near-tie accepted, layer %d head %d: %s" % (l, g, diff))
                elif verdict == "bad":
                    bad.append("layer %d head %d: %s" % (l, g, diff))
        hits = []
        for wname, r in refs_wrong.items():
            methods = WRONG[wname]
            if methods is not None and p["method"] not in methods:
                continue
            verdicts = [judge(r, p, l, g, comp[l][g])[0] for l in range(n_layer) for g in range(n_kv)]
            if "bad" not in verdicts:
                if bad:
                    bad.insert(0, "kvfold's sets are what the wrong rule %r picks" % wname)
            elif not bad:  # a catch counts only where the right rule matches
                self.wrong_hits[wname] += 1
                hits.append(wname)
        if bad:
            self.fail.append("%s: %d of %d heads differ from the rule\n      %s"
                             % (case, len([b for b in bad if b.startswith("layer")]), n_layer * n_kv,
                                "\n      ".join(bad[:4])))
        if self.verbose:
            print("  %-60s kept per head %s; wrong rules caught: %s"
                  % (" ".join([spec] + list(extra)), counts, ", ".join(hits) or "-"))


def params_matter(name, ref, spec, rep):
    """Each key the spec sets to a non-default value changes the reference's
    choice somewhere, so that matching kvfold proves kvfold honours it."""
    p = parse_spec(spec)
    for key in spec_keys(spec):
        q = dict(p)
        q[key] = parse_spec(spec.split(":")[0] + ("+budget=pyramid" if p["alloc"] == "pyramid" else ""))[key]
        if q[key] == p[key]:
            continue
        same = all(select(ref.scores(p, l, g, ref.target(p, l))[0], ref.target(p, l))
                   == select(ref.scores(q, l, g, ref.target(q, l))[0], ref.target(q, l))
                   for l in range(ref.st.n_layer) for g in range(ref.st.n_head_kv))
        if same:
            rep.fail.append("%s %s: %s=%s chooses the same entries as the default %s; the case proves nothing"
                            % (name, spec, key, p[key], q[key]))


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
            print("%s: %d layers, %d heads on %d kv heads, prompt %d tokens"
                  % (fx, c["n_layer"], c["n_head"], c["n_head_kv"], st.n))
            ref = Ref(st)
            wrong = {w: Ref(st, wrong=w) for w in WRONG}
            for spec, extra in cases(st.n):
                params_matter(fx, ref, spec, rep)
                rep.check(fx, ref, wrong, spec, extra, generate(a.kvfold, path, PROMPT, spec, tmp, extra),
                          c["n_layer"], c["n_head_kv"])

            if fx == FIXTURES[0]:
                # imgrand on a pseudo-image: text entries always kept, image
                # entries by the seeded stream. Image positions from the token
                # counts of the text around the marker.
                words = os.path.join(tmp, "words.txt")
                with open(words, "w") as fh:
                    fh.write(IMAGE_WORDS)
                text = IMAGE_PREFIX + "<image>" + IMAGE_SUFFIX
                start = len(tokenize(a.kvfold, path, IMAGE_PREFIX, True))
                n_img = IMAGE_GRID[0] * IMAGE_GRID[1]
                n = start + n_img + len(tokenize(a.kvfold, path, IMAGE_SUFFIX, False))
                image = np.zeros(n, bool)
                image[start: start + n_img] = True
                ist = argparse.Namespace(n=n, n_layer=c["n_layer"], n_head_kv=c["n_head_kv"],
                                         layers=[None] * c["n_layer"])
                iref = Ref(ist, image=image)
                iwrong = {w: Ref(ist, image=image, wrong=w) for w in ("tie-later", "random-oneseed")}
                print("%s: imgrand, %d text + %d image tokens" % (fx, n - n_img, n_img))
                media = ["--pseudo-image", "%s:%dx%d" % (words, *IMAGE_GRID)]
                for spec in ("imgrand:budget=0.8", "imgrand:budget=%d,seed=3" % (n - n_img + 20)):
                    params_matter(fx, iref, spec, rep)
                    rep.check(fx, iref, iwrong, spec, media, generate(a.kvfold, path, text, spec, tmp, media),
                              c["n_layer"], c["n_head_kv"])

    print("%d heads checked; %d matched up to float32 near-ties (%d entries swapped at the cut, |score diff| < %g "
          "of the head's scale)" % (rep.heads, rep.near, rep.swapped, TOL))
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
