#!/usr/bin/env python3
"""ref_kv.py's brute-force check of the kept sets, on a real (quantised) model.

    ref_kv_model.py KVFOLD MODEL PROMPT_FILE [--chat] [--kv SPEC]... [--answer TEXT]
                    [--pseudo-image WORDS:RxC] [--dump-logits BIN] [--tmp DIR] [-v]

The tiny fixtures of ref_kv.py cannot show what a rule does on a trained
model's attention; this runs the same comparison on one prompt of a real
GGUF model (e.g. Qwen2.5-Coder-1.5B Q4_K_M). For each --kv SPEC

    KVFOLD generate -m MODEL -f PROMPT_FILE [--chat] -n 1 --kv SPEC --dump-kv F -t 1 -b 4096 --json

and the positions each (layer, kv head) holds after compression (and the
merge pairs) are judged by ref_kv.judge / judge_merge against the rule applied
to ref_model.RefModel's float64 attention, with ref_kv's rules and near-tie
tolerances (TOL of the head's largest score, CTOL in cosine). A set that fails
is then judged at wider tolerances, and the smallest that accepts it is
printed: a swap at the cut of a few 1e-4 of the scale is float32 against
float64 over many layers, a set that no tolerance accepts is a different rule.

The prompt's ids are generate's own (--dump-tags), so the chat template and
tokenizer are kvfold's; a --pseudo-image's rows are the token embeddings of
the words file's tokens, repeated (src/session/prompt.c), and the reference
runs them as those tokens. -b 4096 keeps the prompt in one pass of dequantised
float32 matrix products (ops.c: from 32 rows on; a tail of fewer rows would
round activations to 8 bits, which the reference does not model).

The model is dequantised one matrix at a time when the forward pass needs it
(float64 of a 1.5B model would take 12 GB). With --dump-logits (the
dump_logits test tool), the reference's logits after the last token are
checked against kvfold's on the same ids (all rows go through the float32
products, so they agree to float32 rounding).

--answer: the needle's text (e.g. the five digits); the tokens that spell it
are located in the prompt and, per spec, the layers (and heads) that keep all
of them are counted, for kvfold and for the reference rule.

Controls: ref_kv's deliberately wrong rules for the spec's method are
judged on the same sets; the heads where each fails are printed, so that a
match means the comparison could have told them apart.

Not a ctest: it needs the 1.5B model and ~10 minutes of CPU. The runs that
tell whether our methods lose a needle by their rule or by a bug (2 cores, one of them busy; the reference's forward pass ~3.5 min, each spec
~40 s; --stats FILE saves the forward pass for a rerun, 2.7 GB):

    KV="--kv h2o:budget=0.2 --kv snapkv:budget=0.2 --kv csp:budget=0.2 --kv csp:budget=0.2,window=32"
    for tp in 0 1; do for m in avg pivotal weighted; do
        KV="$KV --kv lookm:budget=0.2,text_prior=$tp,merge=$m"; done; done
    KV="$KV --kv prefixkv:budget=0.2 --kv elastic:budget=0.2"
    M=models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
    nice -n 10 .venv/bin/python tests/ref/ref_kv_model.py build/kvfold $M \\
        tests/data/needle_text.txt --chat --answer 48613 --dump-logits build/tests/dump_logits $KV
    nice -n 10 .venv/bin/python tests/ref/ref_kv_model.py build/kvfold $M \\
        tests/data/needle_pimg.txt --pseudo-image tests/data/needle_pimg_words.txt:16x16 \\
        --chat --answer 48613 --dump-logits build/tests/dump_logits $KV

(make build builds both binaries.) The
prompts are eval needle's kind: its haystack sentences (tools/kvfold/lab/eval.c's
words and generator, seed 1), "The secret password is 48613." at 30% depth
and eval's question at the end; needle_text.txt is 80 sentences (928 tokens
with Qwen's chat template), needle_pimg.txt 50 sentences around one 16x16
pseudo-image (849 tokens). At budget 0.2 the full cache and snapkv answer
48613 on both, h2o answers "4". Measured: every (layer, kv head) set of
every spec above is the rule's (one CSP head within a float32 near-tie), every
merge pair the cosine (or position) rule's, and kvfold's last logits are the
reference's within 7e-7 of their scale.
"""
import argparse
import json
import os
import pickle
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ref_kv  # noqa: E402
from ref_kv import Ref, Report, Stats, judge, judge_merge, parse_spec, run, tokenize  # noqa: E402
from ref_model import RefModel  # noqa: E402

