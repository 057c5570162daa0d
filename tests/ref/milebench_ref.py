#!/usr/bin/env python3
"""Checks kvfold's MileBench scoring (tools/kvfold/lab/metrics.c) against a
Python reference of MileBench's evaluate.py and the `rouge` package itself.

    milebench_ref.py MB_SCORE

The reference is written here from MileBench's evaluate.py (Eval.process,
match_choice, judge_multi_choice, evaluate_needle, evaluate_rouge), in
Python so that Python's own str and re semantics decide; ROUGE-L is
rouge==1.0.1's Rouge().get_scores(pred, gt)[0]["rouge-l"]["f"], as
MileBench calls it. Thousands of seeded cases (punctuation next to and away
from spaces, digit,digit, runs of periods, quotes, regex metacharacters in
options, options given by letter, by text, by both, or not at all) go
through `MB_SCORE` (JSON lines) and must agree: strings exactly, scores
within 1e-12. A self-check shows that plausible mistakes (all periods
removed, ROUGE-L over word lists instead of sets, F1 without the 1e-8,
punctuation always turned into spaces, the escaped-form comparison of
match_choice dropped, 'A' for an empty answer) disagree on these cases.
Exit status 0 on success, 1 on a failed check, 77 when `rouge` is absent.
"""
import json
import random
import re
import subprocess
import sys

SKIP = 77

PUNCT = [";", "/", "[", "]", '"', "{", "}", "(", ")", "=", "+", "\\", "_", "-", ">", "<", "@", "`", ",", "?", "!"]
DIGIT_COMMA = re.compile(r"(\d)(\,)(\d)")
PERIOD = re.compile(r"(?!<=\d)(\.)(?!\d)")
META = ["\\", ".", "^", "$", "*", "+", "?", "{", "}", "[", "]", "|", "(", ")"]


def normalise(s, mistake=None):
    s = s.replace("\n", " ").replace("\t", " ").strip()
    out = s
    for p in PUNCT:
        drop = (p + " " in s or " " + p in s) or DIGIT_COMMA.search(s) is not None
        if mistake == "punct to spaces":
            drop = False
        out = out.replace(p, "" if drop else " ")
    # MileBench passes re.UNICODE (32) where re.sub takes `count`
    out = PERIOD.sub("", out, 0 if mistake == "every period" else 32)
    return out.strip("'").strip('"').strip().lower()


def escape(s):
    for c in META:
        s = s.replace(c, "\\" + c)
    return s


def match_choice(text, option, mistake=None):
    if text == "":
        return "A" if mistake == "empty is A" else "C"
    pattern = "|".join(escape(normalise(f"{k} {v}")) for k, v in option.items())
    m = re.search(f"({pattern})", text, re.S)
    if m:
        return m.group(0)[0].upper()
    pattern = "|".join(escape(normalise(v)).replace(" ", "") for v in option.values())
    m = re.search(f"({pattern})", text.replace(" ", ""), re.S)
    if m:
        for k, v in option.items():
            want = normalise(v).replace(" ", "") if mistake == "unescaped compare" else escape(normalise(v)).replace(" ", "")
            if m[0].strip() == want:
                return k.upper()
    if len(text) == 1 and text.upper() in option:
        return text.upper()
    return "".join(c.upper() for c in text if c.upper() in option)


def rouge_l(hyp, ref, mistake=None):
    from rouge import Rouge
    from rouge import rouge_score
    if mistake not in ("word lists", "F1 without 1e-8"):
        return Rouge(metrics=["rouge-l"]).get_scores(hyp, ref)[0]["rouge-l"]["f"]
    hs = [" ".join(x.split()) for x in hyp.split(".") if len(x) > 0]
    rs = [" ".join(x.split()) for x in ref.split(".") if len(x) > 0]
    if mistake == "word lists":
        return rouge_score.rouge_l_summary_level(hs, rs, exclusive=False)["f"]
    o = rouge_score.rouge_l_summary_level(hs, rs, raw_results=True)
    p, r = o["overlap"] / o["hyp"], o["overlap"] / o["ref"]
    return 2 * p * r / (p + r) if p + r > 0 else 0.0


def score(rule, pred, gt, choices, mistake=None):
    g, p = normalise(gt, mistake), normalise(pred, mistake)
    if rule == "needle":
        return 1.0 if g in p.split() else 0.0
    if rule == "contains":
        return 1.0 if g in p else 0.0
    if rule == "rouge":
        if g == "":
            return -1.0
        try:
            return rouge_l(p, g, mistake) if p != "" else 0.0
        except ValueError:  # a side without sentences: the package raises
            return 0.0
    c = [normalise(x, mistake) for x in choices]
    if g not in c:
        return -1.0
    option = {chr(65 + i): x for i, x in enumerate(c)}
    return 1.0 if match_choice(p, option, mistake) == chr(65 + c.index(g)) else 0.0


# ------------------------------------------------------------------ cases --

WORDS = ["cat", "Dog", "red", "blue", "the", "a", "B", "C", "image", "3", "42", "1,000", "x-ray", "U.S.", "e.g.",
         "(left)", "right!", "what?", "it's", "'quoted'", '"twice"', "a/b", "x=y", "snake_case", "C++", "$5",
         "2.5", "end.", "...", "^", "a|b", "[1]", "{k}", "*", "@home", "`tick`", ";", ":", "<tag>", "\\"]


