#!/usr/bin/env python3
"""Cost of encoding one image with the real vision towers, without their weights.

    bench/vision_encode.py KVFOLD [--threads 1,2] [--reps 2] [--keep DIR]

Writes, with the gguf package of the test venv, llama.cpp-layout mmproj
files of the real sizes whose weights are all zero (the work of a dense
encoder does not depend on the values), each beside a one-layer decoder of
the width its projector maps to:

  llava15  CLIP ViT-L/14 at 336 px, the 23 layers LLaVA-1.5 reads, MLP
           projector to 4096 (576 tokens an image)
  gemma3   SigLIP so400m/14 at 896 px, 27 layers, Gemma 3's pooling
           projector to 2560 (Gemma 3 4B; 12B and 27B share the tower;
           256 tokens an image)
  qwen25vl Qwen2.5-VL-7B's ViT (32 layers of 1280, SwiGLU 3420, windows of
           112 px but in every 8th layer), the 2 x 2 merger to 3584; the
           640x480 picture at its own resolution (644x476: 391 tokens)

then runs `KVFOLD bench --images 1 -p 0 -n 0` on each and prints the
encode time per image, the tower's FLOPs (matrix products and attention,
2 per multiply-add) and the rate they imply. About 1.7 GB of temporary files.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

try:
    import gguf
except ImportError:
    sys.exit("bench/vision_encode.py needs the gguf package (the test venv: .venv/bin/python)")

TOWERS = {
    # name: (arch of the decoder, decoder width, image, patch, width, ff, heads, layers, projector)
    "llava15": ("llama", 4096, 336, 14, 1024, 4096, 16, 23, "mlp"),
    "gemma3": ("gemma3", 2560, 896, 14, 1152, 4304, 16, 27, "gemma3"),
    "qwen25vl": ("qwen2vl", 3584, 0, 14, 1280, 3420, 16, 32, "qwen2.5vl"),
}
# kvfold bench's synthetic picture; Qwen2.5-VL keeps it near its own size,
# multiples of 28 (smart_resize): 476 x 644.
QWEN_H, QWEN_W = 476, 644


def qwen_flops(width, ff, layers, out, patch=14, window=112, every=8):
    """Qwen2.5-VL's tower on a QWEN_H x QWEN_W image: per layer the four
    attention products and the three of SwiGLU over N patches, attention
    over each window (64 patches; cut short at the edges) or, every 8th
    layer, the whole image; the patch embedding (both frames summed) and
    the merger (N / 4 rows of 4 x width)."""
    gh, gw = QWEN_H // patch, QWEN_W // patch
    n, ws = gh * gw, window // patch
    win = sum((min(ws, gh - y) * min(ws, gw - x)) ** 2 for y in range(0, gh, ws) for x in range(0, gw, ws))
    dense = 2 * (4 * n * width * width + 3 * n * width * ff)
    full, windowed = layers // every, layers - layers // every
    attn = 2 * 2 * width * (full * n * n + windowed * win)
    merger = 2 * (n // 4) * (16 * width * width + 4 * width * out)
    return layers * dense + attn + 2 * n * 3 * patch * patch * width + merger


def flops(image, patch, width, ff, layers, proj, out):
    if proj == "qwen2.5vl":
        return qwen_flops(width, ff, layers, out)
    n = (image // patch) ** 2
    seq = n + (1 if proj == "mlp" else 0)
    per_layer = 2 * (4 * seq * width * width + 2 * seq * width * ff + 2 * seq * seq * width)
    embed = 2 * n * 3 * patch * patch * width
    if proj == "mlp":
        head = 2 * n * (width * out + out * out)
    else:
        head = 2 * (n // 16) * width * out
    return layers * per_layer + embed + head


def write_decoder(path, arch, width):
    """One layer of the decoder family, a SentencePiece vocabulary of the
    byte pieces and the image delimiters Gemma 3 needs."""
    w = gguf.GGUFWriter(path, arch)
    heads, kv, hd, ff = {"gemma3": (8, 4, 256, 512), "qwen2vl": (28, 4, 128, 512)}.get(arch, (32, 32, 128, 512))
    w.add_context_length(4096)
    w.add_embedding_length(width)
    w.add_block_count(1)
    w.add_feed_forward_length(ff)
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(10000.0)
    if arch == "gemma3":
        w.add_key_length(hd)
        w.add_value_length(hd)
        w.add_sliding_window(1024)
    else:
        w.add_rope_dimension_count(hd)
    if arch == "qwen2vl":
        w.add_rope_dimension_sections([16, 24, 24, 0])
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + \
             ["<start_of_image>", "<end_of_image>", "<image_soft_token>", "<|vision_start|>", "<|vision_end|>"]
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * len(tokens))
    w.add_token_types([2, 3, 3] + [6] * 256 + [3] * 5)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    f32 = np.float32
    w.add_tensor("token_embd.weight", np.zeros((len(tokens), width), f32))
    w.add_tensor("output_norm.weight", np.ones(width, f32))
    if arch != "gemma3":
        w.add_tensor("output.weight", np.zeros((len(tokens), width), f32))
    p = "blk.0."
    w.add_tensor(p + "attn_norm.weight", np.ones(width, f32))
    w.add_tensor(p + "attn_q.weight", np.zeros((heads * hd, width), f32))
    w.add_tensor(p + "attn_k.weight", np.zeros((kv * hd, width), f32))
    w.add_tensor(p + "attn_v.weight", np.zeros((kv * hd, width), f32))
    w.add_tensor(p + "attn_output.weight", np.zeros((width, heads * hd), f32))
    if arch == "qwen2vl":
        for a, n in (("attn_q", heads), ("attn_k", kv), ("attn_v", kv)):
            w.add_tensor(p + a + ".bias", np.zeros(n * hd, f32))
    w.add_tensor(p + "ffn_norm.weight", np.ones(width, f32))
    w.add_tensor(p + "ffn_gate.weight", np.zeros((ff, width), f32))
    w.add_tensor(p + "ffn_up.weight", np.zeros((ff, width), f32))
    w.add_tensor(p + "ffn_down.weight", np.zeros((width, ff), f32))
    if arch == "gemma3":
        for n in ("post_attention_norm", "post_ffw_norm"):
            w.add_tensor(p + n + ".weight", np.ones(width, f32))
        for n in ("attn_q_norm", "attn_k_norm"):
            w.add_tensor(p + n + ".weight", np.ones(hd, f32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_mmproj(path, out, image, patch, width, ff, heads, layers, proj):
    """F16 matrices and F32 vectors of zeros (norm scales 1), as llama.cpp's
    converter lays them out (qwen2.5vl: the patch kernel split by frame,
    RMSNorms, SwiGLU, the merger as v.post_ln / mm.0 / mm.2)."""
    qwen, half = proj == "qwen2.5vl", proj == "gemma3"
    w = gguf.GGUFWriter(path, "clip")
    w.add_bool("clip.has_text_encoder", False)
    w.add_bool("clip.has_vision_encoder", True)
    w.add_string("clip.projector_type", proj)
    w.add_bool("clip.use_silu" if qwen else "clip.use_gelu", qwen or half)
    keys = (("image_size", image or 560), ("patch_size", patch), ("embedding_length", width),
            ("feed_forward_length", ff), ("attention.head_count", heads), ("block_count", layers))
    if qwen:
        keys += (("projection_dim", out), ("n_wa_pattern", 8), ("spatial_merge_size", 2))
    for k, v in keys:
        w.add_uint32("clip.vision." + k, v)
    w.add_float32("clip.vision.attention.layer_norm_epsilon", 1e-6)
    w.add_array("clip.vision.image_mean", [0.5] * 3 if half else [0.48145466, 0.4578275, 0.40821073])
    w.add_array("clip.vision.image_std", [0.5] * 3 if half else [0.26862954, 0.26130258, 0.27577711])
    f16, f32 = np.float16, np.float32
    w.add_tensor("v.patch_embd.weight", np.zeros((width, 3, patch, patch), f16))
    if qwen:
        w.add_tensor("v.patch_embd.weight.1", np.zeros((width, 3, patch, patch), f16))
    else:
        g = image // patch
        w.add_tensor("v.patch_embd.bias", np.zeros(width, f32))
        w.add_tensor("v.position_embd.weight", np.zeros((g * g + (0 if half else 1), width), f16))
    if not qwen and not half:
        w.add_tensor("v.class_embd", np.zeros(width, f32))
        w.add_tensor("v.pre_ln.weight", np.ones(width, f32))
        w.add_tensor("v.pre_ln.bias", np.zeros(width, f32))
    mlp = (("ffn_gate", ff, width), ("ffn_up", ff, width), ("ffn_down", width, ff)) if qwen else \
        (("ffn_up", ff, width), ("ffn_down", width, ff))
    for l in range(layers):
        p = f"v.blk.{l}."
        for a, rows, cols in (("attn_q", width, width), ("attn_k", width, width), ("attn_v", width, width),
                              ("attn_out", width, width)) + mlp:
            w.add_tensor(p + a + ".weight", np.zeros((rows, cols), f16))
            w.add_tensor(p + a + ".bias", np.zeros(rows, f32))
        for n in ("ln1", "ln2"):
            w.add_tensor(p + n + ".weight", np.ones(width, f32))
            if not qwen:
                w.add_tensor(p + n + ".bias", np.zeros(width, f32))
    if qwen or half:
        w.add_tensor("v.post_ln.weight", np.ones(width, f32))
    if half:
        w.add_tensor("v.post_ln.bias", np.zeros(width, f32))
        w.add_tensor("mm.soft_emb_norm.weight", np.ones(width, f32))
        w.add_tensor("mm.input_projection.weight", np.zeros((width, out), f16))
    else:
        hidden = 4 * width if qwen else out
        w.add_tensor("mm.0.weight", np.zeros((hidden, hidden if qwen else width), f16))
        w.add_tensor("mm.0.bias", np.zeros(hidden, f32))
        w.add_tensor("mm.2.weight", np.zeros((out, hidden), f16))
        w.add_tensor("mm.2.bias", np.zeros(out, f32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kvfold")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--keep", help="write the files here and keep them")
    ap.add_argument("--towers", default=",".join(TOWERS), help="which of " + ", ".join(TOWERS))
    args = ap.parse_args()
    tmp = args.keep or tempfile.mkdtemp(prefix="vision_encode_")
    os.makedirs(tmp, exist_ok=True)
    print("| tower | tokens / image | GFLOP / image | threads | encode s / image | GFLOP/s |")
    print("|---|---:|---:|---:|---:|---:|")
    try:
        for name in args.towers.split(","):
            arch, out, image, patch, width, ff, heads, layers, proj = TOWERS[name]
            dec, mm = os.path.join(tmp, f"{name}-dec.gguf"), os.path.join(tmp, f"{name}-mmproj.gguf")
            if not os.path.exists(mm):
                write_decoder(dec, arch, out)
                write_mmproj(mm, out, image, patch, width, ff, heads, layers, proj)
            gf = flops(image, patch, width, ff, layers, proj, out) / 1e9
            tokens = QWEN_H * QWEN_W // 28 ** 2 if proj == "qwen2.5vl" else \
                (image // patch) ** 2 // (16 if proj == "gemma3" else 1)
            for t in args.threads.split(","):
                cmd = [args.kvfold, "bench", "-m", dec, "--mmproj", mm, "--images", "1", "-p", "0", "-n", "0",
                       "-t", t, "-r", str(args.reps), "--no-warmup", "--no-progress"]
                res = subprocess.run(cmd, capture_output=True, text=True)
                m = re.search(r"encode ([0-9.]+) ms/image", res.stdout)
                if res.returncode != 0 or not m:
                    sys.exit(f"{' '.join(cmd)} failed:\n{res.stdout}{res.stderr}")
                sec = float(m.group(1)) / 1e3
                print(f"| {name} | {tokens} | {gf:.0f} | {t} | {sec:.2f} | {gf / sec:.0f} |", flush=True)
    finally:
        if not args.keep:
            for f in os.listdir(tmp):
                os.remove(os.path.join(tmp, f))
            os.rmdir(tmp)


if __name__ == "__main__":
    main()
