#!/usr/bin/env python3
"""Independent numpy (float64) reference of LLaVA-1.5: image preprocessing,
CLIP vision tower, MLP projector, and the decoder (ref_model.RefModel) run on
a sequence that mixes token ids and image embeddings.

Written from the model definitions (LLaVA's own preprocessing code,
transformers' modeling_clip.py and modeling_llava.py, llama.cpp's mmproj
conventions), not from kvfold's C code.

    ref_llava.py MODEL [--mmproj F] [IMAGE...]     image embeddings, shapes
    ref_llava.py check DIR                        self-check on the fixtures

MODEL is a decoder .gguf with --mmproj (a llama.cpp "clip" GGUF holding the
vision tower and the projector) or a Hugging Face LLaVA directory.

Conventions implemented:
  preprocessing (LLaVA-1.5, image_aspect_ratio "pad"): convert to RGB; pad to
    a square with background tuple(int(x * 255) for x in image_mean), the
    image pasted at ((side - w) // 2, (side - h) // 2) (expand2square); then
    CLIPImageProcessor on a square image: resize to S x S with PIL BICUBIC
    (shortest_edge = S; the centre crop of S is then the identity), x / 255,
    (x - mean) / std, channels first.
  CLIP ViT: patch embedding = Conv2d(3, H, p, stride p, no bias) = a matrix
    product on patches flattened as (channel, ky, kx), patches in row-major
    grid order; [class_embedding; patches] + position_embedding; pre_layrnorm;
    per layer x += out_proj(MHA(layer_norm1(x))) (q/k/v with biases, scale
    head_dim^-0.5, no mask), x += fc2(act(fc1(layer_norm2(x)))), act =
    quick_gelu x * sigmoid(1.702 x) or exact erf GELU. LayerNorm with biased
    variance. LLaVA takes hidden_states[vision_feature_layer]: hidden_states[0]
    is the pre-LN'd embeddings and [i] the output of layer i, so feature layer
    -2 of L layers means L - 1 layers run; post_layernorm is never applied.
    "default" select strategy drops the CLS row ("full" keeps it).
  projector: linear_1 -> exact erf GELU -> linear_2 (LlavaMultiModalProjector).
  mmproj GGUF: clip.vision.block_count layers are stored and all of them run
    (llama.cpp's converter dropped the last one); clip.use_gelu false = quick
    GELU; fc1/fc2 are stored as ffn_down/ffn_up by the legacy converter and
    as ffn_up/ffn_down by newer ones: fc1 is whichever maps n_embd to n_ff.
"""
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ref_model import GGUFWeights, RefModel, SafetensorsWeights  # noqa: E402

CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)

_erf = np.vectorize(math.erf, otypes=[np.float64])


def gelu_erf(x):
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def quick_gelu(x):
    return x / (1.0 + np.exp(-1.702 * x))


