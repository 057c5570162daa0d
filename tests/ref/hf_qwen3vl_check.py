#!/usr/bin/env python3
"""Checks kvfold's Qwen3-VL path against Hugging Face transformers.

    hf_qwen3vl_check.py --dump DUMP_LOGITS --preproc DUMP_PREPROC --fixtures FIXTURE_DIR --passage TEXT OUT_DIR

Needs PyTorch, transformers, Pillow and gguf (the .venv-hf of
scripts/setup-hf.sh; exits 77 = skipped without them). Builds a tiny random
Qwen3VLForConditionalGeneration with transformers itself (seeded): a Qwen3
decoder of 4 layers of 64 (head_dim 32 apart from 64 / 4 heads, per-head
q/k RMSNorm) with interleaved M-RoPE of sections 6/5/5, and a ViT of 4
layers of 32 with 16-pixel patches, a biased patch kernel, an 8 x 8 grid of
learned positions and DeepStack mergers after layers 0 and 2, whose
features the decoder adds after its layers 0 and 1. Saved to OUT_DIR in
transformers' layout with the byte-level BPE tokenizer of the qwen2 fixture
plus <|vision_start|>, <|vision_end|>, <|image_pad|> and <|video_pad|>, and
as llama.cpp's converter writes it (qwen3vl-f32.gguf, arch qwen3vl with
n_deepstack_layers, + qwen3vl-mmproj-f32.gguf, projector qwen3vl_merger),
then checks:

1. Preprocessing: 12 seeded images of odd sizes through
   Qwen2VLImageProcessorPil (Qwen3-VL's, with its 16-pixel patches and 0.5
   normalisation) and `DUMP_PREPROC --qwen3vl`: the same resized size and
   pixel values equal to float32 rounding.
2. Prompt: kvfold's ids are the processor's layout (<|vision_start|> + one
   <|image_pad|> per token + <|vision_end|>).
3. Logits: text + two images of odd sizes (grids below and above the
   learned one's side), every position within 1e-4 of max|logit| and the
   same argmax. Mutations the reference must tell apart, each breaking
   one part: blocked M-RoPE sections instead of interleaved ones, and no
   DeepStack (the features zeroed in transformers). The GGUF + mmproj pair
   gives the directory's ids and logits (within 1e-5).
4. The policy checks of the other vision fixtures, on this model: forks
   equal prefills of their own, batched decoding equals decoding alone, a
   prompt in parts equals it whole, session files, and kv_bound.
"""
import json
import os
import shutil
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_gemma3_check import noise_pngs, rel_err, run_kvfold  # noqa: E402
from hf_qwen25vl_check import (N_BASE, SPECIALS, check_preproc, expand_images, finish, fresh_out,  # noqa: E402
                               policy_checks, prompt_ids, reference_args, write_decoder)

SKIP = 77
PATCH = 16
UNIT = 32 * 32  # pixels of one token (2 x 2 patches)
MIN_PIXELS, MAX_PIXELS = UNIT, UNIT * 12
# The video processor's bounds, on all of a video's frames together (not
# its defaults, 128 and 768 tokens, which the mmproj gets).
VIDEO_MIN_PIXELS, VIDEO_MAX_PIXELS = UNIT * 4, UNIT * 100
PROMPT = "Look: <image> and <image> What is the difference between them?"
VIDEO_PROMPT = "Look: <image> and <image> then <video> What changed?"
DEEPSTACK = [0, 2]