# Wider tolerances tried on a failing set, to say how far it is from the rule.
WIDER = (3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1, 1.0)


class LowMemModel(RefModel):
    """RefModel that keeps only the vectors (norms, biases): each matrix is
    dequantised when the forward pass uses it, once per layer."""

    def W(self, name):
        if name in self.cache:
            return self.cache[name]
        w = self.w.get(name).astype(np.float64)
        if w.ndim == 1:
            self.cache[name] = w
        return w

    def hidden_embd(self, x):
        # Stats runs hidden() only; the last row gives the logits check.
        self.last_hidden = super().hidden_embd(x)
        return self.last_hidden

    def last_logits(self):
        name = "output.weight" if self.w.has("output.weight") else "token_embd.weight"
        h, n = self.last_hidden[-1], self.w.n_rows(name)
        out = np.empty(n)
        for r0 in range(0, n, 16384):
            rows = np.arange(r0, min(n, r0 + 16384))
            out[rows] = self.w.rows(name, rows).astype(np.float64) @ h
        return out


def prompt_tags(kvfold, model, gen_args):
    """generate's prompt: [(modality, id, piece)] from --dump-tags."""
    out = run([kvfold, "generate", "-m", model, "-n", "1", "--dump-tags", "-t", "1"] + gen_args)
    tags = []
    for line in out.splitlines():
        if line.startswith("#"):
            continue
        # "pos modality media row col [id piece]": media positions have no token
        f = line.split(None, 6)
        if len(f) < 5 or not f[0].isdigit():
            continue
        if int(f[0]) != len(tags):
            sys.exit("ref_kv_model: --dump-tags position %s out of order" % f[0])
        if len(f) < 7:
            tags.append((f[1], -1, ""))
            continue
        try:
            piece = json.loads(f[6])
        except ValueError:
            piece = f[6]
        tags.append((f[1], int(f[5]), piece))
    return tags


def needle_positions(tags, answer):
    """The positions of the tokens that spell `answer` (first occurrence)."""
    for i in range(len(tags)):
        s, j = "", i
        while j < len(tags) and len(s) < len(answer) + 2:
            s += tags[j][2]
            j += 1
            if s.strip() == answer:
                return list(range(i, j)) if tags[i][2].strip() else list(range(i + 1, j))
            if not answer.startswith(s.strip()):
                break
    sys.exit("ref_kv_model: --answer %r is not spelt by the prompt's tokens" % answer)


def judge_wide(ref, p, l, g, kept):
    """The smallest tolerance in WIDER at which judge accepts kept, or None."""
    saved = ref_kv.TOL
    try:
        for t in WIDER:
            ref_kv.TOL = t
            if judge(ref, p, l, g, kept)[0] != "bad":
                return t
    finally:
        ref_kv.TOL = saved
    return None


def check_logits(a, model, ids, m):
    out = os.path.join(a.tmp, "logits.bin")
    r = subprocess.run([a.dump_logits, "--batch", "4096", "--threads", "1", model, out] + [str(i) for i in ids],
                       capture_output=True, env=dict(os.environ, OMP_WAIT_POLICY="PASSIVE"))
    if r.returncode != 0:
        sys.exit("ref_kv_model: dump_logits failed: %s" % r.stderr.decode(errors="replace")[-400:])
    n_vocab = m.c["n_vocab"]
    got = np.memmap(out, dtype="<f4", mode="r", shape=(len(ids), n_vocab))[-1].astype(np.float64)
    os.unlink(out)
    want = m.last_logits()
    err = np.abs(got - want).max() / np.abs(want).max()
    top_w, top_g = np.argsort(-want)[:5], np.argsort(-got)[:5]
    print("logits after the last token: max|kvfold - ref| / max|ref| = %.3g; argmax kvfold %d %r, ref %d %r "
          "(ref top-2 margin %.4g); top-5 overlap %d/5"
          % (err, top_g[0], m.piece(top_g[0]), top_w[0], m.piece(top_w[0]), want[top_w[0]] - want[top_w[1]],
             len(set(top_w) & set(top_g))))
    return err < 1e-3 and top_g[0] == top_w[0]


