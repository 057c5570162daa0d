#!/usr/bin/env python3
"""Checks kvfold's Gemma 3 vision path against Hugging Face transformers.

    hf_gemma3_check.py --dump DUMP_LOGITS --preproc DUMP_PREPROC HF_DIR [--gguf GGUF --mmproj MMPROJ]
                       [--formats-only]

--formats-only (numpy and Pillow only): kvfold's ids and logits from the
GGUF + mmproj pair equal those from HF_DIR (the same weights: within 1e-5
of max|logit|), and each image is one run of mm_tokens_per_image positions
between <start_of_image> and <end_of_image>.

Otherwise needs PyTorch, transformers and Pillow (the .venv-hf of
scripts/setup-hf.sh; exits 77 = skipped without them). Three checks:

1. Preprocessing: 12 seeded images of odd sizes and aspect ratios (noise
   and gradients; RGB, grey and RGBA; upscaled, downscaled, one of them the
   tower's size) through transformers' Gemma3ImageProcessorPil (bilinear
   resize to the square, no pan-and-scan) and `DUMP_PREPROC --gemma3`: the
   pixel values must agree to float32 rounding (max |diff| <= 1e-6).
2. Prompt: kvfold's ids for the prompt are Gemma3Processor's (each image
   "\n\n<start_of_image>" + its tokens + "<end_of_image>\n\n", tokenized by
   the directory's tokenizer.json).
3. Logits: Gemma3ForConditionalGeneration built from HF_DIR (float32, CPU or
   CUDA) on text + two images of odd sizes, its input_ids the ids kvfold
   prompted with (image positions = image_token_index, token_type_ids 1
   there, so transformers applies its bidirectional mask within each
   image); kvfold's logits of every position from HF_DIR, and from the GGUF
   + mmproj pair when given, within 1e-4 of max|logit| and the same argmax.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_llava import image_runs  # noqa: E402

SKIP = 77
# Text on both sides of each image: Gemma3Processor's "\n\n" around the
# image's tokens meets text, and the window (4 in the fixture) spans the
# image's boundaries.
PROMPT = "<start_of_turn>user\nLook: <image> and <image>\nWhat is the difference?<end_of_turn>\n<start_of_turn>model\n"


def images(rng, size):
    """(name, PIL image) pairs of odd sizes around the tower's size."""
    from PIL import Image
    out = []
    shapes = [(size + 5, size - 3), (size * 3 + 1, size + 7), (7, 41), (size, size), (size * 2, size * 2 - 1),
              (13, 13), (size + 1, size * 4), (100, 9), (size // 2 + 1, size // 3 + 1), (61, 47), (3, 3),
              (size * 5 + 3, size * 2 + 1)]
    for i, (w, h) in enumerate(shapes):
        if i % 3 == 0:
            a = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
            img = Image.fromarray(a, "RGB")
        elif i % 3 == 1:
            y, x = np.mgrid[0:h, 0:w]
            a = np.stack([(x * 255 // max(w - 1, 1)), (y * 255 // max(h - 1, 1)), ((x + y) * 7) % 256], -1)
            img = Image.fromarray(a.astype(np.uint8), "RGB")
            if i == 4:
                img = img.convert("L")
        else:
            a = rng.integers(0, 256, (h, w, 4), dtype=np.uint8)
            img = Image.fromarray(a, "RGBA")
        out.append((f"img{i}.png", img))
    return out


def check_preproc(args, tmp, size, proc):
    rng = np.random.default_rng(11)
    worst = 0.0
    for name, img in images(rng, size):
        path = os.path.join(tmp, name)
        img.save(path)
        out = os.path.join(tmp, name + ".bin")
        res = subprocess.run([args.preproc, "--gemma3", path, str(size), out], capture_output=True, text=True)
        if res.returncode != 0:
            print(f"FAIL: dump_preproc {name}: {res.stderr}")
            return False
        ours = np.fromfile(out, dtype=np.float32).reshape(3, size, size)
        ref = np.asarray(proc(images=[img.convert("RGB")], return_tensors="np")["pixel_values"][0], dtype=np.float32)
        diff = float(np.max(np.abs(ours - ref)))
        worst = max(worst, diff)
        if diff > 1e-6:
            print(f"FAIL: {name} {img.size} {img.mode}: max |diff| {diff:.3e} against Gemma3ImageProcessorPil")
            return False
    print(f"preprocessing: 12 images, max |diff| {worst:.3e} against Gemma3ImageProcessorPil")
    return True


def noise_pngs(tmp, sizes, seed, stem="prompt"):
    """Seeded RGB noise images of sizes (w, h), written as tmp/<stem>N.png; their paths."""
    from PIL import Image
    rng = np.random.default_rng(seed)
    paths = []
    for i, (w, h) in enumerate(sizes):
        paths.append(os.path.join(tmp, f"{stem}{i}.png"))
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8), "RGB").save(paths[-1])
    return paths


def rel_err(a, ref):
    """max |a - ref| over max |ref|."""
    return float(np.max(np.abs(a - ref)) / np.max(np.abs(ref)))


def prompt_images(tmp, size):
    """Two seeded noise images of odd sizes (wide and wider), as PNG paths."""
    return noise_pngs(tmp, ((size + 9, size - 5), (size * 2 + 3, size + 1)), 7)


def run_kvfold(args, model, extra, paths, tmp, tag, prompt=PROMPT):
    """kvfold's logits [positions][n_vocab] and ids (-1: image) for prompt with the images at paths."""
    out = os.path.join(tmp, f"logits-{tag}.bin")
    cmd = [args.dump, "--prompt", prompt] + extra
    for p in paths:
        cmd += ["--image", p]
    res = subprocess.run(cmd + [model, out], capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"dump_logits: {res.stderr}")
    info = dict(line.split(" ", 1) for line in res.stdout.strip().splitlines() if " " in line)
    n_vocab, n_tok = int(info["n_vocab"]), int(info["n_tokens"])
    ids = [int(x) for x in info["ids"].split()]
    return np.fromfile(out, dtype=np.float32).reshape(n_tok, n_vocab), ids


def check_formats(args):
    try:
        import PIL  # noqa: F401
    except ImportError as e:
        print(f"SKIP: {e}")
        return SKIP
    cfg = json.load(open(os.path.join(args.model, "config.json")))
    size, n_img = cfg["vision_config"]["image_size"], cfg["mm_tokens_per_image"]
    with tempfile.TemporaryDirectory() as tmp:
        paths = prompt_images(tmp, size)
        st, ids = run_kvfold(args, args.model, [], paths, tmp, "st")
        gg, gids = run_kvfold(args, args.gguf, ["--mmproj", args.mmproj], paths, tmp, "gguf")
    runs = [(ids[i - 1], n, ids[i + n] if i + n < len(ids) else None) for i, n in image_runs(ids)]
    layout = runs == [(cfg["boi_token_index"], n_img, cfg["eoi_token_index"])] * 2
    err = rel_err(gg, st)
    print(f"images: {runs} (boi, tokens, eoi); gguf+mmproj vs safetensors: ids "
          f"{'equal' if ids == gids else 'DIFFER'}, max rel err {err:.3e}")
    ok = layout and ids == gids and err < 1e-5
    print("ok" if ok else "FAIL")
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dump", required=True)
    ap.add_argument("--preproc", required=True)
    ap.add_argument("--gguf")
    ap.add_argument("--mmproj")
    ap.add_argument("--formats-only", action="store_true")
    ap.add_argument("model")
    args = ap.parse_args()
    if not os.path.isdir(args.model):
        print(f"SKIP: {args.model} is absent")
        return SKIP
    if args.formats_only:
        return check_formats(args)
    try:
        import torch
        import transformers
        from PIL import Image
        from transformers import Gemma3ForConditionalGeneration
        from transformers.models.gemma3.image_processing_pil_gemma3 import Gemma3ImageProcessorPil
    except ImportError as e:
        print(f"SKIP: {e} (scripts/setup-hf.sh installs torch and transformers into .venv-hf)")
        return SKIP
    cfg = json.load(open(os.path.join(args.model, "config.json")))
    size = cfg["vision_config"]["image_size"]
    image_token = cfg["image_token_index"]
    proc = Gemma3ImageProcessorPil.from_pretrained(args.model)
    with tempfile.TemporaryDirectory() as tmp:
        if not check_preproc(args, tmp, size, proc):
            return 1
        paths = prompt_images(tmp, size)
        runs = [("safetensors", *run_kvfold(args, args.model, [], paths, tmp, "st"))]
        if args.gguf:
            runs.append(("gguf+mmproj", *run_kvfold(args, args.gguf, ["--mmproj", args.mmproj], paths, tmp, "gguf")))

        dev = "cuda" if torch.cuda.is_available() else "cpu"
        model = Gemma3ForConditionalGeneration.from_pretrained(args.model, dtype=torch.float32).to(dev).eval()
        pixels = proc(images=[Image.open(p).convert("RGB") for p in paths], return_tensors="pt")["pixel_values"]
        ids = runs[0][2]
        input_ids = torch.tensor([[image_token if t < 0 else t for t in ids]], device=dev)
        token_type_ids = (input_ids == image_token).long()
        with torch.no_grad():
            hf = model(input_ids=input_ids, pixel_values=pixels.to(dev), token_type_ids=token_type_ids)
        hf = hf.logits[0].float().cpu().numpy()
    # The prompt as Gemma3Processor writes it: each image marker becomes
    # "\n\n<start_of_image>" + image tokens + "<end_of_image>\n\n".
    tok = transformers.PreTrainedTokenizerFast(tokenizer_file=os.path.join(args.model, "tokenizer.json"))
    n_img = cfg["mm_tokens_per_image"]
    full = "\n\n<start_of_image>" + "<image_soft_token>" * n_img + "<end_of_image>\n\n"
    want = [cfg["text_config"]["bos_token_id"]] + tok.encode(PROMPT.replace("<image>", full), add_special_tokens=False)
    got = [image_token if t < 0 else t for t in ids]
    ok = want == got
    print(f"prompt ids {'equal' if ok else 'DIFFER from'} Gemma3Processor's ({len(want)} vs {len(got)})")
    for name, ours, their_ids in runs:
        if their_ids != ids:
            print(f"FAIL: {name}: prompt ids differ from the safetensors run's")
            ok = False
            continue
        hfv = hf[:, :ours.shape[1]]
        err = rel_err(ours, hfv)
        agree = float(np.mean(ours.argmax(-1) == hfv.argmax(-1)))
        print(f"{name}: transformers {transformers.__version__}, torch {torch.__version__} on {dev}: "
              f"{len(ids)} positions ({sum(t < 0 for t in ids)} image), max rel err {err:.3e}, "
              f"argmax agreement {agree:.3f}")
        ok &= err < 1e-4 and agree == 1.0
    print("ok" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
