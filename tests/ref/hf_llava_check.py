#!/usr/bin/env python3
"""Checks kvfold's LLaVA logits against Hugging Face's LlavaForConditionalGeneration.

    hf_llava_check.py --dump BUILD/tests/dump_logits LLAVA_HF_DIR

Needs PyTorch, transformers and Pillow (not part of the default test venv:
exits 77 = skipped without them). The model is built by transformers from the
directory's config.json and safetensors, in float32 on the CPU (or CUDA when
present). Two square images are used so that LLaVA-1.5's pad-to-square (which
kvfold implements and llava-hf's processor omits) is the identity and both
sides see the same pixels: transformers' own CLIPImageProcessorPil prepares
them. kvfold runs the same prompt through dump_logits; the image positions are
filled with the config's image_token_index for transformers.

Passes when max|a - b| / max|b| < 1e-4 over every position, and argmax agrees.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

SKIP = 77
PROMPT = "USER: <image>\n<image>\nWhat is the difference? ASSISTANT:"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dump", required=True)
    ap.add_argument("model")
    args = ap.parse_args()
    if not os.path.isdir(args.model):
        print(f"SKIP: {args.model} is absent")
        return SKIP
    try:
        import torch
        from PIL import Image
        from transformers import LlavaForConditionalGeneration
        # Pillow's resize, as LLaVA-1.5 was trained with (CLIPImageProcessor is torchvision's
        # once torchvision is installed, which Qwen's video check needs).
        from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil
    except ImportError as e:
        print(f"SKIP: {e}")
        return SKIP
    cfg = json.load(open(os.path.join(args.model, "config.json")))
    image_token = cfg["image_token_index"]
    size = cfg["vision_config"]["image_size"]
    rng = np.random.default_rng(7)
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for i, side in enumerate((size + 8, size * 3)):
            img = Image.fromarray(rng.integers(0, 256, (side, side, 3), dtype=np.uint8), "RGB")
            paths.append(os.path.join(tmp, f"img{i}.png"))
            img.save(paths[-1])
        out = os.path.join(tmp, "logits.bin")
        cmd = [args.dump, "--prompt", PROMPT]
        for p in paths:
            cmd += ["--image", p]
        res = subprocess.run(cmd + [args.model, out], capture_output=True, text=True)
        if res.returncode != 0:
            print(f"FAIL: dump_logits: {res.stderr}")
            return 1
        info = dict(line.split(" ", 1) for line in res.stdout.strip().splitlines())
        n_vocab, n_tok = int(info["n_vocab"]), int(info["n_tokens"])
        ids = [int(x) for x in info["ids"].split()]
        ours = np.fromfile(out, dtype=np.float32).reshape(n_tok, n_vocab)

        dev = "cuda" if torch.cuda.is_available() else "cpu"
        model = LlavaForConditionalGeneration.from_pretrained(args.model, torch_dtype=torch.float32).to(dev).eval()
        proc = CLIPImageProcessorPil.from_pretrained(args.model)
        pixels = proc(images=[Image.open(p).convert("RGB") for p in paths], return_tensors="pt")["pixel_values"]
        input_ids = torch.tensor([[image_token if t < 0 else t for t in ids]], device=dev)
        with torch.no_grad():
            hf = model(input_ids=input_ids, pixel_values=pixels.to(dev)).logits[0].float().cpu().numpy()
    hf = hf[:, :n_vocab]
    err = float(np.max(np.abs(ours - hf)) / np.max(np.abs(hf)))
    agree = float(np.mean(ours.argmax(-1) == hf.argmax(-1)))
    print(f"transformers {__import__('transformers').__version__}, torch {torch.__version__} on {dev}: "
          f"{n_tok} positions, max rel err {err:.3e}, argmax agreement {agree:.3f}")
    if err >= 1e-4 or agree < 1.0:
        print("FAIL")
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
