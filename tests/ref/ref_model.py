#!/usr/bin/env python3
"""Independent numpy (float64) forward pass of the decoder families kvfold runs.

Written from the model definitions (Hugging Face modelling code and
llama.cpp's graph conventions), not from kvfold's C code, so that agreement
between the two means something.

    ref_model.py MODEL ID... [--out logits.npy] [--top 5]

MODEL is a .gguf file (weights read with the `gguf` package; quantised blocks
dequantised with gguf.quants.dequantize) or a Hugging Face directory
(config.json + model.safetensors or model.safetensors.index.json), including
the decoder of a LLaVA directory (text_config; language_model.* names of
either transformers layout). RefModel.logits also runs from input embeddings
(ids < 0 take rows of a matrix): tests/ref/ref_llava.py feeds image
embeddings that way.

Conventions implemented (see docs/ARCHITECTURE.md §5.1-5.3):
  llama  RMSNorm, GQA attention, RoPE, SwiGLU FFN, final norm, output (or tied
         token_embd). GGUF: interleaved RoPE (llama.cpp permutes Q/K rows at
         conversion); safetensors: NeoX (rotate_half) RoPE.
  qwen2  llama + q/k/v biases, NeoX RoPE.
  qwen3  llama + per-head RMSNorm on q and k before RoPE (weights as they
         are), NeoX RoPE, head_dim given apart from n_embd / n_head.
  gemma3 embeddings * sqrt(n_embd); per layer
           h = x + post_attn_norm(attn(attn_norm(x)))
           x = h + post_ffw_norm(ffn(ffn_norm(h)))
         per-head RMSNorm on q and k before RoPE, NeoX RoPE, GeGLU (tanh GELU)
         FFN, tied output, attention scale 1/sqrt(head_dim) (GGUF) or
         query_pre_attn_scalar^-1/2 (HF). Layer il is global when
         (il + 1) % pattern == 0 (pattern 6), else local: a query at i sees keys
         j with i - j < sliding_window, RoPE base 10000 (llama.cpp hard-codes
         it; HF: rope_local_base_freq). HF norms scale by (1 + w); llama.cpp's
         converter stores w + 1, so GGUF norms scale by w.
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np

ARCHS = ("llama", "qwen2", "gemma3", "qwen3")

# ------------------------------------------------------------------ loading --


class GGUFWeights:
    """Tensors of a GGUF file by name, dequantised on demand to float32."""

    def __init__(self, path):
        import gguf  # imported here so that the safetensors path needs only numpy
        self._gguf = gguf
        self.reader = gguf.GGUFReader(path)
        self.tensors = {t.name: t for t in self.reader.tensors}

    def field(self, key, default=None):
        f = self.reader.fields.get(key)
        if f is None:
            return default
        return f.contents()

    def has(self, name):
        return name in self.tensors

    def kind(self, name):
        """Storage type name ("F32", "Q4_K", ...)."""
        return self.tensors[name].tensor_type.name

    def _dequant(self, t, data):
        qt = t.tensor_type
        if qt == self._gguf.GGMLQuantizationType.F32:
            return np.asarray(data, dtype=np.float32)
        if qt == self._gguf.GGMLQuantizationType.F16:
            return np.asarray(data, dtype=np.float16).astype(np.float32)
        return self._gguf.quants.dequantize(np.asarray(data), qt).astype(np.float32)

    def get(self, name):
        """Whole tensor as float32, shape [rows, cols] (1-D tensors: [n])."""
        t = self.tensors[name]
        ne = [int(x) for x in t.shape]
        out = self._dequant(t, t.data)
        return out.reshape(list(reversed(ne)) if len(ne) > 1 else ne)

    def rows(self, name, ids):
        """Selected rows of a 2-D tensor as float32 [len(ids), cols]."""
        t = self.tensors[name]
        data = t.data
        if data.ndim == 1:
            data = data.reshape(int(t.shape[1]), -1)
        return self._dequant(t, data[np.asarray(ids)]).reshape(len(ids), int(t.shape[0]))

    def n_rows(self, name):
        t = self.tensors[name]
        return int(t.shape[1]) if len(t.shape) > 1 else 1


_ST_DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16}


class SafetensorsWeights:
    """Tensors of a Hugging Face directory (one file or an index + shards),
    renamed to the GGUF names so both loaders feed the same forward pass."""

    def __init__(self, path, arch):
        files = []
        index = os.path.join(path, "model.safetensors.index.json")
        if os.path.exists(index):
            with open(index) as fh:
                files = sorted(set(json.load(fh)["weight_map"].values()))
        else:
            files = ["model.safetensors"]
        self.tensors = {}
        self.dtypes = {}
        for name in files:
            with open(os.path.join(path, name), "rb") as fh:
                buf = fh.read()
            (hlen,) = struct.unpack("<Q", buf[:8])
            header = json.loads(buf[8 : 8 + hlen])
            base = 8 + hlen
            for tname, info in header.items():
                if tname == "__metadata__":
                    continue
                a, b = info["data_offsets"]
                arr = np.frombuffer(buf, dtype=_ST_DTYPES[info["dtype"]], count=(b - a) // np.dtype(_ST_DTYPES[info["dtype"]]).itemsize, offset=base + a)
                if info["dtype"] == "BF16":
                    arr = (arr.astype(np.uint32) << 16).view(np.float32)
                gname = self._gguf_name(tname, arch)
                self.tensors[gname] = arr.astype(np.float32).reshape(info["shape"])
                self.dtypes[gname] = info["dtype"]

    @staticmethod
    def _gguf_name(n, arch):
        # A LLaVA checkpoint nests the decoder: language_model.model.* and
        # language_model.lm_head (transformers < 4.52) or model.language_model.*
        # and lm_head (later). Its vision tower keeps its own names.
        for nested, plain in (("language_model.model.", "model."), ("language_model.lm_head.", "lm_head."),
                              ("model.language_model.", "model.")):
            if n.startswith(nested):
                n = plain + n[len(nested):]
                break
        top = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
               "lm_head.weight": "output.weight"}
        if n in top:
            return top[n]
        p = n.split(".")
        if p[:2] != ["model", "layers"]:
            return n
        sub = ".".join(p[3:-1])
        post_attn = "post_attention_norm" if arch == "gemma3" else "ffn_norm"
        m = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
             "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm",
             "self_attn.k_norm": "attn_k_norm", "post_attention_layernorm": post_attn,
             "pre_feedforward_layernorm": "ffn_norm", "post_feedforward_layernorm": "post_ffw_norm",
             "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
        if sub not in m:
            return n
        return "blk.%s.%s.%s" % (p[2], m[sub], p[-1])

    def has(self, name):
        return name in self.tensors

    def kind(self, name):
        return self.dtypes[name]

    def get(self, name):
        return self.tensors[name]

    def rows(self, name, ids):
        return self.tensors[name][np.asarray(ids)]

    def n_rows(self, name):
        return self.tensors[name].shape[0]


class RefModel:
    def __init__(self, path, act_quant=False):
        # act_quant: round activations before each matmul with a quantised
        # weight the way an integer-dot engine does (quantize_act), which
        # separates kernel bugs from the expected quantisation error.
        self.act_quant = act_quant
        if os.path.isdir(path):
            self._init_hf(path)
        else:
            self._init_gguf(path)
        self.cache = {}
        # A list to record into: attention() appends, per layer, a dict with
        # "attn" (softmax probabilities [n_head][T][T]) and "k" (post-RoPE
        # keys [T][n_head_kv][head_dim], the cache layout) - what
        # tests/ref/ref_kv.py scores KV cache policies from. None: no record.
        self.record = None

    def _init_gguf(self, path):
        w = GGUFWeights(path)
        arch = w.field("general.architecture")
        if arch not in ARCHS:
            raise ValueError("unsupported architecture %r" % arch)
        k = lambda s, d=None: w.field("%s.%s" % (arch, s), d)
        c = dict(arch=arch, source="gguf")
        c["n_layer"] = int(k("block_count"))
        c["n_embd"] = int(k("embedding_length"))
        c["n_ff"] = int(k("feed_forward_length"))
        c["n_head"] = int(k("attention.head_count"))
        c["n_head_kv"] = int(k("attention.head_count_kv", c["n_head"]))
        c["head_dim"] = int(k("attention.key_length", c["n_embd"] // c["n_head"]))
        c["n_rot"] = int(k("rope.dimension_count", c["head_dim"]))
        c["eps"] = float(k("attention.layer_norm_rms_epsilon"))
        c["rope_base"] = float(k("rope.freq_base", 10000.0))
        c["rope_style"] = "norm" if arch == "llama" else "neox"
        c["norm_plus_one"] = False
        c["n_vocab"] = w.n_rows("token_embd.weight")
        if arch == "gemma3":
            c["sliding_window"] = int(k("attention.sliding_window", 0))
            c["swa_pattern"] = 6
            c["rope_base_local"] = 10000.0
            c["attn_scale"] = 1.0 / math.sqrt(c["head_dim"])
        self.w, self.c = w, c
        self.vocab = w.field("tokenizer.ggml.tokens")

    def _init_hf(self, path):
        with open(os.path.join(path, "config.json")) as fh:
            cfg = json.load(fh)
        if "text_config" in cfg:
            # LLaVA: the decoder's config; LlavaConfig's text_config defaults to Llama.
            cfg = dict(cfg["text_config"])
            cfg.setdefault("model_type", "llama")
        mt = cfg["model_type"]
        arch = {"llama": "llama", "qwen2": "qwen2", "gemma3": "gemma3", "gemma3_text": "gemma3", "qwen3": "qwen3"}.get(mt)
        if arch is None:
            raise ValueError("unsupported model_type %r" % mt)
        c = dict(arch=arch, source="safetensors")
        c["n_layer"] = cfg["num_hidden_layers"]
        c["n_embd"] = cfg["hidden_size"]
        c["n_ff"] = cfg["intermediate_size"]
        c["n_head"] = cfg["num_attention_heads"]
        c["n_head_kv"] = cfg.get("num_key_value_heads", c["n_head"])
        c["head_dim"] = cfg.get("head_dim") or c["n_embd"] // c["n_head"]
        c["n_rot"] = c["head_dim"]
        c["eps"] = cfg.get("rms_norm_eps", 1e-6)
        c["rope_base"] = cfg.get("rope_theta", 10000.0)
        c["rope_style"] = "neox"
        c["norm_plus_one"] = arch == "gemma3"
        if arch == "gemma3":
            c["sliding_window"] = cfg.get("sliding_window") or 0
            c["rope_base_local"] = cfg.get("rope_local_base_freq", 10000.0)
            c["attn_scale"] = cfg.get("query_pre_attn_scalar", c["head_dim"]) ** -0.5
            lt = cfg.get("layer_types")
            if lt:
                c["local_layers"] = [t == "sliding_attention" for t in lt]
            c["swa_pattern"] = cfg.get("sliding_window_pattern", cfg.get("_sliding_window_pattern", 6))
        self.w = SafetensorsWeights(path, arch)
        c["n_vocab"] = self.w.n_rows("token_embd.weight")
        self.c = c
        self.vocab = None
        tj = os.path.join(path, "tokenizer.json")
        if os.path.exists(tj):
            with open(tj) as fh:
                t = json.load(fh)
            self.vocab = [None] * c["n_vocab"]
            for s, i in t["model"]["vocab"].items():
                self.vocab[i] = s
            for a in t.get("added_tokens", []):
                self.vocab[a["id"]] = a["content"]

    # ------------------------------------------------------------ forward --

    def W(self, name):
        """float64 weight, cached (fixtures are small; real models dequantise
        once per tensor)."""
        if name not in self.cache:
            self.cache[name] = self.w.get(name).astype(np.float64)
        return self.cache[name]

    @staticmethod
    def quantize_act(x, kind):
        """x rounded as an engine rounds activations for an integer dot
        product with weights stored as `kind` (llama.cpp's scheme): blocks of
        32 as Q8_0 (d = amax/127 stored as f16, q = round(x/d)) for the
        32-blocks types, blocks of 256 as Q8_K (the value of largest magnitude
        maps to -128, d kept in f32) for the K types; F32/F16/BF16 weights
        take the activations as they are."""
        if kind in ("F32", "F16", "BF16"):
            return x
        shape = x.shape
        if kind.endswith("_K"):
            b = x.reshape(-1, 256).astype(np.float32)
            mx = b[np.arange(b.shape[0]), np.abs(b).argmax(axis=1)][:, None]
            with np.errstate(divide="ignore"):
                iscale = np.where(mx != 0, np.float32(-128.0) / mx, 0).astype(np.float32)
            q = np.clip(np.round(iscale * b), -128, 127)
            with np.errstate(divide="ignore"):
                d = np.where(iscale != 0, np.float32(1.0) / iscale, 0).astype(np.float32)
        else:
            b = x.reshape(-1, 32).astype(np.float32)
            d = (np.abs(b).max(axis=1, keepdims=True) / np.float32(127)).astype(np.float16).astype(np.float32)
            with np.errstate(divide="ignore"):
                inv = np.where(d != 0, np.float32(1.0) / d, 0).astype(np.float32)
            q = np.clip(np.round(b * inv), -127, 127)
        return (q.astype(np.float64) * d.astype(np.float64)).reshape(shape)

    def is_local(self, il):
        c = self.c
        if c["arch"] != "gemma3" or not c.get("sliding_window"):
            return False
        if "local_layers" in c:
            return c["local_layers"][il]
        return (il + 1) % c["swa_pattern"] != 0

    def norm(self, x, name):
        """RMSNorm over the last axis."""
        w = self.W(name)
        if self.c["norm_plus_one"]:
            w = 1.0 + w
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.c["eps"]) * w

    def rope(self, x, pos, base):
        """x: [T, heads, head_dim]; rotates the first n_rot dims."""
        c = self.c
        nr = c["n_rot"]
        half = nr // 2
        inv = base ** (-2.0 * np.arange(half) / nr)      # theta_i = pos * base^(-2i/n_rot)
        ang = pos[:, None] * inv[None, :]                  # [T, half]
        cos = np.cos(ang)[:, None, :]
        sin = np.sin(ang)[:, None, :]
        out = x.copy()
        if c["rope_style"] == "norm":                      # pairs (2i, 2i+1)
            a, b = x[..., 0:nr:2], x[..., 1:nr:2]
            out[..., 0:nr:2] = a * cos - b * sin
            out[..., 1:nr:2] = a * sin + b * cos
        else:                                              # pairs (i, i + n_rot/2)
            a, b = x[..., :half], x[..., half:nr]
            out[..., :half] = a * cos - b * sin
            out[..., half:nr] = a * sin + b * cos
        return out

    def linear(self, x, name):
        if self.act_quant:
            x = self.quantize_act(x, self.w.kind(name + ".weight"))
        y = x @ self.W(name + ".weight").T
        if self.w.has(name + ".bias"):
            y = y + self.W(name + ".bias")
        return y

    def attention(self, x, il, pos):
        c = self.c
        T = x.shape[0]
        hd, nh, nkv = c["head_dim"], c["n_head"], c["n_head_kv"]
        p = "blk.%d." % il
        q = self.linear(x, p + "attn_q").reshape(T, nh, hd)
        k = self.linear(x, p + "attn_k").reshape(T, nkv, hd)
        v = self.linear(x, p + "attn_v").reshape(T, nkv, hd)
        base = c["rope_base"]
        scale = 1.0 / math.sqrt(hd)
        if c["arch"] in ("gemma3", "qwen3") and not c.get("no_qk_norm"):
            q = self.norm(q, p + "attn_q_norm.weight")
            k = self.norm(k, p + "attn_k_norm.weight")
        if c["arch"] == "gemma3":
            scale = c["attn_scale"]
            if self.is_local(il):
                base = c["rope_base_local"]
        q = self.rope(q, pos, base)
        k = self.rope(k, pos, base)
        i = pos[:, None]
        j = pos[None, :]
        allowed = j <= i
        if self.is_local(il):
            allowed &= (i - j) < c["sliding_window"]
        group = nh // nkv
        out = np.empty((T, nh, hd))
        probs = np.empty((nh, T, T)) if self.record is not None else None
        for h in range(nh):
            # Query head h shares kv head h // group (consecutive query heads
            # per kv head); check_ref.py tries the interleaved mapping to show
            # the fixtures tell them apart.
            kvh = h % nkv if c.get("gqa_interleave") else h // group
            s = (q[:, h, :] @ k[:, kvh, :].T) * scale
            s = np.where(allowed, s, -np.inf)
            s = np.exp(s - s.max(axis=1, keepdims=True))
            s /= s.sum(axis=1, keepdims=True)
            out[:, h, :] = s @ v[:, kvh, :]
            if probs is not None:
                probs[h] = s
        if probs is not None:
            self.record.append({"layer": il, "attn": probs, "k": k, "v": v})
        return self.linear(out.reshape(T, nh * hd), p + "attn_output")

    def ffn(self, x, il):
        p = "blk.%d." % il
        g = self.linear(x, p + "ffn_gate")
        u = self.linear(x, p + "ffn_up")
        if self.c["arch"] == "gemma3":
            act = 0.5 * g * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (g + 0.044715 * g ** 3)))
        else:
            act = g / (1.0 + np.exp(-g))
        return self.linear(act * u, p + "ffn_down")

    def embed(self, ids, extra=None):
        """Input embeddings [T, n_embd] float64. ids < 0 take the rows of
        `extra` in order (a VLM's image embeddings, fed to the decoder as they
        are: Gemma's sqrt(n_embd) scale belongs to its token embedding)."""
        c = self.c
        ids = np.asarray(ids, dtype=np.int64)
        text = ids >= 0
        n_extra = int((~text).sum())
        if n_extra != (0 if extra is None else len(extra)):
            raise ValueError("%d positions without a token id for %d embedding rows"
                             % (n_extra, 0 if extra is None else len(extra)))
        if text.any() and ids[text].max() >= c["n_vocab"]:
            raise ValueError("token id out of range")
        x = np.empty((len(ids), c["n_embd"]))
        if text.any():
            x[text] = self.w.rows("token_embd.weight", ids[text]).astype(np.float64)
            if c["arch"] == "gemma3":
                x[text] *= math.sqrt(c["n_embd"])
        if n_extra:
            x[~text] = np.asarray(extra, dtype=np.float64)
        return x

    def hidden(self, ids, extra=None):
        """Final-normed hidden states [T, n_embd] for token ids at positions
        0..T-1 (ids < 0: rows of `extra`, see embed)."""
        return self.hidden_embd(self.embed(ids, extra))

    def hidden_embd(self, x):
        """Final-normed hidden states [T, n_embd] for input embeddings x."""
        c = self.c
        pos = np.arange(len(x), dtype=np.float64)
        for il in range(c["n_layer"]):
            p = "blk.%d." % il
            if c["arch"] == "gemma3":
                h = x + self.norm(self.attention(self.norm(x, p + "attn_norm.weight"), il, pos), p + "post_attention_norm.weight")
                x = h + self.norm(self.ffn(self.norm(h, p + "ffn_norm.weight"), il), p + "post_ffw_norm.weight")
            else:
                h = x + self.attention(self.norm(x, p + "attn_norm.weight"), il, pos)
                x = h + self.ffn(self.norm(h, p + "ffn_norm.weight"), il)
        return self.norm(x, "output_norm.weight")

    def logits(self, ids, extra=None):
        """[T, n_vocab] float64 logits after each token (ids < 0: rows of
        `extra`, see embed)."""
        return self.logits_embd(self.embed(ids, extra))

    def logits_embd(self, x):
        """[T, n_vocab] float64 logits for input embeddings x [T, n_embd]."""
        h = self.hidden_embd(x)
        name = "output.weight" if self.w.has("output.weight") else "token_embd.weight"
        if self.act_quant:
            h = self.quantize_act(h, self.w.kind(name))
        n = self.w.n_rows(name)
        out = np.empty((h.shape[0], n))
        # Chunked so that a 262k-row tied embedding never exists in float64 at once.
        step = 16384
        for r0 in range(0, n, step):
            rows = np.arange(r0, min(n, r0 + step))
            out[:, rows] = h @ self.w.rows(name, rows).astype(np.float64).T
        return out

    def piece(self, t):
        if self.vocab is None or self.vocab[t] is None:
            return "<%d>" % t
        return self.vocab[t]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("ids", nargs="+", type=int)
    ap.add_argument("--out", help="write the [n, n_vocab] float64 logits as .npy")
    ap.add_argument("--top", type=int, default=5, help="print the top-k tokens after the last id")
    ap.add_argument("--generate", type=int, default=0, help="greedy-decode this many tokens and print them")
    a = ap.parse_args()
    m = RefModel(a.model)
    ids = list(a.ids)
    lg = m.logits(ids)
    if a.out:
        np.save(a.out, lg)
    last = lg[-1]
    top = np.argsort(-last)[: a.top]
    print("config:", {k: v for k, v in m.c.items() if k != "local_layers"})
    print("top-%d after %s:" % (a.top, [m.piece(t) for t in ids]))
    for t in top:
        print("  %6d %-20r %.4f" % (t, m.piece(t), last[t]))
    if a.generate:
        for _ in range(a.generate):
            ids.append(int(np.argmax(m.logits(ids)[-1])))
        print("greedy:", [m.piece(t) for t in ids])
    return 0


if __name__ == "__main__":
    sys.exit(main())
