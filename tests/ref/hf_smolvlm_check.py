#!/usr/bin/env python3
"""Checks kvfold's SmolVLM / Idefics3 path against Hugging Face transformers.

    hf_smolvlm_check.py [--family idefics3] --dump DUMP_LOGITS --preproc DUMP_PREPROC --fixtures FIXTURE_DIR
                        --passage TEXT OUT_DIR

Needs PyTorch, transformers, Pillow and gguf (the .venv-hf of
scripts/setup-hf.sh; exits 77 = skipped without them). Builds a tiny random
model with transformers itself (seeded; a Llama decoder of 2 layers of 64,
a SigLIP tower of 2 layers of 32, the pixel shuffle and the connector's
linear map), saves it to OUT_DIR in transformers' layout with the
byte-level BPE tokenizer of the llama fixture plus <fake_token_around_image>,
<image>, <end_of_utterance>, <global-img> and <row_R_col_C> (R, C in 1..6),
and as llama.cpp's converter writes it (FAMILY-f32.gguf, arch llama with its
q/k rows permuted, + FAMILY-mmproj-f32.gguf, projector idefics3):

- smolvlm (SmolVLMForConditionalGeneration, transformers' default
  processing): tiles of 100 px (25 patches of 4 a side, where transformers'
  NaViT position rows repeat one and skip the next), the pixel shuffle by 5
  (25 tokens a sub-image), images resized to 300 px on their longer side and
  split into up to 3 x 3 tiles plus the global image;
- idefics3 (Idefics3ForConditionalGeneration, do_image_splitting false, as
  llama.cpp reads these models): 64 px (8 patches of 8 a side), the pixel
  shuffle by 2 (16 tokens), the global image alone after the two chained
  resizes (longer side to 256, then 64 x 64).

Checks:

1. Preprocessing: 12 seeded images of odd sizes and aspect ratios through
   the family's image processor (Pillow's Lanczos) and `DUMP_PREPROC
   --idefics3`: the same tiles, and every sub-image's pixels equal (max
   |diff| 0 expected: the same 8-bit resizes, then the same float steps).
2. Prompt: kvfold's ids are Idefics3Processor's for text + two images
   (<fake_token_around_image>, <row_R_col_C> and "\\n" between the tiles,
   <global-img>; image_seq_len image tokens each).
3. Logits: every position within 1e-4 of max|logit| of transformers' and
   the same argmax. The GGUF + mmproj pair gives the directory's ids and
   logits (within 1e-5); the idefics3 family's with --image-max-tokens 16
   (an mmproj says nothing of do_image_splitting). smolvlm: the pair with
   --image-max-tokens 25 (the global image alone, llama.cpp's reading)
   matches transformers with do_image_splitting false. mmproj files with a
   pixel-shuffle factor that does not divide the grid or does not fit the
   connector, a longest edge of 0, or another projector type are refused.
4. The policy checks of the other vision fixtures on the directory (tools
   beside DUMP_LOGITS): forks equal prefills of their own, batched decoding
   equals decoding alone, a prompt in parts equals it whole, a saved
   session goes on as the original, kv_bound (every preset at budget 1.0
   bit for bit; every policy's bound).
"""
import json
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_gemma3_check import noise_pngs, rel_err, run_kvfold  # noqa: E402
from hf_qwen25vl_check import finish, fresh_out, images, policy_checks, reference_args, write_decoder  # noqa: E402

SKIP = 77
N_BASE = 300          # the fixture tokenizer's vocabulary
SPECIALS = ["<fake_token_around_image>", "<image>", "<end_of_utterance>", "<global-img>"] + \
    [f"<row_{r}_col_{c}>" for r in range(1, 7) for c in range(1, 7)]
IMAGE_ID = N_BASE + 1
PROMPT = "User: Look: <image> and <image> What is the difference between them?\nAssistant:"
FAMILIES = {
    # vision config, scale factor, the processor's longest edge and tile, splitting
    "smolvlm": (dict(image_size=100, patch_size=4), 5, 300, 100, True),
    "idefics3": (dict(image_size=64, patch_size=8), 2, 256, 64, False),
}


def processor_class(family):
    from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil
    from transformers.models.smolvlm.image_processing_pil_smolvlm import SmolVLMImageProcessorPil
    return SmolVLMImageProcessorPil if family == "smolvlm" else Idefics3ImageProcessorPil


