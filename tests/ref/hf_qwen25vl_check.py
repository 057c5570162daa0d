#!/usr/bin/env python3
"""Checks kvfold's Qwen2.5-VL (and, --family qwen2vl, Qwen2-VL) path against
Hugging Face transformers.

    hf_qwen25vl_check.py [--family qwen2vl] --dump DUMP_LOGITS --preproc DUMP_PREPROC --fixtures FIXTURE_DIR
                         --passage TEXT OUT_DIR

Qwen2-VL's tiny model has the same decoder and a ViT of LayerNorms and
quick-GELU MLPs attending over whole images; its mmproj is llama.cpp's
qwen2vl_merger.

Needs PyTorch, torchvision, transformers, Pillow and gguf (the .venv-hf of scripts/setup-hf.sh;
exits 77 = skipped without them). Builds a tiny random
Qwen2_5_VLForConditionalGeneration with transformers itself (seeded; a
decoder of 2 layers of 64 with M-RoPE sections 2/3/3, a ViT of 4 layers of
32 with 14-pixel patches, 112-pixel windows and full attention in layers 1
and 3, images resized to at most 12 tokens), saves it to OUT_DIR in
transformers' layout with the byte-level BPE tokenizer of the qwen2
fixture plus <|vision_start|>, <|vision_end|>, <|image_pad|> and
<|video_pad|> and a video processor whose pixel bounds are its own, and as
llama.cpp's converter writes it (qwen25vl-f32.gguf + qwen25vl-mmproj-f32.gguf),
and checks:

1. Preprocessing: 12 seeded images of odd sizes and aspect ratios through
   Qwen2VLImageProcessorPil and `DUMP_PREPROC --qwen25vl`: the same resized
   size, and the pixel values, patchified as the processor does, equal to
   float32 rounding (max |diff| <= 1e-6); 11 3-frame videos of odd sizes
   through Qwen2VLVideoProcessor (torchvision) and `--qwen25vl-video`, the
   same.
2. Prompt: kvfold's ids are Qwen2.5-VL's processor layout
   (<|vision_start|> + one <|image_pad|> or <|video_pad|> per token +
   <|vision_end|>).
3. Logits: text + two images of odd sizes (one spanning several windows,
   cut short at the edges), every position within 1e-4 of max|logit| and
   the same argmax; transformers' get_rope_index gives the M-RoPE positions.
   (Attending over whole images instead of windows, or plain RoPE instead
   of M-RoPE, misses by about 0.2.) The same with a 5-frame video after
   the images (3 temporal patches, the last frame repeated), and a 7-frame
   one whose time positions reach its grid's side, against transformers
   given the positions of Qwen's own rule (see video_run). The GGUF +
   mmproj pair gives the directory's ids and logits (within 1e-5), for
   images and for a video.
4. The policy checks of the other vision fixtures, on this model (tools
   beside DUMP_LOGITS): forks equal prefills of their own, batched
   decoding equals decoding alone, a prompt in parts equals it whole, and
   kv_bound (every preset at budget 1.0 bit for bit; every policy's bound).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_gemma3_check import noise_pngs, rel_err, run_kvfold  # noqa: E402

SKIP = 77
N_BASE = 300          # the fixture tokenizer's vocabulary
SPECIALS = ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]
MIN_PIXELS, MAX_PIXELS = 28 * 28, 28 * 28 * 12
# The video processor's bounds (video_preprocessor_config.json), unlike the
# images' and unlike the defaults the mmproj gets.
VIDEO_MIN_PIXELS, VIDEO_MAX_PIXELS = 28 * 28 * 100, 28 * 28 * 200
PROMPT = "Look: <image> and <image> What is the difference between them?"
VIDEO_PROMPT = "Look: <image> and <image> then <video> What changed?"


def build(out, fixtures, family):
    import torch
    import transformers
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
    text = dict(vocab_size=N_BASE + len(SPECIALS), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096, rms_norm_eps=1e-6,
                bos_token_id=0, eos_token_id=1,
                rope_parameters={"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [2, 3, 3]})
    if family == "qwen2vl":
        Config, Model = transformers.Qwen2VLConfig, transformers.Qwen2VLForConditionalGeneration
        vision = dict(depth=4, embed_dim=32, mlp_ratio=2, num_heads=2, hidden_size=64, hidden_act="quick_gelu",
                      patch_size=14, spatial_merge_size=2, temporal_patch_size=2)
    else:
        Config, Model = transformers.Qwen2_5_VLConfig, transformers.Qwen2_5_VLForConditionalGeneration
        vision = dict(depth=4, hidden_size=32, intermediate_size=48, num_heads=2, patch_size=14,
                      spatial_merge_size=2, temporal_patch_size=2, window_size=112, fullatt_block_indexes=[1, 3],
                      out_hidden_size=64, tokens_per_second=2)
    cfg = Config(text_config=text, vision_config=vision, vision_start_token_id=N_BASE,
                 vision_end_token_id=N_BASE + 1, image_token_id=N_BASE + 2, video_token_id=N_BASE + 3,
                 tie_word_embeddings=False)
    torch.manual_seed(0)
    model = Model(cfg).float().eval()
    # Weights large enough that every part moves the logits: matrices
    # ~ N(0, 1/fan_in), norm scales 1 + N(0, 0.1), biases N(0, 0.5).
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                fan_in = p[0].numel()
                p.normal_(0.0, (1.0 if "embed_tokens" in name else 1.0 / fan_in) ** 0.5)
            elif ("norm" in name or "ln_q" in name) and name.endswith("weight"):
                p.normal_(1.0, 0.1)
            else:
                p.normal_(0.0, 0.5)
    model.save_pretrained(out, safe_serialization=True)
    Qwen2VLImageProcessorPil(min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS).save_pretrained(out)
    video_processor(min_pixels=VIDEO_MIN_PIXELS, max_pixels=VIDEO_MAX_PIXELS).save_pretrained(out)
    tok = json.load(open(os.path.join(fixtures, "qwen2-st", "tokenizer.json")))
    for i, s in enumerate(SPECIALS):
        tok["added_tokens"].append({"id": N_BASE + i, "content": s, "single_word": False, "lstrip": False,
                                    "rstrip": False, "normalized": False, "special": True})
        tok["model"]["vocab"][s] = N_BASE + i
    json.dump(tok, open(os.path.join(out, "tokenizer.json"), "w"))
    shutil.copy(os.path.join(fixtures, "qwen2-st", "tokenizer_config.json"), out)
    return model, cfg


def finish(w):
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def expand_images(text, grids):
    """The processor's layout of each <image> of text with grids (t, h, w)."""
    for t, h, w in grids:
        text = text.replace("<image>", "<|vision_start|>" + "<|image_pad|>" * (t * h * w // 4) + "<|vision_end|>", 1)
    return text


def prompt_ids(args, tok, text):
    """text's ids as the processor's tokenizer gives them (BOS as the directory says)."""
    bos = json.load(open(os.path.join(args.out, "tokenizer_config.json"))).get("add_bos_token", False)
    return ([0] if bos else []) + tok.encode(text, add_special_tokens=False)


def write_decoder(path, arch, sd, tc, theta, fixture_gguf, specials, prefix, add_bos, qk=lambda rest, v: v):
    """A decoder as llama.cpp's converter writes it, left open for the
    caller's own keys (then finish(w)): text config tc's hyper-parameters,
    the byte-level BPE tokenizer of fixture_gguf plus specials (control
    tokens), the tensors of state dict sd under prefix (and lm_head) by
    llama.cpp's names, qk(rest, v) giving each layer tensor's rows as the
    converter orders them."""
    import gguf
    w = gguf.GGUFWriter(path, arch)
    w.add_context_length(tc.max_position_embeddings)
    w.add_embedding_length(tc.hidden_size)
    w.add_block_count(tc.num_hidden_layers)
    w.add_feed_forward_length(tc.intermediate_size)
    w.add_head_count(tc.num_attention_heads)
    w.add_head_count_kv(tc.num_key_value_heads)
    w.add_layer_norm_rms_eps(tc.rms_norm_eps)
    w.add_rope_freq_base(theta)
    head_dim = getattr(tc, "head_dim", None) or tc.hidden_size // tc.num_attention_heads
    w.add_rope_dimension_count(head_dim)
    r = gguf.GGUFReader(fixture_gguf)
    field = lambda k: r.fields[k]
    tokens = [bytes(field("tokenizer.ggml.tokens").parts[i]).decode() for i in field("tokenizer.ggml.tokens").data]
    types = [int(field("tokenizer.ggml.token_type").parts[i][0]) for i in field("tokenizer.ggml.token_type").data]
    merges = [bytes(field("tokenizer.ggml.merges").parts[i]).decode() for i in field("tokenizer.ggml.merges").data]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(bytes(field("tokenizer.ggml.pre").parts[-1]).decode())
    w.add_token_list(tokens + specials)
    w.add_token_types(types + [3] * len(specials))
    w.add_token_merges(merges)
    w.add_bos_token_id(0)
    w.add_eos_token_id(1)
    w.add_add_bos_token(add_bos)
    names = {"embed_tokens.weight": "token_embd.weight", "norm.weight": "output_norm.weight"}
    for k, v in sd.items():
        if k == "lm_head.weight":
            w.add_tensor("output.weight", v)
        elif k.startswith(prefix):
            n = k[len(prefix):]
            if n in names:
                w.add_tensor(names[n], v)
                continue
            _, l, rest = n.split(".", 2)
            v = np.ascontiguousarray(qk(rest, v))
            rest = (rest.replace("input_layernorm", "attn_norm").replace("post_attention_layernorm", "ffn_norm")
                    .replace("self_attn.q_proj", "attn_q").replace("self_attn.k_proj", "attn_k")
                    .replace("self_attn.v_proj", "attn_v").replace("self_attn.o_proj", "attn_output")
                    .replace("self_attn.q_norm", "attn_q_norm").replace("self_attn.k_norm", "attn_k_norm")
                    .replace("mlp.gate_proj", "ffn_gate").replace("mlp.up_proj", "ffn_up")
                    .replace("mlp.down_proj", "ffn_down"))
            w.add_tensor(f"blk.{l}.{rest}", v)
    return w


def write_gguf_pair(model, cfg, out, fixtures, family):
    """The same weights as llama.cpp's converter writes them: the decoder as
    arch qwen2vl (rope.dimension_sections), the tower as a qwen2.5vl mmproj
    (the 3-D patch kernel split by frame, qkv split, the merger as
    v.post_ln / mm.0 / mm.2); the tokenizer of the qwen2 fixture's GGUF plus
    the specials. Returns (decoder path, mmproj path)."""
    import gguf
    sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    tc, vc = cfg.text_config, cfg.vision_config
    dec = os.path.join(out, f"{family}-f32.gguf")
    w = write_decoder(dec, "qwen2vl", sd, tc, tc.rope_parameters["rope_theta"],
                      os.path.join(fixtures, "qwen2-f32.gguf"), SPECIALS, "model.language_model.", True)
    w.add_rope_dimension_sections(list(tc.rope_parameters["mrope_section"]) + [0])
    finish(w)

    mm = os.path.join(out, f"{family}-mmproj-f32.gguf")
    w = gguf.GGUFWriter(mm, "clip")
    w.add_bool("clip.has_vision_encoder", True)
    w.add_uint32("clip.vision.image_size", 560)
    if family == "qwen2vl":
        w.add_string("clip.projector_type", "qwen2vl_merger")
        w.add_bool("clip.use_gelu", True)
        sizes = (("embedding_length", vc.embed_dim), ("feed_forward_length", vc.embed_dim * vc.mlp_ratio))
    else:
        w.add_string("clip.projector_type", "qwen2.5vl")
        w.add_bool("clip.use_silu", True)
        sizes = (("embedding_length", vc.hidden_size), ("feed_forward_length", vc.intermediate_size),
                 ("n_wa_pattern", vc.fullatt_block_indexes[0] + 1))
    for k, val in sizes + (("patch_size", vc.patch_size), ("attention.head_count", vc.num_heads),
                           ("block_count", vc.depth), ("projection_dim", tc.hidden_size)):
        w.add_uint32("clip.vision." + k, val)
    w.add_float32("clip.vision.attention.layer_norm_epsilon", 1e-6)
    w.add_array("clip.vision.image_mean", [0.48145466, 0.4578275, 0.40821073])
    w.add_array("clip.vision.image_std", [0.26862954, 0.26130258, 0.27577711])
    vis = "model.visual."
    for k, v in sd.items():
        if not k.startswith(vis):
            continue
        n = k[len(vis):]
        if n == "patch_embed.proj.weight":
            w.add_tensor("v.patch_embd.weight", np.ascontiguousarray(v[:, :, 0]))
            w.add_tensor("v.patch_embd.weight.1", np.ascontiguousarray(v[:, :, 1]))
        elif n.startswith("merger."):
            w.add_tensor({"merger.ln_q.weight": "v.post_ln.weight", "merger.ln_q.bias": "v.post_ln.bias",
                          "merger.mlp.0.weight": "mm.0.weight",
                          "merger.mlp.0.bias": "mm.0.bias", "merger.mlp.2.weight": "mm.2.weight",
                          "merger.mlp.2.bias": "mm.2.bias"}[n], v)
        else:
            _, l, rest = n.split(".", 2)
            if rest.startswith("attn.qkv."):
                kind = rest.rsplit(".", 1)[1]
                for i, part in enumerate(np.split(v, 3, axis=0)):
                    w.add_tensor(f"v.blk.{l}.attn_{'qkv'[i]}.{kind}", np.ascontiguousarray(part))
                continue
            rest = (rest.replace("norm1", "ln1").replace("norm2", "ln2").replace("attn.proj", "attn_out")
                    .replace("mlp.gate_proj", "ffn_gate").replace("mlp.up_proj", "ffn_up")
                    .replace("mlp.down_proj", "ffn_down").replace("mlp.fc1", "ffn_up")
                    .replace("mlp.fc2", "ffn_down"))
            w.add_tensor(f"v.blk.{l}.{rest}", v)
    finish(w)
    return dec, mm


def images(rng, shapes=((90, 50), (33, 61), (140, 29), (28, 28), (57, 57), (200, 80), (15, 70), (64, 100),
                         (29, 200), (43, 31), (120, 120), (9, 40))):
    """(name, RGB picture) of each (width, height): noise and gradients in turn."""
    from PIL import Image
    out = []
    for i, (w, h) in enumerate(shapes):
        if i % 2 == 0:
            a = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        else:
            y, x = np.mgrid[0:h, 0:w]
            a = np.stack([x * 255 // max(w - 1, 1), y * 255 // max(h - 1, 1), (x * 3 + y * 5) % 256], -1)
        out.append((f"img{i}.png", Image.fromarray(a.astype(np.uint8), "RGB")))
    return out


def patchify(img, patch=14, merge=2, temporal=2):
    """The processor's patch layout, from [3][H][W]."""
    c, h, w = img.shape
    gh, gw = h // patch, w // patch
    p = img.reshape(c, gh // merge, merge, patch, gw // merge, merge, patch).transpose(1, 4, 2, 5, 0, 3, 6)
    p = np.broadcast_to(p[:, :, :, :, :, None], (*p.shape[:5], temporal, *p.shape[5:]))
    return p.reshape(gh * gw, c * temporal * patch * patch)


def check_preproc(args, tmp, proc, mode="--qwen25vl", bounds=(MIN_PIXELS, MAX_PIXELS), patch=14):
    """12 images through proc (a Qwen2VLImageProcessorPil) and `DUMP_PREPROC
    mode MIN MAX`: the same size and pixels."""
    worst = 0.0
    for name, img in images(np.random.default_rng(5)):
        path = os.path.join(tmp, name)
        img.save(path)
        out = os.path.join(tmp, name + ".bin")
        res = subprocess.run([args.preproc, mode, str(bounds[0]), str(bounds[1]), path, out],
                             capture_output=True, text=True)
        if res.returncode != 0:
            print(f"FAIL: dump_preproc {name}: {res.stderr}")
            return False
        h, w = (int(x) for x in res.stdout.split())
        ref = proc(images=[img], return_tensors="np")
        th, tw = (int(x) * patch for x in ref["image_grid_thw"][0][1:])
        if (h, w) != (th, tw):
            print(f"FAIL: {name} {img.size}: resized to {w}x{h}, the processor to {tw}x{th}")
            return False
        ours = patchify(np.fromfile(out, dtype=np.float32).reshape(3, h, w), patch=patch)
        diff = float(np.max(np.abs(ours - np.asarray(ref["pixel_values"], dtype=np.float32))))
        worst = max(worst, diff)
        if diff > 1e-6:
            print(f"FAIL: {name} {img.size}: max |diff| {diff:.3e} against Qwen2VLImageProcessorPil")
            return False
    print(f"preprocessing ({mode}): 12 images, sizes and pixels equal (max |diff| {worst:.3e}) to "
          "Qwen2VLImageProcessorPil")
    return True


def video_processor(**kw):
    from transformers.models.qwen2_vl.video_processing_qwen2_vl import Qwen2VLVideoProcessor
    return Qwen2VLVideoProcessor(cap_pixels_per_frame=False, **kw)


def check_video_preproc(args, tmp, vproc):
    """Frames of odd sizes through Qwen2VLVideoProcessor (torchvision's
    bicubic on uint8, its fused normalisation, a 3-frame video padded to 4)
    and `DUMP_PREPROC --qwen25vl-video`, frame by frame."""
    rng = np.random.default_rng(6)
    worst = 0.0
    shapes = [(90, 50), (33, 61), (140, 29), (57, 57), (250, 190), (64, 100), (29, 200), (430, 310), (300, 170),
              (15, 70), (351, 333)]
    for w, h in shapes:
        frames = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for _ in range(3)]
        ref = vproc(videos=[frames], return_tensors="np")
        t, gh, gw = (int(x) for x in ref["video_grid_thw"][0])
        ours = []
        for i, f in enumerate(frames + frames[-1:]):
            path = os.path.join(tmp, f"frame{i}.png")
            from PIL import Image
            Image.fromarray(f).save(path)
            res = subprocess.run([args.preproc, "--qwen25vl-video", str(VIDEO_MIN_PIXELS), str(VIDEO_MAX_PIXELS), path,
                                  path + ".bin"], capture_output=True, text=True)
            if res.returncode != 0:
                print(f"FAIL: dump_preproc --qwen25vl-video: {res.stderr}")
                return False
            fh, fw = (int(x) for x in res.stdout.split())
            if (fh, fw) != (gh * 14, gw * 14):
                print(f"FAIL: a {w}x{h} frame: resized to {fw}x{fh}, the video processor to {gw * 14}x{gh * 14}")
                return False
            ours.append(np.fromfile(path + ".bin", dtype=np.float32).reshape(3, fh, fw))
        v = np.stack(ours).reshape(t, 2, 3, gh // 2, 2, 14, gw // 2, 2, 14)
        v = v.transpose(0, 3, 6, 4, 7, 2, 1, 5, 8).reshape(t * gh * gw, -1)
        diff = float(np.max(np.abs(v - ref["pixel_values_videos"])))
        worst = max(worst, diff)
        if diff > 1e-6:
            print(f"FAIL: a {w}x{h} frame: max |diff| {diff:.3e} against Qwen2VLVideoProcessor")
            return False
    print(f"video preprocessing: {len(shapes)} 3-frame videos, sizes and pixels equal (max |diff| {worst:.3e}) to "
          "Qwen2VLVideoProcessor")
    return True


def rope_original(ids, grids, steps, pad_ids):
    """M-RoPE positions [3][n] as Qwen's own get_rope_index lays them out
    (transformers 4, vLLM): text after an image or video goes on one past
    the largest position it took. grids / steps: each vision item's (t, h,
    w) and time step (images: 0), in order; pad_ids: the pad tokens."""
    pos, cur, i, k = [], 0, 0, 0
    while i < len(ids):
        if ids[i] not in pad_ids:
            pos.append((cur, cur, cur))
            cur, i = cur + 1, i + 1
            continue
        (t, h, w), step = grids[k], np.float32(steps[k])
        h, w = h // 2, w // 2
        block = [(cur + int(np.float32(a) * step), cur + r, cur + c) for a in range(t) for r in range(h) for c in range(w)]
        pos += block
        cur, i, k = max(max(b) for b in block) + 1, i + len(block), k + 1
    return np.array(pos, dtype=np.int64).T


def video_run(args, model, cfg, tok, tmp, frames, fps, with_images, original_rope):
    """kvfold's and transformers' logits for VIDEO_PROMPT (or "<video> ...")
    with these frames at fps: (max rel err, argmax agreement, ids equal,
    positions)."""
    import torch
    from PIL import Image
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
    iproc = Qwen2VLImageProcessorPil.from_pretrained(args.out)
    vproc = video_processor(min_pixels=VIDEO_MIN_PIXELS, max_pixels=VIDEO_MAX_PIXELS)
    images = noise_pngs(tmp, ((170, 60), (61, 44)) if with_images else (), 11, "vprompt")
    paths = []
    for i, f in enumerate(frames):
        paths.append(os.path.join(tmp, f"vframe{i}.png"))
        Image.fromarray(f).save(paths[-1])
    prompt = VIDEO_PROMPT if with_images else "<video> What happens?"
    extra = ["--fps", str(fps)] + sum((["--image", p] for p in images), []) + sum((["--frame", p] for p in paths), [])
    ours, ids = run_kvfold(args, args.out, extra, [], tmp, "video", prompt)
    vid = vproc(videos=[frames], return_tensors="pt")
    grids = []
    text = prompt
    if images:
        pix = iproc(images=[Image.open(p).convert("RGB") for p in images], return_tensors="pt")
        grids = pix["image_grid_thw"].tolist()
        for t, h, w in grids:
            text = text.replace("<image>", "<|vision_start|>" + "<|image_pad|>" * (t * h * w // 4) + "<|vision_end|>", 1)
    t, h, w = vid["video_grid_thw"][0].tolist()
    text = text.replace("<video>", "<|vision_start|>" + "<|video_pad|>" * (t * h * w // 4) + "<|vision_end|>", 1)
    bos = json.load(open(os.path.join(args.out, "tokenizer_config.json"))).get("add_bos_token", False)
    want = ([0] if bos else []) + tok.encode(text, add_special_tokens=False)
    pads = (cfg.image_token_id, cfg.video_token_id)
    same = [x if x not in pads else -1 for x in want] == ids
    input_ids = torch.tensor([want])
    second = 2 / fps  # temporal_patch_size / fps, as Qwen2_5_VLProcessor makes second_per_grid_ts
    kw = dict(input_ids=input_ids, pixel_values_videos=vid["pixel_values_videos"], video_grid_thw=vid["video_grid_thw"],
              mm_token_type_ids=(input_ids == cfg.image_token_id).int() + 2 * (input_ids == cfg.video_token_id).int())
    if hasattr(cfg.vision_config, "tokens_per_second"):
        kw["second_per_grid_ts"] = torch.tensor([second])
    if images:
        kw.update(pixel_values=pix["pixel_values"], image_grid_thw=pix["image_grid_thw"])
    step = np.float32(cfg.vision_config.tokens_per_second) * np.float32(second) \
        if hasattr(cfg.vision_config, "tokens_per_second") else 1.0
    if original_rope:
        kw["position_ids"] = torch.from_numpy(rope_original(want, grids + [[t, h, w]], [0] * len(grids) + [step],
                                                            pads))[:, None, :]
    with torch.no_grad():
        hf = model(**kw).logits[0].float().numpy()[:, :ours.shape[1]]
    err = rel_err(ours, hf)
    agree = float(np.mean(ours.argmax(-1) == hf.argmax(-1)))
    return err, agree, same, f"{len(ids)} positions, video grid {[t, h, w]}, time step {float(step):g}"


def reference_args(families, fixture):
    """The command line of the tiny-model reference scripts (this one's, in its docstring); None (after
    saying so) when FIXTURE_DIR lacks `fixture`, whose tokenizer the model takes."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--dump", required=True)
    ap.add_argument("--preproc", required=True)
    ap.add_argument("--fixtures", required=True)
    ap.add_argument("--passage", required=True, help="text for kv_bound's long prompt")
    ap.add_argument("--family", choices=families, default=families[0])
    ap.add_argument("out")
    args = ap.parse_args()
    if not os.path.isfile(os.path.join(args.fixtures, fixture, "tokenizer.json")):
        print(f"SKIP: {args.fixtures}/{fixture} is absent")
        return None
    return args


def fresh_out(out):
    """OUT_DIR emptied, and its work/ folder for the images and dumps."""
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(os.path.join(out, "work"))
    return os.path.join(out, "work")


def policy_checks(args):
    """The policy checks the LLaVA and Gemma 3 fixtures run (tests/integration/kv.cmake), on the model in
    args.out (tools beside args.dump): True when each passes."""
    tools = os.path.dirname(os.path.abspath(args.dump))
    ok = True
    for tool, extra in (("kv_fork", ["-"]), ("decode_batch", ["-"]), ("prefill_parts", ["-"]), ("session_file", ["-"]),
                        ("kv_bound", [args.passage, "300", "40"])):
        res = subprocess.run([os.path.join(tools, tool), args.out] + extra, capture_output=True, text=True)
        last = res.stdout.strip().splitlines()[-1] if res.stdout.strip() else res.stderr.strip()
        print(f"{tool}: {last}")
        if res.returncode != 0:
            print(res.stdout[-3000:] + res.stderr[-2000:])
            ok = False
    return ok


def main():
    args = reference_args(("qwen25vl", "qwen2vl"), "qwen2-st")
    if not args:
        return SKIP
    try:
        import gguf  # noqa: F401
        import torch
        import torchvision  # noqa: F401 (the video processor resizes with it)
        import transformers
        from PIL import Image
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
    except ImportError as e:
        print(f"SKIP: {e} (scripts/setup-hf.sh installs torch and transformers into .venv-hf)")
        return SKIP
    tmp = fresh_out(args.out)
    model, cfg = build(args.out, args.fixtures, args.family)
    proc = Qwen2VLImageProcessorPil.from_pretrained(args.out)
    if not check_preproc(args, tmp, proc) or \
            not check_video_preproc(args, tmp, video_processor(min_pixels=VIDEO_MIN_PIXELS,
                                                               max_pixels=VIDEO_MAX_PIXELS)):
        return 1
    # 168 x 56 px: 2 x 6 merge units, windows of 4 x 4 units cut short at the right.
    paths = noise_pngs(tmp, ((170, 60), (61, 44)), 9)
    try:
        ours, ids = run_kvfold(args, args.out, [], paths, tmp, "st", PROMPT)
    except RuntimeError as e:
        print(f"FAIL: {e}")
        return 1
    n_tok, n_vocab = ours.shape
    # The same weights as llama.cpp's GGUF + mmproj, told the directory's
    # image bounds as a llama.cpp user would (--image-min/max-tokens).
    dec, mm = write_gguf_pair(model, cfg, args.out, args.fixtures, args.family)
    bounds = ["--image-min-tokens", str(MIN_PIXELS // 784), "--image-max-tokens", str(MAX_PIXELS // 784)]
    try:
        gg, gids = run_kvfold(args, dec, ["--mmproj", mm] + bounds, paths, tmp, "gguf", PROMPT)
    except RuntimeError as e:
        print(f"FAIL: {e}")
        return 1
    gerr = rel_err(gg, ours)
    # kvfold's own flags: the directory's bounds narrowed, the mmproj's llama.cpp defaults.
    kvfold = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(args.dump))), "kvfold")
    for path, extra, want in ((args.out, ["--image-max-tokens", "4"], "up to 4 tokens"),
                              (dec, ["--mmproj", mm], "up to 4096 tokens")):
        res = subprocess.run([kvfold, "info", "-m", path] + extra, capture_output=True, text=True)
        if res.returncode != 0 or want not in res.stdout:
            print(f"FAIL: kvfold info -m {path} {' '.join(extra)}: want '{want}': {res.stdout[-300:]}{res.stderr}")
            return 1
    print(f"gguf + mmproj: ids {'equal' if gids == ids else 'DIFFER'}, max rel err {gerr:.3e} against the directory")

    pix = proc(images=[Image.open(p).convert("RGB") for p in paths], return_tensors="pt")
    grids = pix["image_grid_thw"].tolist()
    tok = transformers.PreTrainedTokenizerFast(tokenizer_file=os.path.join(args.out, "tokenizer.json"))
    want = prompt_ids(args, tok, expand_images(PROMPT, grids))
    got = [cfg.image_token_id if t < 0 else t for t in ids]
    ok = want == got
    print(f"prompt ids {'equal' if ok else 'DIFFER from'} the processor's layout ({len(want)} vs {len(got)}); "
          f"image grids {grids}")
    input_ids = torch.tensor([got])
    with torch.no_grad():
        hf = model(input_ids=input_ids, pixel_values=pix["pixel_values"], image_grid_thw=pix["image_grid_thw"],
                   mm_token_type_ids=(input_ids == cfg.image_token_id).int()).logits[0].float().numpy()
    hf = hf[:, :n_vocab]
    err = rel_err(ours, hf)
    agree = float(np.mean(ours.argmax(-1) == hf.argmax(-1)))
    print(f"transformers {transformers.__version__}, torch {torch.__version__}: {n_tok} positions "
          f"({sum(t < 0 for t in ids)} image), max rel err {err:.3e}, argmax agreement {agree:.3f}")
    ok &= err < 1e-4 and agree == 1.0 and gids == ids and gerr < 1e-5

    # Videos: 5 frames of 250x190 (the directory's video bounds make them
    # 336x252, the mmproj's defaults would not) at 4 frames a second: 3
    # temporal patches, the last frame repeated; then 7 at 1 a second, whose
    # time positions (0, 4, 8, 12) reach the grid's longer side, where
    # transformers 5's get_rope_index parts from Qwen's own: there the
    # reference is transformers given the positions of Qwen's rule.
    frng = np.random.default_rng(12)
    frames = [frng.integers(0, 256, (190, 250, 3), dtype=np.uint8) for _ in range(7)]
    try:
        for n, fps, images_too, original in ((5, 4.0, True, False), (7, 1.0, False, True), (7, 1.0, False, False)):
            verr, vagree, vsame, what = video_run(args, model, cfg, tok, tmp, frames[:n], fps, images_too, original)
            rule = "Qwen's rule" if original else "transformers' get_rope_index"
            print(f"video, {n} frames at {fps:g}/s ({what}), positions by {rule}: ids "
                  f"{'equal' if vsame else 'DIFFER'}, max rel err {verr:.3e}, argmax agreement {vagree:.3f}")
            if original or fps != 1.0:
                ok &= vsame and verr < 1e-4 and vagree == 1.0
        # The GGUF pair reads the same video: 3 frames that both files' bounds size alike (364x336).
        vframes = [frng.integers(0, 256, (333, 351, 3), dtype=np.uint8) for _ in range(3)]
        vpaths = []
        for i, f in enumerate(vframes):
            vpaths.append(os.path.join(tmp, f"gframe{i}.png"))
            Image.fromarray(f).save(vpaths[-1])
        vextra = sum((["--frame", p] for p in vpaths), [])
        dv, dids = run_kvfold(args, args.out, vextra, [], tmp, "vst", "<video> Describe it.")
        gv, gvids = run_kvfold(args, dec, ["--mmproj", mm] + vextra, [], tmp, "vgguf", "<video> Describe it.")
    except RuntimeError as e:
        print(f"FAIL: {e}")
        return 1
    gverr = rel_err(gv, dv)
    print(f"gguf + mmproj, a 3-frame video ({len(dids)} positions): ids {'equal' if gvids == dids else 'DIFFER'}, "
          f"max rel err {gverr:.3e} against the directory")
    ok &= gvids == dids and gverr < 1e-5
    ok &= policy_checks(args)
    print("ok" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
