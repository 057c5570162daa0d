#!/usr/bin/env python3
"""Reference token ids for tests/unit/test_tokenizer.c, from Hugging Face
`tokenizers` (an implementation independent of ours), for the GGUF models in
models/ that ship without reference ids.

The hub is not reachable, so the Hugging Face tokenizer is rebuilt from the
GGUF metadata (read with the `gguf` package):
  - SmolLM2 (tokenizer.ggml.model "gpt2", pre "smollm"): byte-level BPE with
    the vocab and merges, pre-tokenizer Split(\\p{N}, isolated) followed by
    ByteLevel(use_regex) -- the SmolLM2/StarCoder tokenizer.json layout;
    control tokens become special added tokens.
  - Gemma 3 (model "llama", add_space_prefix false): BPE with byte_fallback,
    normalizer Replace(" ", "\u2581"), merges derived from the piece scores
    the way transformers' SentencePieceExtractor does (every split of a
    piece into two pieces, ordered by the piece's score); user-defined
    tokens become non-special added tokens, control tokens special ones.

Usage: python tests/ref/tokenizer_ref.py models/   (prints C initialisers)
Needs: pip install tokenizers gguf numpy
"""
import sys

import gguf
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

STRINGS = [
    "Hello world! This is a test.",
    "int main(void) {\n    return 0;\n}\n",
    "12345 and 3.14159",
    "h\u00e9llo \u4e16\u754c \U0001f642",
    "a  b   c    d",
    "line1\nline2\n\n\nline3\r\n",
    "I'm sure you'll LOVE it, won't you? 'S 'T",
    "   leading and trailing   ",
    "The quick brown fox: \u00dcn\u00efc\u00f6d\u00e9 \u2014 \u201cquotes\u201d \u2026",
    "\ttabs\tand\u00a0nbsp",
]


def read_vocab(path):
    r = gguf.GGUFReader(path)

    def arr(key):
        f = r.fields.get(key)
        if f is None:
            return None
        if f.types[-1] == gguf.GGUFValueType.STRING:
            return [bytes(f.parts[i]).decode("utf-8") for i in f.data]
        return [f.parts[i][0].item() for i in f.data]

    return arr("tokenizer.ggml.tokens"), arr("tokenizer.ggml.scores"), \
        arr("tokenizer.ggml.token_type"), arr("tokenizer.ggml.merges")


def smollm(path):
    toks, _, types, merges = read_vocab(path)
    vocab = {t: i for i, t in enumerate(toks)}
    pairs = [tuple(m.split(" ", 1)) for m in merges]
    tk = Tokenizer(models.BPE(vocab=vocab, merges=pairs))
    tk.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"\p{N}"), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tk.decoder = decoders.ByteLevel()
    tk.add_special_tokens([AddedToken(t, special=True, normalized=False)
                           for t, ty in zip(toks, types) if ty == 3])
    return tk


def gemma(path):
    toks, scores, types, _ = read_vocab(path)
    vocab = {t: i for i, t in enumerate(toks)}
    order = sorted(range(len(toks)), key=lambda i: -scores[i])
    merges = []
    for i in order:
        if types[i] != 1:
            continue
        piece = toks[i]
        local = [(piece[:k], piece[k:]) for k in range(1, len(piece))
                 if piece[:k] in vocab and piece[k:] in vocab]
        local.sort(key=lambda p: (vocab[p[0]], vocab[p[1]]))
        merges.extend(local)
    tk = Tokenizer(models.BPE(vocab=vocab, merges=merges, byte_fallback=True,
                              unk_token="<unk>", fuse_unk=True))
    tk.normalizer = normalizers.Replace(" ", "\u2581")
    tk.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(),
                                    decoders.Fuse()])
    tk.add_tokens([AddedToken(t, special=False, normalized=False)
                   for t, ty in zip(toks, types) if ty == 4])
    tk.add_special_tokens([AddedToken(t, special=True, normalized=False)
                           for t, ty in zip(toks, types) if ty == 3])
    return tk


def c_string(s):
    named = {0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t", 0x22: '\\"', 0x5C: "\\\\"}
    out = ""
    for b in s.encode("utf-8"):
        out += named.get(b) or (chr(b) if 0x20 <= b < 0x7F else "\\%03o" % b)
    return '"' + out + '"'


def emit(name, tk, extra=()):
    print("static const struct ref_case %s[] = {" % name)
    for s in list(STRINGS) + list(extra):
        ids = tk.encode(s, add_special_tokens=False).ids
        assert tk.decode(ids, skip_special_tokens=False) == s, s
        print("    { %s, { %s }, %d }," % (c_string(s), ", ".join(map(str, ids)), len(ids)))
    print("};")


if __name__ == "__main__":
    root = sys.argv[1] if len(sys.argv) > 1 else "models"
    emit("smollm_ref", smollm(root + "/smollm2-135m-instruct-q4_1.gguf"),
         extra=["<|im_start|>user\nHi<|im_end|>\n"])
    emit("gemma_ref", gemma(root + "/gemma3-270m-q4_k_m.gguf"),
         extra=["<start_of_turn>user\nHi<end_of_turn>\n"])