def compare(a, spec, gen_args, ref, rep, needle):
    """kvfold's kept sets and merge pairs for spec against the rule -> a
    summary dict, or None when kvfold's layer budgets fail."""
    p = parse_spec(spec)
    st = ref.st
    path = os.path.join(a.tmp, "kv.json")
    js = json.loads(run([a.kvfold, "generate", "-m", a.model, "-n", "1", "--kv", spec, "--dump-kv", path, "-t", "1",
                         "--kv-type", "f32", "-b", "4096", "--json"] + gen_args))
    with open(path) as fh:
        dump = json.load(fh)
    if dump["n_prompt"] != st.n:
        sys.exit("ref_kv_model: kvfold's prompt has %d tokens, the reference %d" % (dump["n_prompt"], st.n))
    nf = len(rep.fail)
    r = rep.budgets(spec, ref, p, js)
    if r is None:
        print("%s: %s" % (spec, rep.fail[-1]))
        return None
    comp, merged = dump["compressed"], dump["merged"]
    out = dict(spec=spec, exact=0, near=0, diff=[], merged=0, merge_near=0, merge_bad=[], layers_k=0, layers_r=0,
               digit_heads=[0] * len(needle))
    for l in range(st.n_layer):
        keep = r.target(p, l)
        all_k = all_r = True
        for g in range(st.n_head_kv):
            kept = comp[l][g]
            verdict, want, _ = judge(r, p, l, g, kept)
            if verdict == "bad":
                cm, rm = sorted(set(kept) - set(want)), sorted(set(want) - set(kept))
                out["diff"].append((l, g, judge_wide(r, p, l, g, kept),
                                    "kept %d, rule %d; kvfold only %s %s, rule only %s %s" % (
                                        len(kept), len(want), cm[:6], r.describe(p, l, g, keep, cm[:6]), rm[:6],
                                        r.describe(p, l, g, keep, rm[:6]))))
            else:
                out[verdict] += 1
            # the merge rule applied to kvfold's own kept set
            mv, msg, mnear = judge_merge(r, p, l, g, kept, merged[l][g])
            out["merged"] += len(merged[l][g])
            out["merge_near"] += mnear
            if mv == "bad":
                out["merge_bad"].append((l, g, msg))
            ks = set(kept)
            for i, pos in enumerate(needle):
                out["digit_heads"][i] += pos in ks
            all_k, all_r = all_k and set(needle) <= ks, all_r and set(needle) <= set(want)
        out["layers_k"] += all_k
        out["layers_r"] += all_r
    out["fail"] = rep.fail[nf:]
    out["controls"] = {}
    for w, methods in ref_kv.WRONG.items():
        if methods is not None and p["method"] not in methods:
            continue
        rw = Ref(st, image=r.image, wrong=w)
        out["controls"][w] = sum(judge(rw, p, l, g, comp[l][g])[0] == "bad" or
                                 judge_merge(rw, p, l, g, comp[l][g], merged[l][g])[0] == "bad"
                                 for l in range(st.n_layer) for g in range(st.n_head_kv))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kvfold")
    ap.add_argument("model")
    ap.add_argument("prompt_file")
    ap.add_argument("--chat", action="store_true", help="generate --chat (the model's template)")
    ap.add_argument("--kv", action="append", default=[], help="a policy spec (repeatable)")
    ap.add_argument("--answer", help="the needle's text: count the layers that keep all its tokens")
    ap.add_argument("--pseudo-image", action="append", default=[], metavar="WORDS:RxC",
                    help="generate --pseudo-image for the prompt's <image> markers, in order")
    ap.add_argument("--dump-logits", help="the dump_logits tool: check the reference's last logits against it")
    ap.add_argument("--tmp", help="directory for kvfold's dumps (default: a temporary one)")
    ap.add_argument("--stats", metavar="FILE", help="keep the reference's statistics (and last logits) in FILE "
                    "and reuse them when it exists for the same ids (the forward pass takes minutes)")
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=a.tmp) as tmp:
        a.tmp = tmp
        return check(a)