def build(out, fixtures, family):
    import torch
    import transformers
    vision, scale, longest, tile, split = FAMILIES[family]
    text = dict(vocab_size=N_BASE + len(SPECIALS), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096, rms_norm_eps=1e-5,
                rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, bos_token_id=0, eos_token_id=1,
                tie_word_embeddings=False)
    Config, Model = ((transformers.SmolVLMConfig, transformers.SmolVLMForConditionalGeneration) if family == "smolvlm"
                     else (transformers.Idefics3Config, transformers.Idefics3ForConditionalGeneration))
    cfg = Config(text_config=text, vision_config=dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                                      num_attention_heads=2, layer_norm_eps=1e-6, **vision),
                 scale_factor=scale, image_token_id=IMAGE_ID, tie_word_embeddings=False)
    torch.manual_seed(0)
    model = Model(cfg).float().eval()
    # Weights large enough that every part moves the logits: matrices
    # ~ N(0, 1/fan_in), norm scales 1 + N(0, 0.1), biases N(0, 0.5).
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                fan_in = p[0].numel()
                p.normal_(0.0, (1.0 if "embed_tokens" in name else 1.0 / fan_in) ** 0.5)
            elif "norm" in name and name.endswith("weight"):
                p.normal_(1.0, 0.1)
            else:
                p.normal_(0.0, 0.5)
    model.save_pretrained(out, safe_serialization=True)
    processor_class(family)(size={"longest_edge": longest}, max_image_size={"longest_edge": tile},
                            do_image_splitting=split).save_pretrained(out)
    tok = json.load(open(os.path.join(fixtures, "llama-st", "tokenizer.json")))
    for i, s in enumerate(SPECIALS):
        tok["added_tokens"].append({"id": N_BASE + i, "content": s, "single_word": False, "lstrip": False,
                                    "rstrip": False, "normalized": False, "special": True})
        tok["model"]["vocab"][s] = N_BASE + i
    json.dump(tok, open(os.path.join(out, "tokenizer.json"), "w"))
    # As SmolVLM2's tokenizer: no BOS of its own.
    tc = json.load(open(os.path.join(fixtures, "llama-st", "tokenizer_config.json")))
    tc["add_bos_token"] = False
    json.dump(tc, open(os.path.join(out, "tokenizer_config.json"), "w"))
    return model, cfg


def permute(w, n_head):
    """llama.cpp's converter's row order of Llama's q / k for interleaved RoPE."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_gguf_pair(model, cfg, out, fixtures, family):
    """The same weights as llama.cpp's converter writes them: the decoder as
    arch llama (q / k permuted), the tower and connector as an idefics3
    mmproj (SigLIP's v.*, the connector's mm.model.fc, the processor's
    longest edge as clip.vision.preproc_image_size); the tokenizer of the
    llama fixture's GGUF plus the specials. Returns (decoder, mmproj)."""
    import gguf
    sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    tc, vc = cfg.text_config, cfg.vision_config
    dec = os.path.join(out, f"{family}-f32.gguf")
    heads = {"self_attn.q_proj.weight": tc.num_attention_heads, "self_attn.k_proj.weight": tc.num_key_value_heads}
    w = write_decoder(dec, "llama", sd, tc, tc.rope_parameters["rope_theta"],
                      os.path.join(fixtures, "llama-f32.gguf"), SPECIALS, "model.text_model.", False,
                      lambda rest, v: permute(v, heads[rest]) if rest in heads else v)
    finish(w)

    mm = os.path.join(out, f"{family}-mmproj-f32.gguf")
    w = gguf.GGUFWriter(mm, "clip")
    w.add_bool("clip.has_vision_encoder", True)
    w.add_string("clip.projector_type", "idefics3")
    w.add_bool("clip.use_gelu", True)
    for k, val in (("image_size", vc.image_size), ("patch_size", vc.patch_size), ("embedding_length", vc.hidden_size),
                   ("feed_forward_length", vc.intermediate_size), ("attention.head_count", vc.num_attention_heads),
                   ("block_count", vc.num_hidden_layers), ("projection_dim", tc.hidden_size),
                   ("projector.scale_factor", cfg.scale_factor), ("preproc_image_size", FAMILIES[family][2])):
        w.add_uint32("clip.vision." + k, val)
    w.add_float32("clip.vision.attention.layer_norm_epsilon", vc.layer_norm_eps)
    w.add_array("clip.vision.image_mean", [0.5, 0.5, 0.5])
    w.add_array("clip.vision.image_std", [0.5, 0.5, 0.5])
    vis = "model.vision_model."
    fixed = {"embeddings.patch_embedding.weight": "v.patch_embd.weight",
             "embeddings.patch_embedding.bias": "v.patch_embd.bias",
             "embeddings.position_embedding.weight": "v.position_embd.weight",
             "post_layernorm.weight": "v.post_ln.weight", "post_layernorm.bias": "v.post_ln.bias"}
    for k, v in sd.items():
        if k == "model.connector.modality_projection.proj.weight":
            w.add_tensor("mm.model.fc.weight", v)
        if not k.startswith(vis):
            continue
        n = k[len(vis):]
        if n in fixed:
            w.add_tensor(fixed[n], v)
            continue
        _, _, l, rest = n.split(".", 3)
        rest = (rest.replace("layer_norm1", "ln1").replace("layer_norm2", "ln2").replace("self_attn.q_proj", "attn_q")
                .replace("self_attn.k_proj", "attn_k").replace("self_attn.v_proj", "attn_v")
                .replace("self_attn.out_proj", "attn_out").replace("mlp.fc1", "ffn_up").replace("mlp.fc2", "ffn_down"))
        w.add_tensor(f"v.blk.{l}.{rest}", v)
    finish(w)
    return dec, mm


