#!/usr/bin/env python3
"""Checks kvfold's Qwen2.5-VL path against Hugging Face transformers.

    hf_qwen25vl_check.py --dump DUMP_LOGITS --preproc DUMP_PREPROC --fixtures FIXTURE_DIR --passage TEXT OUT_DIR

Needs PyTorch, transformers and Pillow (the .venv-hf of scripts/setup-hf.sh;
exits 77 = skipped without them). Builds a tiny random
Qwen2_5_VLForConditionalGeneration with transformers itself (seeded; a
decoder of 2 layers of 64 with M-RoPE sections 2/3/3, a ViT of 4 layers of
32 with 14-pixel patches, windows of 2 x 2 merge units and full attention
in layers 1 and 3, images resized to at most 12 tokens), saves it to
OUT_DIR in transformers' layout with the byte-level BPE tokenizer of the
qwen2 fixture plus <|vision_start|>, <|vision_end|> and <|image_pad|>, and
checks:

1. Preprocessing: 12 seeded images of odd sizes and aspect ratios through
   Qwen2VLImageProcessorPil and `DUMP_PREPROC --qwen25vl`: the same resized
   size, and the pixel values, patchified as the processor does, equal to
   float32 rounding (max |diff| <= 1e-6).
2. Prompt: kvfold's ids are Qwen2.5-VL's processor layout
   (<|vision_start|> + one <|image_pad|> per token + <|vision_end|>).
3. Logits: text + two images of odd sizes (one spanning several windows,
   cut short at the edges), every position within 1e-4 of max|logit| and
   the same argmax; transformers' get_rope_index gives the M-RoPE positions.
   (Attending over whole images instead of windows, or plain RoPE instead
   of M-RoPE, misses by about 0.2.)
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
from hf_gemma3_check import run_kvfold  # noqa: E402

SKIP = 77
N_BASE = 300          # the fixture tokenizer's vocabulary
SPECIALS = ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]
MIN_PIXELS, MAX_PIXELS = 28 * 28, 28 * 28 * 12
PROMPT = "Look: <image> and <image> What is the difference between them?"


def build(out, fixtures):
    import torch
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
    cfg = Qwen2_5_VLConfig(
        text_config=dict(vocab_size=N_BASE + len(SPECIALS), hidden_size=64, intermediate_size=128,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=4096, rms_norm_eps=1e-6, bos_token_id=0, eos_token_id=1,
                         rope_parameters={"rope_type": "default", "rope_theta": 1000000.0,
                                          "mrope_section": [2, 3, 3]}),
        vision_config=dict(depth=4, hidden_size=32, intermediate_size=48, num_heads=2, patch_size=14,
                           spatial_merge_size=2, temporal_patch_size=2, window_size=56,
                           fullatt_block_indexes=[1, 3], out_hidden_size=64),
        vision_start_token_id=N_BASE, vision_end_token_id=N_BASE + 1, image_token_id=N_BASE + 2,
        video_token_id=N_BASE + 3, tie_word_embeddings=False)
    torch.manual_seed(0)
    model = Qwen2_5_VLForConditionalGeneration(cfg).float().eval()
    # Weights large enough that every part moves the logits: matrices
    # ~ N(0, 1/fan_in), norm scales 1 + N(0, 0.1), biases N(0, 0.5).
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                fan_in = p[0].numel()
                p.normal_(0.0, (1.0 if "embed_tokens" in name else 1.0 / fan_in) ** 0.5)
            elif "norm" in name or "ln_q" in name:
                p.normal_(1.0, 0.1)
            else:
                p.normal_(0.0, 0.5)
    model.save_pretrained(out, safe_serialization=True)
    Qwen2VLImageProcessorPil(min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS).save_pretrained(out)
    tok = json.load(open(os.path.join(fixtures, "qwen2-st", "tokenizer.json")))
    for i, s in enumerate(SPECIALS):
        tok["added_tokens"].append({"id": N_BASE + i, "content": s, "single_word": False, "lstrip": False,
                                    "rstrip": False, "normalized": False, "special": True})
        tok["model"]["vocab"][s] = N_BASE + i
    json.dump(tok, open(os.path.join(out, "tokenizer.json"), "w"))
    shutil.copy(os.path.join(fixtures, "qwen2-st", "tokenizer_config.json"), out)
    return model, cfg


def images(rng):
    from PIL import Image
    shapes = [(90, 50), (33, 61), (140, 29), (28, 28), (57, 57), (200, 80), (15, 70), (64, 100), (29, 200),
              (43, 31), (120, 120), (9, 40)]
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


def check_preproc(args, tmp, proc):
    worst = 0.0
    for name, img in images(np.random.default_rng(5)):
        path = os.path.join(tmp, name)
        img.save(path)
        out = os.path.join(tmp, name + ".bin")
        res = subprocess.run([args.preproc, "--qwen25vl", str(MIN_PIXELS), str(MAX_PIXELS), path, out],
                             capture_output=True, text=True)
        if res.returncode != 0:
            print(f"FAIL: dump_preproc {name}: {res.stderr}")
            return False
        h, w = (int(x) for x in res.stdout.split())
        ref = proc(images=[img], return_tensors="np")
        th, tw = (int(x) * 14 for x in ref["image_grid_thw"][0][1:])
        if (h, w) != (th, tw):
            print(f"FAIL: {name} {img.size}: resized to {w}x{h}, the processor to {tw}x{th}")
            return False
        ours = patchify(np.fromfile(out, dtype=np.float32).reshape(3, h, w))
        diff = float(np.max(np.abs(ours - np.asarray(ref["pixel_values"], dtype=np.float32))))
        worst = max(worst, diff)
        if diff > 1e-6:
            print(f"FAIL: {name} {img.size}: max |diff| {diff:.3e} against Qwen2VLImageProcessorPil")
            return False
    print(f"preprocessing: 12 images, sizes and pixels equal (max |diff| {worst:.3e}) to Qwen2VLImageProcessorPil")
    return True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dump", required=True)
    ap.add_argument("--preproc", required=True)
    ap.add_argument("--fixtures", required=True)
    ap.add_argument("--passage", required=True, help="text for kv_bound's long prompt")
    ap.add_argument("out")
    args = ap.parse_args()
    if not os.path.isfile(os.path.join(args.fixtures, "qwen2-st", "tokenizer.json")):
        print(f"SKIP: {args.fixtures}/qwen2-st is absent")
        return SKIP
    try:
        import torch
        import transformers
        from PIL import Image
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
    except ImportError as e:
        print(f"SKIP: {e} (scripts/setup-hf.sh installs torch and transformers into .venv-hf)")
        return SKIP
    shutil.rmtree(args.out, ignore_errors=True)
    os.makedirs(args.out)
    model, cfg = build(args.out, args.fixtures)
    proc = Qwen2VLImageProcessorPil.from_pretrained(args.out)
    tmp = os.path.join(args.out, "work")
    os.makedirs(tmp)
    if not check_preproc(args, tmp, proc):
        return 1
    rng = np.random.default_rng(9)
    paths = []
    # 112 x 84 px: 3 x 4 merge units, windows of 2 x 2 cut short at the bottom.
    for i, (w, h) in enumerate(((115, 80), (61, 44))):
        paths.append(os.path.join(tmp, f"prompt{i}.png"))
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8), "RGB").save(paths[-1])
    try:
        ours, ids = run_kvfold(args, args.out, [], paths, tmp, "st", PROMPT)
    except RuntimeError as e:
        print(f"FAIL: {e}")
        return 1
    n_tok, n_vocab = ours.shape

    pix = proc(images=[Image.open(p).convert("RGB") for p in paths], return_tensors="pt")
    grids = pix["image_grid_thw"].tolist()
    tok = transformers.PreTrainedTokenizerFast(tokenizer_file=os.path.join(args.out, "tokenizer.json"))
    text = PROMPT
    for t, h, w in grids:
        text = text.replace("<image>", "<|vision_start|>" + "<|image_pad|>" * (t * h * w // 4) + "<|vision_end|>", 1)
    bos = json.load(open(os.path.join(args.out, "tokenizer_config.json"))).get("add_bos_token", False)
    want = ([0] if bos else []) + tok.encode(text, add_special_tokens=False)
    got = [cfg.image_token_id if t < 0 else t for t in ids]
    ok = want == got
    print(f"prompt ids {'equal' if ok else 'DIFFER from'} the processor's layout ({len(want)} vs {len(got)}); "
          f"image grids {grids}")
    input_ids = torch.tensor([got])
    with torch.no_grad():
        hf = model(input_ids=input_ids, pixel_values=pix["pixel_values"], image_grid_thw=pix["image_grid_thw"],
                   mm_token_type_ids=(input_ids == cfg.image_token_id).int()).logits[0].float().numpy()
    hf = hf[:, :n_vocab]
    err = float(np.max(np.abs(ours - hf)) / np.max(np.abs(hf)))
    agree = float(np.mean(ours.argmax(-1) == hf.argmax(-1)))
    print(f"transformers {transformers.__version__}, torch {torch.__version__}: {n_tok} positions "
          f"({sum(t < 0 for t in ids)} image), max rel err {err:.3e}, argmax agreement {agree:.3f}")
    ok &= err < 1e-4 and agree == 1.0
    # The policy checks the LLaVA and Gemma 3 fixtures run (tests/integration/kv.cmake), on this model.
    tools = os.path.dirname(os.path.abspath(args.dump))
    for tool, extra in (("kv_fork", ["-"]), ("decode_batch", ["-"]), ("prefill_parts", ["-"]),
                        ("kv_bound", [args.passage, "300", "40"])):
        res = subprocess.run([os.path.join(tools, tool), args.out] + extra, capture_output=True, text=True)
        last = res.stdout.strip().splitlines()[-1] if res.stdout.strip() else res.stderr.strip()
        print(f"{tool}: {last}")
        if res.returncode != 0:
            print(res.stdout[-3000:] + res.stderr[-2000:])
            ok = False
    print("ok" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