def layer_norm(x, w, b, eps):
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def expand2square(img, background):
    """LLaVA's pad-to-square: the image centred (rounded towards the
    top-left) on a square of the background colour."""
    from PIL import Image
    w, h = img.size
    if w == h:
        return img
    side = max(w, h)
    out = Image.new(img.mode, (side, side), background)
    out.paste(img, ((side - w) // 2, (side - h) // 2))
    return out


class RefVision:
    """CLIP vision tower + LLaVA projector from an mmproj GGUF or an HF LLaVA
    directory. `c` holds the conventions (the self-check alters them)."""

    def __init__(self, path):
        self.W = {}
        if os.path.isdir(path):
            self._init_hf(path)
        else:
            self._init_gguf(path)

    def _init_gguf(self, path):
        w = GGUFWeights(path)
        if w.field("general.architecture") != "clip":
            raise ValueError("%s: not a clip GGUF" % path)
        if w.field("clip.projector_type", "mlp") != "mlp":
            raise ValueError("%s: projector %r" % (path, w.field("clip.projector_type")))
        k = lambda s, d=None: w.field("clip.vision." + s, d)
        c = dict(source="gguf")
        c["image_size"] = int(k("image_size"))
        c["patch_size"] = int(k("patch_size"))
        c["n_embd"] = int(k("embedding_length"))
        c["n_ff"] = int(k("feed_forward_length"))
        c["n_head"] = int(k("attention.head_count"))
        c["eps"] = float(k("attention.layer_norm_epsilon", 1e-5))
        c["n_run"] = int(k("block_count"))
        c["act"] = "gelu" if w.field("clip.use_gelu", False) else "quick_gelu"
        c["mean"] = [float(x) for x in k("image_mean", CLIP_MEAN)]
        c["std"] = [float(x) for x in k("image_std", CLIP_STD)]
        c["drop_cls"] = True
        c["pad"] = True
        W = self.W
        g = lambda n: w.get(n).astype(np.float64)
        W["patch"] = g("v.patch_embd.weight")
        if w.has("v.patch_embd.bias"):
            W["patch_b"] = g("v.patch_embd.bias")
        W["cls"], W["pos"] = g("v.class_embd"), g("v.position_embd.weight")
        W["pre_w"], W["pre_b"] = g("v.pre_ln.weight"), g("v.pre_ln.bias")
        for i in range(c["n_run"]):
            p = "v.blk.%d." % i
            for ours, theirs in (("q", "attn_q"), ("k", "attn_k"), ("v", "attn_v"), ("o", "attn_out"),
                                 ("ln1", "ln1"), ("ln2", "ln2")):
                W["%d.%s_w" % (i, ours)] = g(p + theirs + ".weight")
                W["%d.%s_b" % (i, ours)] = g(p + theirs + ".bias")
            up, down = g(p + "ffn_up.weight"), g(p + "ffn_down.weight")
            fc1 = "ffn_up" if up.shape == (c["n_ff"], c["n_embd"]) else "ffn_down"
            fc2 = "ffn_down" if fc1 == "ffn_up" else "ffn_up"
            W["%d.fc1_w" % i], W["%d.fc1_b" % i] = g(p + fc1 + ".weight"), g(p + fc1 + ".bias")
            W["%d.fc2_w" % i], W["%d.fc2_b" % i] = g(p + fc2 + ".weight"), g(p + fc2 + ".bias")
        W["mm0_w"], W["mm0_b"] = g("mm.0.weight"), g("mm.0.bias")
        W["mm2_w"], W["mm2_b"] = g("mm.2.weight"), g("mm.2.bias")
        c["n_stored"] = c["n_run"]
        self.c = c

    def _init_hf(self, path):
        with open(os.path.join(path, "config.json")) as fh:
            cfg = json.load(fh)
        if cfg.get("model_type") != "llava":
            raise ValueError("%s: model_type %r is not llava" % (path, cfg.get("model_type")))
        vc = cfg.get("vision_config") or {}
        # transformers' defaults (LlavaConfig builds CLIP ViT-L/14-336 without a vision_config).
        vit_l = "vision_config" not in cfg
        c = dict(source="safetensors")
        c["image_size"] = vc.get("image_size", 336 if vit_l else 224)
        c["patch_size"] = vc.get("patch_size", 14 if vit_l else 32)
        c["n_embd"] = vc.get("hidden_size", 1024 if vit_l else 768)
        c["n_ff"] = vc.get("intermediate_size", 4096 if vit_l else 3072)
        c["n_head"] = vc.get("num_attention_heads", 16 if vit_l else 12)
        L = vc.get("num_hidden_layers", 24 if vit_l else 12)
        c["eps"] = vc.get("layer_norm_eps", 1e-5)
        c["act"] = vc.get("hidden_act", "quick_gelu")
        fl = cfg.get("vision_feature_layer", -2)
        c["n_run"] = L + 1 + fl if fl < 0 else fl
        c["drop_cls"] = cfg.get("vision_feature_select_strategy", "default") == "default"
        if cfg.get("projector_hidden_act", "gelu") != "gelu":
            raise ValueError("projector_hidden_act %r" % cfg["projector_hidden_act"])
        pre = {}
        pp = os.path.join(path, "preprocessor_config.json")
        if os.path.exists(pp):
            with open(pp) as fh:
                pre = json.load(fh)
        c["mean"] = [float(x) for x in pre.get("image_mean", CLIP_MEAN)]
        c["std"] = [float(x) for x in pre.get("image_std", CLIP_STD)]
        c["pad"] = True
        st = SafetensorsWeights(path, "llama")
        vp = "vision_tower.vision_model."
        mp = "multi_modal_projector."
        if not st.has(vp + "embeddings.class_embedding"):
            vp, mp = "model." + vp, "model." + mp
        W = self.W
        g = lambda n: st.get(n).astype(np.float64)
        W["patch"] = g(vp + "embeddings.patch_embedding.weight")
        if st.has(vp + "embeddings.patch_embedding.bias"):
            W["patch_b"] = g(vp + "embeddings.patch_embedding.bias")
        W["cls"] = g(vp + "embeddings.class_embedding")
        W["pos"] = g(vp + "embeddings.position_embedding.weight")
        W["pre_w"], W["pre_b"] = g(vp + "pre_layrnorm.weight"), g(vp + "pre_layrnorm.bias")
        c["n_stored"] = 0
        while st.has(vp + "encoder.layers.%d.layer_norm1.weight" % c["n_stored"]):
            i = c["n_stored"]
            p = vp + "encoder.layers.%d." % i
            for ours, theirs in (("q", "self_attn.q_proj"), ("k", "self_attn.k_proj"), ("v", "self_attn.v_proj"),
                                 ("o", "self_attn.out_proj"), ("ln1", "layer_norm1"), ("ln2", "layer_norm2"),
                                 ("fc1", "mlp.fc1"), ("fc2", "mlp.fc2")):
                W["%d.%s_w" % (i, ours)] = g(p + theirs + ".weight")
                W["%d.%s_b" % (i, ours)] = g(p + theirs + ".bias")
            c["n_stored"] += 1
        if c["n_stored"] != L:
            raise ValueError("%s: %d vision layers stored, config says %d" % (path, c["n_stored"], L))
        W["mm0_w"], W["mm0_b"] = g(mp + "linear_1.weight"), g(mp + "linear_1.bias")
        W["mm2_w"], W["mm2_b"] = g(mp + "linear_2.weight"), g(mp + "linear_2.bias")
        self.c = c

    @property
    def n_tokens(self):
        g = self.c["image_size"] // self.c["patch_size"]
        return g * g + (0 if self.c["drop_cls"] else 1)

    def preprocess(self, path):
        """[3, S, S] float64 pixels of an image file."""
        from PIL import Image
        c = self.c
        S = c["image_size"]
        img = Image.open(path).convert("RGB")
        if c["pad"]:
            img = expand2square(img, c.get("pad_colour") or tuple(int(x * 255) for x in c["mean"]))
        if img.size != (S, S):
            img = img.resize((S, S), c.get("resample", Image.BICUBIC))
        x = np.asarray(img, dtype=np.float64) / 255.0
        x = (x - np.asarray(c["mean"])) / np.asarray(c["std"])
        return x.transpose(2, 0, 1)

    def act(self, x):
        return quick_gelu(x) if self.c["act"] == "quick_gelu" else gelu_erf(x)

    def encode(self, pixels):
        """Image embeddings [n_tokens, decoder n_embd] of [3, S, S] pixels."""
        c, W = self.c, self.W
        S, p, H, nh = c["image_size"], c["patch_size"], c["n_embd"], c["n_head"]
        g = S // p
        if c["n_run"] > c["n_stored"]:
            raise ValueError("%d vision layers to run, %d stored" % (c["n_run"], c["n_stored"]))
        patches = pixels.reshape(3, g, p, g, p).transpose(1, 3, 0, 2, 4).reshape(g * g, 3 * p * p)
        x = patches @ W["patch"].reshape(H, -1).T
        if "patch_b" in W:
            x = x + W["patch_b"]
        x = np.concatenate([W["cls"][None, :], x]) + W["pos"]
        x = layer_norm(x, W["pre_w"], W["pre_b"], c["eps"])
        T, hd = x.shape[0], H // nh
        for i in range(c["n_run"]):
            lin = lambda h, n: h @ W["%d.%s_w" % (i, n)].T + W["%d.%s_b" % (i, n)]
            h = layer_norm(x, W["%d.ln1_w" % i], W["%d.ln1_b" % i], c["eps"])
            q = lin(h, "q").reshape(T, nh, hd).transpose(1, 0, 2)
            k = lin(h, "k").reshape(T, nh, hd).transpose(1, 0, 2)
            v = lin(h, "v").reshape(T, nh, hd).transpose(1, 0, 2)
            s = q @ k.transpose(0, 2, 1) * hd ** -0.5
            s = np.exp(s - s.max(axis=-1, keepdims=True))
            s /= s.sum(axis=-1, keepdims=True)
            x = x + lin((s @ v).transpose(1, 0, 2).reshape(T, H), "o")
            h = layer_norm(x, W["%d.ln2_w" % i], W["%d.ln2_b" % i], c["eps"])
            x = x + lin(self.act(lin(h, "fc1")), "fc2")
        if c["drop_cls"]:
            x = np.delete(x, c.get("drop_row", 0), axis=0)  # row 0 is CLS
        return gelu_erf(x @ W["mm0_w"].T + W["mm0_b"]) @ W["mm2_w"].T + W["mm2_b"]

    def embed_image(self, path):
        return self.encode(self.preprocess(path))


class RefLlava:
    """Decoder + vision: MODEL (decoder GGUF with mmproj, or an HF LLaVA dir)."""

    def __init__(self, model, mmproj=None):
        self.dec = RefModel(model)
        self.vis = RefVision(mmproj or model)
        n_out = self.vis.W["mm2_w"].shape[0]
        if n_out != self.dec.c["n_embd"]:
            raise ValueError("projector width %d != decoder n_embd %d" % (n_out, self.dec.c["n_embd"]))

    def logits(self, ids, images):
        """[T, n_vocab] logits: ids < 0 are filled, in order, by the image
        embeddings of `images` (files), n_tokens positions per image."""
        rows = [self.vis.embed_image(p) for p in images]
        extra = np.concatenate(rows) if rows else None
        return self.dec.logits(ids, extra)


def make_test_images(d):
    """Two seeded non-square test images (so that padding matters): 37x23
    noise and a 20x50 gradient, as PNG files in d."""
    from PIL import Image
    rng = np.random.default_rng(1234)
    a = rng.integers(0, 256, size=(23, 37, 3), dtype=np.uint8)
    yy, xx = np.mgrid[0:50, 0:20]
    b = np.stack([xx * 12, yy * 5, 255 - (xx * 6 + yy * 2)], axis=-1).clip(0, 255).astype(np.uint8)
    paths = [os.path.join(d, "noise_37x23.png"), os.path.join(d, "gradient_20x50.png")]
    Image.fromarray(a, "RGB").save(paths[0])
    Image.fromarray(b, "RGB").save(paths[1])
    return paths


# ------------------------------------------------------------- self-check --

CHECK_TEXT = [0, 45, 77, 12, 258]


def check_ids(n_img):
    return CHECK_TEXT + [-1] * n_img + [100, 33] + [-1] * n_img + [260, 299, 5]


def mutations(vis):
    """(name, overrides) that each break one convention of the reference."""
    from PIL import Image
    c = vis.c
    return [
        ("quick GELU <-> erf GELU", {"act": "gelu" if c["act"] == "quick_gelu" else "quick_gelu"}),
        ("last row dropped, not CLS", {"drop_row": -1}),
        ("feature layer one earlier", {"n_run": c["n_run"] - 1}),
        ("padding colour black", {"pad_colour": (0, 0, 0)}),
        ("no padding (stretch)", {"pad": False}),
        ("bilinear resize", {"resample": Image.BILINEAR}),
    ]


def rel(a, b):
    return float(np.abs(a - b).max() / np.abs(b).max())


def self_check(d):
    import tempfile
    needed = ["llava-f32.gguf", "llava-mmproj-f32.gguf", "llava-mmproj-f16.gguf", "llava-st", "llava-st-new"]
    missing = [n for n in needed if not os.path.exists(os.path.join(d, n))]
    if missing:
        print("SKIP: %s absent from %s" % (missing, d))
        return 77
    try:
        import PIL  # noqa: F401
    except ImportError:
        print("SKIP: Pillow is not installed (the reference's image preprocessing)")
        return 77
    failed = 0

    def report(ok, what):
        nonlocal failed
        failed += not ok
        print("%-4s %s" % ("ok" if ok else "FAIL", what))

    with tempfile.TemporaryDirectory() as tmp:
        images = make_test_images(tmp)
        m = RefLlava(os.path.join(d, "llava-f32.gguf"), os.path.join(d, "llava-mmproj-f32.gguf"))
        ids = check_ids(m.vis.n_tokens)
        base = m.logits(ids, images)
        emb = m.vis.embed_image(images[0])
        print("image embeddings %s, |e| max %.2f; logits |max| %.2f" % (emb.shape, np.abs(emb).max(),
                                                                        np.abs(base).max()))
        report(emb.shape == (64, 64), "an image is 64 embeddings of width 64")
        # Each convention moves the logits at least 10x beyond the 1e-4 bound
        # of the engine tests, so agreement within it pins every one of them.
        for name, o in mutations(m.vis):
            saved = dict(m.vis.c)
            m.vis.c.update(o)
            try:
                diff = rel(m.logits(ids, images), base)
            finally:
                m.vis.c = saved
            report(diff > 1e-3, "%-28s changes logits by %.2e" % (name, diff))
        first_img = len(CHECK_TEXT)
        diff = rel(base[:first_img], m.dec.logits(CHECK_TEXT))
        report(diff < 1e-12, "text before the first image ignores it (%.1e)" % diff)
        for other in ("llava-st", "llava-st-new"):
            diff = rel(RefLlava(os.path.join(d, other)).logits(ids, images), base)
            report(diff < 1e-6, "%s == llava-f32.gguf + mmproj-f32: %.2e" % (other, diff))
        f16 = RefLlava(os.path.join(d, "llava-f32.gguf"), os.path.join(d, "llava-mmproj-f16.gguf"))
        report(f16.vis.c["act"] == "gelu", "mmproj-f16 has clip.use_gelu = true")
        diff = rel(f16.logits(ids, images), base)
        report(diff > 1e-3, "mmproj-f16 (erf GELU, F16) differs from mmproj-f32 by %.2e" % diff)
        saved = dict(f16.vis.c)
        f16.vis.c["act"] = "quick_gelu"
        diff = rel(f16.logits(ids, images), base)
        f16.vis.c = saved
        report(diff < 2e-3, "mmproj-f16 read as quick GELU is mmproj-f32 up to F16 rounding: %.2e" % diff)
        try:
            RefLlava(os.path.join(d, "llava-f32.gguf"), os.path.join(d, "llava-mmproj-badproj.gguf"))
            report(False, "mmproj-badproj rejected")
        except ValueError as e:
            report(True, "mmproj-badproj rejected: %s" % e)
    return 1 if failed else 0


def main():
    import argparse
    if len(sys.argv) == 3 and sys.argv[1] == "check":
        return self_check(sys.argv[2])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--mmproj")
    ap.add_argument("images", nargs="*")
    a = ap.parse_args()
    m = RefLlava(a.model, a.mmproj)
    print("vision:", m.vis.c)
    for p in a.images:
        e = m.vis.embed_image(p)
        print("%s: embeddings %s, mean %.4f, std %.4f" % (p, e.shape, e.mean(), e.std()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