def check(a):
    media = [x for pi in a.pseudo_image for x in ("--pseudo-image", pi)]
    gen_args = ["-f", a.prompt_file] + (["--chat"] if a.chat else []) + media
    tags = prompt_tags(a.kvfold, a.model, gen_args)
    # Image rows run as the tokens whose embeddings they are.
    words = [tokenize(a.kvfold, a.model, open(pi.rsplit(":", 1)[0]).read(), False) for pi in a.pseudo_image]
    ids, image, run_img, n_img, k = [], np.zeros(len(tags), bool), -1, 0, -1
    for i, (mod, tid, _) in enumerate(tags):
        if mod == "text":
            ids.append(tid)
            run_img = -1
            continue
        if mod != "image" or not words:
            sys.exit("ref_kv_model: position %d is %s; only text and --pseudo-image are modelled" % (i, mod))
        if run_img < 0:
            k, run_img = k + 1, 0
        ids.append(words[k][run_img % len(words[k])])
        run_img += 1
        image[i] = True
    n = len(ids)
    needle = needle_positions(tags, a.answer) if a.answer else []
    print("prompt: %d positions (%d image), needle %r at %s" % (n, image.sum(), a.answer, needle))

    model = LowMemModel(a.model)
    c = model.c
    st = None
    if a.stats and os.path.exists(a.stats):
        with open(a.stats, "rb") as fh:
            cached = pickle.load(fh)
        if cached["ids"] == ids and cached["model"] == os.path.realpath(a.model):
            st, model.last_hidden = cached["stats"], cached["last_hidden"]
            print("reference statistics from %s" % a.stats)
    if st is None:
        st = Stats(model, ids)
        if a.stats:
            with open(a.stats, "wb") as fh:
                pickle.dump(dict(ids=ids, model=os.path.realpath(a.model), stats=st,
                                 last_hidden=model.last_hidden[-1:]), fh, protocol=4)
    print("reference: %s, %d layers, %d heads on %d kv heads" % (c["arch"], c["n_layer"], c["n_head"], c["n_head_kv"]))
    ok = True
    if a.dump_logits:
        ok = check_logits(a, a.model, ids, model) and ok
        if image.any():
            print("  (the logits check ran the image rows as their tokens, as the reference does)")
    ref = Ref(st, image=image if image.any() else None)
    rep = Report(a.verbose)
    rows = []
    for spec in a.kv:
        row = compare(a, spec, gen_args, ref, rep, needle)
        if row is None:
            ok = False
            continue
        rows.append(row)
        ok = ok and not row["diff"] and not row["merge_bad"] and not row["fail"]
        print("%s: kept sets identical %d, near-tie %d, different %d; merge pairs %d (cosine near-ties %d, heads "
              "wrong %d); needle %s kept in every head of %d layers (rule %d), per digit in %s of %d heads"
              % (spec, row["exact"], row["near"], len(row["diff"]), row["merged"], row["merge_near"],
                 len(row["merge_bad"]), a.answer, row["layers_k"], row["layers_r"], row["digit_heads"],
                 c["n_layer"] * c["n_head_kv"]))
        print("    wrong rules fail in: %s" % (", ".join("%s %d heads" % kv for kv in row["controls"].items()) or "-"))
        for l, g, t, d in row["diff"][: (len(row["diff"]) if a.verbose else 6)]:
            print("    layer %2d head %d: %s; %s" % (l, g, "no tolerance accepts it" if t is None else
                                                   "accepted at tolerance %g" % t, d))
        for l, g, msg in row["merge_bad"][:6]:
            print("    layer %2d head %d merge: %s" % (l, g, msg))
        for f in row["fail"]:
            print("    " + f)
    print("\n| spec | kept sets identical | near-tie | different | merge pairs (near-tie, wrong heads) "
          "| layers keeping all digits (kvfold / rule) | heads keeping each digit |\n|---|---|---|---|---|---|---|")
    for r in rows:
        wide = max(np.inf if t is None else t for _, _, t, _ in r["diff"]) if r["diff"] else None
        print("| %s | %d | %d | %d%s | %s | %d / %d | %s |" % (
            r["spec"], r["exact"], r["near"], len(r["diff"]), "" if wide is None else " (widest tolerance %g)" % wide,
            "%d (%d, %d)" % (r["merged"], r["merge_near"], len(r["merge_bad"])) if r["merged"] else "-",
            r["layers_k"], r["layers_r"], " ".join(map(str, r["digit_heads"]))))
    print("OK" if ok else "DIFFERENCES")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
