#!/usr/bin/env python3
"""Checks kvfold's LLaVA logits (images + text) against the numpy reference
(tests/ref/ref_llava.py).

    compare_llava.py --dump BUILD/tests/dump_logits MODEL [--mmproj F]
                     [--same-as OTHER [--same-as-mmproj F]]

MODEL is a decoder .gguf with --mmproj, or a Hugging Face LLaVA directory.
Two seeded non-square test images are written with Pillow (37x23 noise, 20x50
gradient) and dump_logits runs

    dump_logits [--mmproj F] --image A --image B --prompt PROMPT MODEL OUT

which writes a row of n_vocab float32 logits per position and prints the
token id of every position (-1 where an image embedding sits, 64 per image,
images in marker order). The reference builds the same sequence from those
ids and its own image embeddings. Checks (err = max|a - b| / max|b| over all
positions):
  1. the ids hold one run of image positions per image, of the reference's
     length, in order, and (byte-level vocabularies) spell the prompt with
     the runs in place of the markers;
  2. err < --tol (1e-4): the reference reads the same stored F32/F16 values,
     so only float32 rounding separates the two;
  3. top-1 agreement at every position whose reference top-2 margin exceeds
     the bound;
  4. the same on a text-only prompt (vision tower loaded, unused);
  5. --same-as OTHER: OTHER holds the same weights in another format; kvfold
     gives it the same ids and logits within 1e-4 (and the reference within
     1e-6).
Exit status 0 on success, 1 on a failed check, 77 when a file is absent (skip).
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ref_llava import RefLlava, make_test_images  # noqa: E402

PROMPT = "USER: <image>\n<image>\nWhat is the difference? ASSISTANT:"
TEXT_PROMPT = "USER: What is the difference? ASSISTANT:"
SKIP = 77


def rel_err(a, b):
    return float(np.abs(a - b).max() / np.abs(b).max())


def run_engine(a, model, mmproj, images, prompt, tmp):
    out = os.path.join(tmp, "logits.bin")
    cmd = [a.dump]
    if mmproj:
        cmd += ["--mmproj", mmproj]
    if a.threads:
        cmd += ["--threads", str(a.threads)]
    for p in images:
        cmd += ["--image", p]
    cmd += ["--prompt", prompt, model, out]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stdout + r.stderr)
        raise SystemExit("FAIL: %s exited with %d" % (" ".join(cmd), r.returncode))
    info = {}
    for line in r.stdout.splitlines():
        k, _, v = line.partition(" ")
        info[k] = v
    n_vocab, n_tok = int(info["n_vocab"]), int(info["n_tokens"])
    ids = [int(x) for x in info["ids"].split()]
    if len(ids) != n_tok:
        raise SystemExit("FAIL: dump_logits printed %d ids for %d tokens" % (len(ids), n_tok))
    rows = np.fromfile(out, dtype="<f4")
    if rows.size != n_tok * n_vocab:
        raise SystemExit("FAIL: %s holds %d floats, not %d x %d" % (out, rows.size, n_tok, n_vocab))
    return ids, rows.reshape(n_tok, n_vocab).astype(np.float64)


def image_runs(ids):
    """[(start, length)] of the runs of -1 in ids."""
    runs, i = [], 0
    while i < len(ids):
        if ids[i] < 0:
            j = i
            while j < len(ids) and ids[j] < 0:
                j += 1
            runs.append((i, j - i))
            i = j
        else:
            i += 1
    return runs


def gpt2_byte_decoder():
    """GPT-2's byte-level map, inverted: the character standing for each byte."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars, n = {}, 0
    for b in range(256):
        if b in printable:
            chars[chr(b)] = b
        else:
            chars[chr(256 + n)] = b
            n += 1
    return chars


def detokenize(vocab, ids):
    """The text of ids with "<image>" for each run of image positions and
    control tokens (BOS) left out, for byte-level BPE vocabularies; None when
    a piece is not byte-level."""
    dec = gpt2_byte_decoder()
    out, prev = bytearray(), 0
    for t in ids:
        if t < 0:
            if prev >= 0:
                out += b"<image>"
        else:
            piece = vocab[t]
            if piece.startswith("<") and piece.endswith(">") and len(piece) > 2:
                prev = t
                continue
            if any(ch not in dec for ch in piece):
                return None
            out += bytes(dec[ch] for ch in piece)
        prev = t
    return out.decode("utf-8", errors="replace")