def check_preproc(args, tmp, proc):
    _, _, longest, tile, split = FAMILIES[args.family]
    worst, tiles = 0.0, []
    # Odd sizes around the tile: tiled 1 x 3 to 3 x 3, or (idefics3) the global image alone.
    shapes = ((90, 50), (33, 61), (140, 29), (100, 100), (57, 57), (200, 80), (15, 70), (64, 100), (29, 200),
              (43, 31), (301, 299), (9, 40))
    for name, img in images(np.random.default_rng(5), shapes):
        path = os.path.join(tmp, name)
        img.save(path)
        out = os.path.join(tmp, name + ".bin")
        res = subprocess.run([args.preproc, "--idefics3", str(longest), str(tile), "1" if split else "0", path, out],
                             capture_output=True, text=True)
        if res.returncode != 0:
            print(f"FAIL: dump_preproc {name}: {res.stderr}")
            return False
        rows, cols = (int(x) for x in res.stdout.split())
        ref = proc(images=[[img]], return_tensors="np", return_row_col_info=True)
        want = (int(ref["rows"][0][0]), int(ref["cols"][0][0]))
        pix = np.asarray(ref["pixel_values"][0], dtype=np.float32)
        ours = np.fromfile(out, dtype=np.float32).reshape(-1, 3, tile, tile)
        if (rows, cols) != want or ours.shape != pix.shape:
            print(f"FAIL: {name} {img.size}: {rows}x{cols} tiles ({ours.shape}), the processor {want} ({pix.shape})")
            return False
        diff = float(np.max(np.abs(ours - pix)))
        worst = max(worst, diff)
        tiles.append(f"{rows}x{cols}")
        if diff > 1e-6:
            print(f"FAIL: {name} {img.size}: max |diff| {diff:.3e} against {type(proc).__name__}")
            return False
    print(f"preprocessing: 12 images (tiles {' '.join(tiles)}), sub-images and pixels equal (max |diff| {worst:.3e}) "
          f"to {type(proc).__name__}")
    return True


def check_refusals(kvfold, dec, mm, tmp):
    """mmproj files a converter could get wrong are refused with a message, not run."""
    from gguf_edit import gguf_copy
    ok = True
    for kv, want in (({"clip.vision.projector.scale_factor": 3}, "pixel-shuffle factor 3 does not divide"),
                     ({"clip.vision.projector.scale_factor": 1}, "does not map the vision width"),
                     ({"clip.vision.preproc_image_size": 0}, "longest edge 0"),
                     ({"clip.projector_type": "idefics4"}, "projector type 'idefics4' is not supported")):
        bad = os.path.join(tmp, "bad-mmproj.gguf")
        gguf_copy(mm, bad, set_kv=kv)
        res = subprocess.run([kvfold, "info", "-m", dec, "--mmproj", bad], capture_output=True, text=True)
        if res.returncode == 0 or want not in res.stderr:
            print(f"FAIL: an mmproj with {kv}: exit {res.returncode}, want '{want}' in: {res.stderr.strip()}")
            ok = False
    print(f"bad mmproj files (shuffle factor, projection, longest edge, projector type): "
          f"{'refused' if ok else 'NOT ALL REFUSED'}")
    return ok


def hf_logits(model, ids, pixels):
    import torch
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids]), pixel_values=pixels["pixel_values"],
                     pixel_attention_mask=pixels["pixel_attention_mask"]).logits[0].float().numpy()