def build(out, fixtures):
    import torch
    import transformers
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
    text = dict(vocab_size=N_BASE + len(SPECIALS), hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=4096,
                rms_norm_eps=1e-6, bos_token_id=0, eos_token_id=1,
                rope_parameters={"rope_type": "default", "rope_theta": 500000.0, "mrope_section": [6, 5, 5],
                                 "mrope_interleaved": True})
    vision = dict(depth=4, hidden_size=32, intermediate_size=48, num_heads=2, patch_size=PATCH, spatial_merge_size=2,
                  temporal_patch_size=2, out_hidden_size=64, num_position_embeddings=64,
                  deepstack_visual_indexes=DEEPSTACK, hidden_act="gelu_pytorch_tanh")
    cfg = transformers.Qwen3VLConfig(text_config=text, vision_config=vision, vision_start_token_id=N_BASE,
                                     vision_end_token_id=N_BASE + 1, image_token_id=N_BASE + 2,
                                     video_token_id=N_BASE + 3, tie_word_embeddings=False)
    torch.manual_seed(0)
    model = transformers.Qwen3VLForConditionalGeneration(cfg).float().eval()
    # Weights large enough that every part moves the logits: matrices
    # ~ N(0, 1/fan_in), norm scales 1 + N(0, 0.1), biases N(0, 0.5), the
    # learned positions N(0, 1).
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                fan_in = p[0].numel()
                p.normal_(0.0, (1.0 if "embed_tokens" in name or "pos_embed" in name else 1.0 / fan_in) ** 0.5)
            elif "norm" in name and name.endswith("weight"):
                p.normal_(1.0, 0.1)
            else:
                p.normal_(0.0, 0.5)
    model.save_pretrained(out, safe_serialization=True)
    Qwen2VLImageProcessorPil(min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS, patch_size=PATCH, merge_size=2,
                             temporal_patch_size=2, image_mean=[0.5] * 3, image_std=[0.5] * 3).save_pretrained(out)
    video_processor().save_pretrained(out)
    tok = json.load(open(os.path.join(fixtures, "qwen2-st", "tokenizer.json")))
    for i, s in enumerate(SPECIALS):
        tok["added_tokens"].append({"id": N_BASE + i, "content": s, "single_word": False, "lstrip": False,
                                    "rstrip": False, "normalized": False, "special": True})
        tok["model"]["vocab"][s] = N_BASE + i
    json.dump(tok, open(os.path.join(out, "tokenizer.json"), "w"))
    shutil.copy(os.path.join(fixtures, "qwen2-st", "tokenizer_config.json"), out)
    return model, cfg