class Checker:
    def __init__(self):
        self.failed = 0

    def check(self, name, ok, detail=""):
        print("%-4s %-36s %s" % ("ok" if ok else "FAIL", name, detail))
        if not ok:
            self.failed += 1


def compare(c, a, ref, prompt, ids, got, images, label):
    runs = image_runs(ids)
    n_img = ref.vis.n_tokens
    text = detokenize(ref.dec.vocab, ids) if ref.dec.vocab else None
    if text is not None:
        c.check("%s ids spell the prompt" % label, text == prompt, repr(text))
    c.check("%s image positions" % label, [r[1] for r in runs] == [n_img] * len(images),
            "%d tokens, image runs (start, length) %s" % (len(ids), runs))
    if len(runs) != len(images):
        return
    want = ref.logits(ids, images)
    c.check("%s shape" % label, got.shape == want.shape, "engine %s reference %s" % (got.shape, want.shape))
    if got.shape != want.shape:
        return
    c.check("%s finite" % label, bool(np.isfinite(got).all()))
    err = rel_err(got, want)
    scale = np.abs(want).max()
    c.check("%s logits vs reference" % label, err < a.tol, "max rel err %.3e (bound %.1e)" % (err, a.tol))
    per_pos = np.abs(got - want).max(axis=1) / scale
    for start, n in runs:
        print("     image at %d..%d: max rel err %.2e" % (start, start + n - 1, per_pos[start:start + n].max()))
    text = np.asarray(ids) >= 0
    if text.any():
        print("     text positions: max rel err %.2e" % per_pos[text].max())
    top2 = np.sort(want, axis=1)[:, -2:]
    decided = (top2[:, 1] - top2[:, 0]) > a.tol * scale
    agree = got.argmax(axis=1) == want.argmax(axis=1)
    c.check("%s top-1 agreement" % label, bool(agree[decided].all()),
            "%d/%d decided positions agree, %d/%d overall"
            % (int(agree[decided].sum()), int(decided.sum()), int(agree.sum()), len(ids)))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dump", required=True, help="path of the dump_logits program")
    ap.add_argument("model")
    ap.add_argument("--mmproj", help="vision projector GGUF for a decoder GGUF")
    ap.add_argument("--same-as", help="the same LLaVA in another format")
    ap.add_argument("--same-as-mmproj", help="the --mmproj of --same-as")
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--threads", type=int, default=0)
    a = ap.parse_args()

    for p in (a.model, a.mmproj, a.same_as, a.same_as_mmproj):
        if p and not os.path.exists(p):
            print("SKIP: %s is absent" % p)
            return SKIP
    try:
        import PIL  # noqa: F401
    except ImportError:
        print("SKIP: Pillow is not installed (the reference's image preprocessing)")
        return SKIP
    ref = RefLlava(a.model, a.mmproj)
    print("model %s%s: vision %s" % (a.model, " + " + a.mmproj if a.mmproj else "",
                                    {k: v for k, v in ref.vis.c.items() if k not in ("mean", "std")}))
    c = Checker()
    with tempfile.TemporaryDirectory() as tmp:
        images = make_test_images(tmp)
        ids, got = run_engine(a, a.model, a.mmproj, images, PROMPT, tmp)
        compare(c, a, ref, PROMPT, ids, got, images, "[2 images]")
        tids, tgot = run_engine(a, a.model, a.mmproj, [], TEXT_PROMPT, tmp)
        compare(c, a, ref, TEXT_PROMPT, tids, tgot, [], "[text only]")

        if a.same_as:
            other = RefLlava(a.same_as, a.same_as_mmproj)
            rerr = rel_err(other.logits(ids, images), ref.logits(ids, images))
            c.check("reference: same model other format", rerr < 1e-6, "max rel err %.3e" % rerr)
            oids, ogot = run_engine(a, a.same_as, a.same_as_mmproj, images, PROMPT, tmp)
            c.check("engine: same ids other format", oids == ids, "%d and %d tokens" % (len(oids), len(ids)))
            if oids == ids:
                serr = rel_err(ogot, got)
                c.check("engine: same model other format", serr < 1e-4, "max rel err %.3e (%s)" % (serr, a.same_as))
    return 1 if c.failed else 0


if __name__ == "__main__":
    sys.exit(main())