def compare(name, ours, ref):
    ref = ref[:, :ours.shape[1]]
    err = rel_err(ours, ref)
    agree = float(np.mean(ours.argmax(-1) == ref.argmax(-1)))
    print(f"{name}: max rel err {err:.3e}, argmax agreement {agree:.3f}")
    return err, agree


def main():
    args = reference_args(tuple(FAMILIES), "llama-st")
    if not args:
        return SKIP
    try:
        import gguf  # noqa: F401
        import torch
        import transformers
        from PIL import Image
        from transformers import Idefics3Processor
    except ImportError as e:
        print(f"SKIP: {e} (scripts/setup-hf.sh installs torch and transformers into .venv-hf)")
        return SKIP
    tmp = fresh_out(args.out)
    model, cfg = build(args.out, args.fixtures, args.family)
    proc = processor_class(args.family).from_pretrained(args.out)
    if not check_preproc(args, tmp, proc):
        return 1
    vc = cfg.vision_config
    seq = (vc.image_size // vc.patch_size) ** 2 // cfg.scale_factor ** 2
    # Wide (3 x 2 tiles from the smolvlm processor) and small and tall (2 x 1).
    paths = noise_pngs(tmp, ((170, 100), (41, 67)), 9)
    pics = [Image.open(p).convert("RGB") for p in paths]
    try:
        ours, ids = run_kvfold(args, args.out, [], paths, tmp, "st", PROMPT)
        dec, mm = write_gguf_pair(model, cfg, args.out, args.fixtures, args.family)
        alone = ["--image-max-tokens", str(seq)]
        gg, gids = run_kvfold(args, dec, ["--mmproj", mm] + ([] if args.family == "smolvlm" else alone), paths, tmp,
                              "gguf", PROMPT)
    except RuntimeError as e:
        print(f"FAIL: {e}")
        return 1

    tok = transformers.AutoTokenizer.from_pretrained(args.out)
    hf_proc = Idefics3Processor(image_processor=proc, tokenizer=tok, image_seq_len=seq)
    enc = hf_proc(text=PROMPT, images=pics, return_tensors="pt")
    want = enc["input_ids"][0].tolist()
    got = [IMAGE_ID if t < 0 else t for t in ids]
    ok = want == got
    print(f"prompt ids {'equal' if ok else 'DIFFER from'} Idefics3Processor's ({len(want)} vs {len(got)}; "
          f"{sum(t < 0 for t in ids)} image positions, {seq} a sub-image)")
    hf = hf_logits(model, want, enc)
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, {args.family}:")
    err, agree = compare("  directory", ours, hf)
    gerr = rel_err(gg, ours)
    print(f"  gguf + mmproj{' ' + ' '.join(alone) if args.family != 'smolvlm' else ''}: ids "
          f"{'equal' if gids == ids else 'DIFFER'}, max rel err {gerr:.3e} against the directory")
    ok &= err < 1e-4 and agree == 1.0 and gids == ids and gerr < 1e-5
    if args.family == "smolvlm":
        # llama.cpp's reading from the same files: each image its global image alone.
        try:
            ga, aids = run_kvfold(args, dec, ["--mmproj", mm] + alone, paths, tmp, "alone", PROMPT)
        except RuntimeError as e:
            print(f"FAIL: {e}")
            return 1
        enc = hf_proc(text=PROMPT, images=pics, return_tensors="pt", images_kwargs={"do_image_splitting": False})
        awant = enc["input_ids"][0].tolist()
        same = awant == [IMAGE_ID if t < 0 else t for t in aids]
        print(f"  gguf + mmproj {' '.join(alone)}: ids {'equal' if same else 'DIFFER from'} the processor's without "
              f"splitting ({len(aids)} positions)")
        aerr, aagree = compare("  ... against transformers without splitting", ga, hf_logits(model, awant, enc))
        ok &= same and aerr < 1e-4 and aagree == 1.0
    # kvfold info names the tiling.
    kvfold = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(args.dump))), "kvfold")
    info = subprocess.run([kvfold, "info", "-m", args.out], capture_output=True, text=True)
    want_info = (f"tiles of {vc.image_size} and the whole image" if FAMILIES[args.family][4]
                 else f"-> {seq} tokens")
    line = [x for x in info.stdout.splitlines() if x.startswith("vision")]
    print(f"kvfold info: {line[0] if line else info.stderr.strip()}")
    ok &= info.returncode == 0 and bool(line) and want_info in line[0]
    ok &= check_refusals(kvfold, dec, mm, tmp)

    ok &= policy_checks(args)
    print("ok" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