def write_gguf_pair(model, cfg, out, fixtures):
    """The same weights as llama.cpp's converter writes them: the decoder as
    arch qwen3vl (rope.dimension_sections, n_deepstack_layers), the tower as
    a qwen3vl_merger mmproj (the 3-D patch kernel split by frame, qkv fused,
    the learned positions as v.position_embd, the merger as v.post_ln / mm.0
    / mm.2, the DeepStack mergers as v.deepstack.<layer>.*). Returns
    (decoder path, mmproj path)."""
    import gguf
    sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    tc, vc = cfg.text_config, cfg.vision_config
    dec = os.path.join(out, "qwen3vl-f32.gguf")
    w = write_decoder(dec, "qwen3vl", sd, tc, tc.rope_parameters["rope_theta"],
                      os.path.join(fixtures, "qwen2-f32.gguf"), SPECIALS, "model.language_model.", True)
    w.add_rope_dimension_sections(list(tc.rope_parameters["mrope_section"]) + [0])
    w.add_key_length(tc.head_dim)
    w.add_value_length(tc.head_dim)
    w.add_uint32("qwen3vl.n_deepstack_layers", len(vc.deepstack_visual_indexes))
    finish(w)

    mm = os.path.join(out, "qwen3vl-mmproj-f32.gguf")
    w = gguf.GGUFWriter(mm, "clip")
    w.add_bool("clip.has_vision_encoder", True)
    w.add_string("clip.projector_type", "qwen3vl_merger")
    w.add_bool("clip.use_gelu", True)
    side = int(round(vc.num_position_embeddings ** 0.5))
    for k, val in (("image_size", side * vc.patch_size), ("patch_size", vc.patch_size),
                   ("embedding_length", vc.hidden_size), ("feed_forward_length", vc.intermediate_size),
                   ("attention.head_count", vc.num_heads), ("block_count", vc.depth),
                   ("projection_dim", tc.hidden_size), ("spatial_merge_size", vc.spatial_merge_size)):
        w.add_uint32("clip.vision." + k, val)
    w.add_float32("clip.vision.attention.layer_norm_epsilon", 1e-6)
    w.add_array("clip.vision.image_mean", [0.5, 0.5, 0.5])
    w.add_array("clip.vision.image_std", [0.5, 0.5, 0.5])
    w.add_array("clip.vision.is_deepstack_layers", [l in vc.deepstack_visual_indexes for l in range(vc.depth)])
    vis = "model.visual."
    fixed = {"patch_embed.proj.bias": "v.patch_embd.bias", "pos_embed.weight": "v.position_embd.weight",
             "merger.norm.weight": "v.post_ln.weight", "merger.norm.bias": "v.post_ln.bias",
             "merger.linear_fc1.weight": "mm.0.weight", "merger.linear_fc1.bias": "mm.0.bias",
             "merger.linear_fc2.weight": "mm.2.weight", "merger.linear_fc2.bias": "mm.2.bias"}
    for k, v in sd.items():
        if not k.startswith(vis):
            continue
        n = k[len(vis):]
        if n == "patch_embed.proj.weight":
            w.add_tensor("v.patch_embd.weight", np.ascontiguousarray(v[:, :, 0]))
            w.add_tensor("v.patch_embd.weight.1", np.ascontiguousarray(v[:, :, 1]))
        elif n in fixed:
            w.add_tensor(fixed[n], v)
        elif n.startswith("deepstack_merger_list."):
            _, i, rest = n.split(".", 2)
            rest = rest.replace("linear_fc1", "fc1").replace("linear_fc2", "fc2")
            w.add_tensor(f"v.deepstack.{vc.deepstack_visual_indexes[int(i)]}.{rest}", v)
        else:
            _, layer, rest = n.split(".", 2)
            rest = (rest.replace("norm1", "ln1").replace("norm2", "ln2").replace("attn.proj", "attn_out")
                    .replace("attn.qkv", "attn_qkv").replace("mlp.linear_fc1", "ffn_up")
                    .replace("mlp.linear_fc2", "ffn_down"))
            w.add_tensor(f"v.blk.{layer}.{rest}", v)
    finish(w)
    return dec, mm


def video_processor(cap=False):
    """The directory's video processor; cap: qwen-vl-utils' cap on each
    frame's share (at most 6 tokens a frame here)."""
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor
    return Qwen3VLVideoProcessor(size={"shortest_edge": VIDEO_MIN_PIXELS, "longest_edge": VIDEO_MAX_PIXELS},
                                 do_sample_frames=False, cap_pixels_per_frame=cap, max_video_tokens=6)