def sentence(rng, n=None):
    n = n if n is not None else rng.randint(0, 9)
    seps = [" ", " ", " ", "  ", "\n", "\t", ". ", ", ", "", " - ", "."]
    out = ""
    for i in range(n):
        out += rng.choice(WORDS) + (rng.choice(seps) if i + 1 < n else "")
    return rng.choice(["", " ", "'", '"', "\n"]) + out + rng.choice(["", ".", " ", "?", "'"])


def choice_case(rng):
    n = rng.randint(2, 6)
    choices = []
    while len(choices) < n:
        c = sentence(rng, rng.randint(1, 5))
        if normalise(c) not in [normalise(x) for x in choices]:
            choices.append(c)
    k = rng.randrange(n)
    style = rng.randrange(8)
    letter = chr(65 + k)
    if style == 0:
        pred = f"{letter}. {choices[k]}"
    elif style == 1:
        pred = choices[k]
    elif style == 2:
        pred = letter
    elif style == 3:
        pred = f"The answer is {letter}"
    elif style == 4:
        pred = choices[rng.randrange(n)] + " " + sentence(rng)
    elif style == 5:
        pred = ""
    elif style == 6:
        pred = sentence(rng)
    else:
        pred = f"({letter.lower()}) " + choices[k].upper()
    return pred, choices[rng.randrange(n)], choices


def cases(seed=7, n=3000):
    rng = random.Random(seed)
    out = []
    for s in ["", " ", "Hello, World.", "1,000 apples; (2) pears!", "a - b", "a-b", "'x'", "\"'y'\"", "3.14 is pi.",
              "." * 40 + "x", "a.b.c.d", "U.S.A.", "x <=5 y", "tab\there", "line\nbreak", "A. The cat", "e.g. this",
              "what ? yes !", "[a](b)", "\\back\\slash"]:
        out.append({"op": "normalise", "s": s})
    for _ in range(n):
        kind = rng.randrange(5)
        if kind == 0:
            out.append({"op": "normalise", "s": sentence(rng)})
        elif kind == 1:
            out.append({"op": "rouge", "hyp": normalise(sentence(rng, rng.randint(1, 12))),
                        "ref": normalise(sentence(rng, rng.randint(1, 12)))})
        elif kind == 2:
            pred, gt, choices = choice_case(rng)
            out.append({"op": "score", "rule": "choice", "pred": pred, "gt": gt, "choices": choices})
        elif kind == 3:
            gt = rng.choice(WORDS)
            pred = sentence(rng) + rng.choice(["", " " + gt, gt, " " + gt + "."]) + sentence(rng)
            out.append({"op": "score", "rule": rng.choice(["needle", "contains"]), "pred": pred, "gt": gt})
        else:
            gt = sentence(rng, rng.randint(1, 10))
            pred = rng.choice([gt, sentence(rng), gt + " " + sentence(rng), ""])
            out.append({"op": "score", "rule": "rouge", "pred": pred, "gt": gt})
    return [c for c in out if not (c["op"] == "rouge" and (not c["hyp"] or not c["ref"]))]


def expected(c, mistake=None):
    if c["op"] == "normalise":
        return normalise(c["s"], mistake)
    if c["op"] == "rouge":
        try:
            return rouge_l(c["hyp"], c["ref"], mistake)
        except ValueError:
            return 0.0
    return score(c["rule"], c["pred"], c["gt"], c.get("choices", []), mistake)


def agree(a, b):
    if isinstance(a, str) or isinstance(b, str):
        return a == b
    return abs(a - b) <= 1e-12


def main():
    try:
        import rouge  # noqa: F401
    except ImportError:
        print("rouge (PyPI) not installed: skipped")
        return SKIP
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    cs = cases()
    p = subprocess.run([sys.argv[1]], input="\n".join(json.dumps(c) for c in cs) + "\n", capture_output=True, text=True)
    if p.returncode != 0:
        print(f"mb_score failed: {p.stderr}")
        return 1
    got = [json.loads(ln)["r"] for ln in p.stdout.splitlines()]
    if len(got) != len(cs):
        print(f"{len(got)} answers for {len(cs)} cases")
        return 1
    bad = [(c, g, expected(c)) for c, g in zip(cs, got) if not agree(g, expected(c))]
    for c, g, e in bad[:10]:
        print(f"MISMATCH {c}: kvfold {g!r}, reference {e!r}")
    kinds = {}
    for c in cs:
        k = c["op"] if c["op"] != "score" else c["rule"]
        kinds[k] = kinds.get(k, 0) + 1
    hits = sum(1 for c, g in zip(cs, got) if c["op"] == "score" and g == 1.0)
    print(f"{len(cs) - len(bad)} of {len(cs)} cases agree ({kinds}; {hits} scored 1)")
    ok = not bad
    for mistake in ["every period", "word lists", "F1 without 1e-8", "punct to spaces", "unescaped compare",
                    "empty is A"]:
        differ = sum(1 for c in cs if not agree(expected(c, mistake), expected(c)))
        print(f"self-check: {mistake!r} changes {differ} cases")
        ok &= differ > 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