def video_run(args, model, cfg, tok, tmp, frames, fps, cap=False):
    """kvfold's and transformers' logits for VIDEO_PROMPT with these frames
    at fps, the prompt laid out as Qwen3VLProcessor (transformers 5.2,
    qwen-vl-utils) writes it: per temporal patch "<t seconds>" (the mean
    of its frames' times, the last frame repeated past the end) and the
    patch between <|vision_start|> and <|vision_end|>. (max rel err,
    argmax agreement, ids equal, what ran)"""
    import torch
    from PIL import Image
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
    iproc = Qwen2VLImageProcessorPil.from_pretrained(args.out)
    images = noise_pngs(tmp, ((170, 60), (61, 44)), 11, "vprompt")
    paths = []
    for i, f in enumerate(frames):
        paths.append(os.path.join(tmp, f"vframe{i}.png"))
        Image.fromarray(f).save(paths[-1])
    extra = ["--fps", str(fps)] + sum((["--image", p] for p in images), []) + sum((["--frame", p] for p in paths), [])
    directory = args.out
    if cap:  # the same model with the capped video processor
        directory = os.path.join(tmp, "capped")
        shutil.rmtree(directory, ignore_errors=True)
        shutil.copytree(args.out, directory, ignore=shutil.ignore_patterns("work", "*.gguf"))
        video_processor(cap=True).save_pretrained(directory)
    ours, ids = run_kvfold(args, directory, extra, [], tmp, "video", VIDEO_PROMPT)
    vid = video_processor(cap)(videos=[frames], return_tensors="pt")
    pix = iproc(images=[Image.open(p).convert("RGB") for p in images], return_tensors="pt")
    text = expand_images(VIDEO_PROMPT, pix["image_grid_thw"].tolist())
    t, h, w = vid["video_grid_thw"][0].tolist()
    idx = list(range(len(frames))) + [len(frames) - 1] * (len(frames) % 2)
    stamps = [(idx[2 * k] / fps + idx[2 * k + 1] / fps) / 2 for k in range(t)]
    text = text.replace("<video>", "".join(f"<{s:.1f} seconds><|vision_start|>" + "<|video_pad|>" * (h * w // 4) +
                                           "<|vision_end|>" for s in stamps), 1)
    want = prompt_ids(args, tok, text)
    pads = (cfg.image_token_id, cfg.video_token_id)
    same = [x if x not in pads else -1 for x in want] == ids
    input_ids = torch.tensor([want])
    with torch.no_grad():
        hf = model(input_ids=input_ids, pixel_values=pix["pixel_values"], image_grid_thw=pix["image_grid_thw"],
                   pixel_values_videos=vid["pixel_values_videos"], video_grid_thw=vid["video_grid_thw"],
                   mm_token_type_ids=(input_ids == cfg.image_token_id).int() +
                   2 * (input_ids == cfg.video_token_id).int()).logits[0].float().numpy()[:, :ours.shape[1]]
    agree = float(np.mean(ours.argmax(-1) == hf.argmax(-1)))
    return rel_err(ours, hf), agree, same, f"{len(ids)} positions, video grid {[t, h, w]}, stamps {stamps}"


def hf_logits(model, cfg, ids, pix):
    import torch
    input_ids = torch.tensor([ids])
    with torch.no_grad():
        return model(input_ids=input_ids, pixel_values=pix["pixel_values"], image_grid_thw=pix["image_grid_thw"],
                     mm_token_type_ids=(input_ids == cfg.image_token_id).int()).logits[0].float().numpy()


def mutations(model, cfg, ids, pix, ours):
    """kvfold's logits against transformers with one part broken: blocked
    M-RoPE sections, and DeepStack's features zeroed. Each must miss."""
    import torch
    from transformers.models.qwen3_vl import modeling_qwen3_vl as mq
    out = {}
    rotary = model.model.language_model.rotary_emb

    def blocked(freq):  # sections in blocks, as Qwen2-VL lays them out
        parts = freq.split(list(rotary.mrope_section), dim=-1)
        f = torch.cat([parts[i][i] for i in range(3)], dim=-1)
        return torch.cat((f, f), dim=-1)
    rotary.recomposition_frequencies = blocked
    try:
        out["blocked M-RoPE"] = rel_err(ours, hf_logits(model, cfg, ids, pix))
    finally:
        del rotary.recomposition_frequencies
    original = mq.Qwen3VLTextModel._deepstack_process

    def zero(self, hidden_states, visual_pos_masks, visual_embeds):
        return original(self, hidden_states, visual_pos_masks, visual_embeds * 0)
    mq.Qwen3VLTextModel._deepstack_process = zero
    try:
        out["no DeepStack"] = rel_err(ours, hf_logits(model, cfg, ids, pix))
    finally:
        mq.Qwen3VLTextModel._deepstack_process = original
    return out


def main():
    args = reference_args(("qwen3vl",), "qwen2-st")
    if not args:
        return SKIP
    try:
        import gguf  # noqa: F401
        import torch
        import transformers
        from PIL import Image
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
        if not hasattr(transformers, "Qwen3VLForConditionalGeneration"):
            raise ImportError(f"transformers {transformers.__version__} has no Qwen3-VL")
    except ImportError as e:
        print(f"SKIP: {e} (scripts/setup-hf.sh installs torch and transformers into .venv-hf)")
        return SKIP
    tmp = fresh_out(args.out)
    model, cfg = build(args.out, args.fixtures)
    proc = Qwen2VLImageProcessorPil.from_pretrained(args.out)
    if not check_preproc(args, tmp, proc, "--qwen3vl", (MIN_PIXELS, MAX_PIXELS), PATCH):
        return 1
    # Within 12 tokens, 192 x 32 px: a 2 x 12 patch grid (the learned one is
    # 8 x 8: squeezed along one side, stretched along the other); 64 x 64: 4 x 4.
    paths = noise_pngs(tmp, ((330, 100), (61, 57)), 9)
    try:
        ours, ids = run_kvfold(args, args.out, [], paths, tmp, "st", PROMPT)
        dec, mm = write_gguf_pair(model, cfg, args.out, args.fixtures)
        bounds = ["--image-min-tokens", str(MIN_PIXELS // UNIT), "--image-max-tokens", str(MAX_PIXELS // UNIT)]
        gg, gids = run_kvfold(args, dec, ["--mmproj", mm] + bounds, paths, tmp, "gguf", PROMPT)
    except RuntimeError as e:
        print(f"FAIL: {e}")
        return 1
    n_tok, n_vocab = ours.shape
    gerr = rel_err(gg, ours)
    print(f"gguf + mmproj: ids {'equal' if gids == ids else 'DIFFER'}, max rel err {gerr:.3e} against the directory")

    pix = proc(images=[Image.open(p).convert("RGB") for p in paths], return_tensors="pt")
    grids = pix["image_grid_thw"].tolist()
    tok = transformers.PreTrainedTokenizerFast(tokenizer_file=os.path.join(args.out, "tokenizer.json"))
    want = prompt_ids(args, tok, expand_images(PROMPT, grids))
    got = [cfg.image_token_id if t < 0 else t for t in ids]
    ok = want == got
    print(f"prompt ids {'equal' if ok else 'DIFFER from'} the processor's layout ({len(want)} vs {len(got)}); "
          f"image grids {grids}")
    hf = hf_logits(model, cfg, got, pix)[:, :n_vocab]
    err = rel_err(ours, hf)
    agree = float(np.mean(ours.argmax(-1) == hf.argmax(-1)))
    print(f"transformers {transformers.__version__}, torch {torch.__version__}: {n_tok} positions "
          f"({sum(t < 0 for t in ids)} image), max rel err {err:.3e}, argmax agreement {agree:.3f}")
    ok &= err < 1e-4 and agree == 1.0 and gids == ids and gerr < 1e-5
    for what, e in mutations(model, cfg, got, pix, ours).items():
        print(f"mutation, {what}: max rel err {e:.3e} (must exceed 1e-2)")
        ok &= e > 1e-2
    # A video of 5 frames of 250 x 190 at 4 frames a second: 3 temporal
    # patches (the last frame repeated), sized by the bounds on all frames.
    frng = np.random.default_rng(12)
    frames = [frng.integers(0, 256, (190, 250, 3), dtype=np.uint8) for _ in range(5)]
    for cap in (False, True):
        try:
            verr, vagree, vsame, what = video_run(args, model, cfg, tok, tmp, frames, 4.0, cap)
        except RuntimeError as e:
            print(f"FAIL: {e}")
            return 1
        print(f"video{', frames capped' if cap else ''} ({what}): ids {'equal' if vsame else 'DIFFER'}, max rel err "
              f"{verr:.3e}, argmax agreement {vagree:.3f}")
        ok &= vsame and verr < 1e-4 and vagree == 1.0
    ok &= policy_checks(args)
    print("ok" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
