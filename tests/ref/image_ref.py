#!/usr/bin/env python3
"""Checks kvfold's LLaVA-1.5 image preprocessing against Pillow.

    image_ref.py DUMP_PREPROC [TMPDIR]

The reference is LLaVA-1.5's own path, written from its source: the image
converted to RGB, expand2square (a square of the longer side filled with
tuple(int(x * 255) for x in image_mean), the image pasted at
((side - w) // 2, (side - h) // 2)), then CLIPImageProcessor, which on a
square image is img.resize((S, S), Image.BICUBIC) (shortest-edge resize and
centre crop are the identity), x / 255 and (x - mean) / std with CLIP's
mean and std.

Seeded test images (noise and smooth gradients; RGB, grey and RGBA; wide,
tall, square; downscaled, upscaled and not resampled) are saved as PNG,
`DUMP_PREPROC IMAGE S OUT.bin` writes kvfold's float32 [3][S][S], and the two
are compared in the 0..255 domain (kvfold's output mapped back through the
normalisation): the maximum absolute difference must be <= 1 level (Pillow's
fixed-point arithmetic is reproduced, so 0 is expected), and in the
normalised domain within float32 rounding. A self-check shows that each of
bilinear filtering, padding offsets rounded up, a black background, the
vertical pass first and a float intermediate would exceed the tolerance.
Exit status 0 on success, 1 on a failed check, 77 when Pillow is absent.
"""
import os
import subprocess
import sys
import tempfile

import numpy as np

SKIP = 77
MEAN = np.array([0.48145466, 0.4578275, 0.40821073])
STD = np.array([0.26862954, 0.26130258, 0.27577711])
TOL_LEVELS = 1.0


def expand2square(img, background):
    w, h = img.size
    if w == h:
        return img
    side = max(w, h)
    from PIL import Image
    out = Image.new(img.mode, (side, side), background)
    out.paste(img, ((side - w) // 2, (side - h) // 2))
    return out


def reference(path, size, variant=None):
    """(pixels in 0..255 [S][S][3] uint8, normalised float32 [3][S][S]).
    variant: a plausible mistake, for the self-check."""
    from PIL import Image
    img = Image.open(path).convert("RGB")
    bg = tuple(int(x * 255) for x in MEAN)
    if variant == "black background":
        bg = (0, 0, 0)
    if variant == "offset rounded up" and img.size[0] != img.size[1]:
        w, h = img.size
        side = max(w, h)
        sq = Image.new("RGB", (side, side), bg)
        sq.paste(img, ((side - w + 1) // 2, (side - h + 1) // 2))
        img = sq
    else:
        img = expand2square(img, bg)
    if variant == "bilinear":
        img = img.resize((size, size), Image.BILINEAR)
    elif variant == "vertical pass first":
        img = img.transpose(Image.TRANSPOSE).resize((size, size), Image.BICUBIC).transpose(Image.TRANSPOSE)
    elif variant == "float intermediate":
        img = Image.merge("RGB", [Image.fromarray(np.clip(np.round(np.asarray(
            c.convert("F").resize((size, size), Image.BICUBIC))), 0, 255).astype(np.uint8))
            for c in img.split()])
    else:
        img = img.resize((size, size), Image.BICUBIC)
    px = np.asarray(img, dtype=np.uint8)
    # As transformers does: rescale in float64, cast, normalise in float32.
    x = (px.astype(np.float64) * (1 / 255)).astype(np.float32)
    x = (x - MEAN.astype(np.float32)) / STD.astype(np.float32)
    return px, x.transpose(2, 0, 1)


def make_images(tmp):
    """[(path, size, description)]"""
    from PIL import Image
    rng = np.random.default_rng(20240611)

    def noise(w, h, ch=3):
        return rng.integers(0, 256, size=(h, w, ch), dtype=np.uint8)

    def gradient(w, h):
        y, x = np.mgrid[0:h, 0:w].astype(np.float64)
        r = 255 * x / max(w - 1, 1)
        g = 255 * y / max(h - 1, 1)
        b = 127.5 + 127.5 * np.sin(x / 7.0 + y / 5.0)
        return np.clip(np.stack([r, g, b], -1) + 0.5, 0, 255).astype(np.uint8)

    cases = [
        ("noise_37x23", Image.fromarray(noise(37, 23)), [16, 64]),       # wide: padded top/bottom
        ("grad_37x23", Image.fromarray(gradient(37, 23)), [16, 64]),
        ("noise_20x50", Image.fromarray(noise(20, 50)), [24, 336]),      # tall: padded left/right
        ("grad_30x17", Image.fromarray(gradient(30, 17)), [30, 12]),     # odd padding; pad only
        ("noise_400x300", Image.fromarray(noise(400, 300)), [336]),      # downscale
        ("grad_400x300", Image.fromarray(gradient(400, 300)), [336, 224]),
        ("noise_7x7", Image.fromarray(noise(7, 7)), [32]),               # upscale
        ("grad_7x7", Image.fromarray(gradient(7, 7)), [32]),
        ("noise_32x32", Image.fromarray(noise(32, 32)), [32]),           # no resample
        ("noise_1x1", Image.fromarray(noise(1, 1)), [5]),
        ("noise_1000x3", Image.fromarray(noise(1000, 3)), [224]),        # mostly padding
        ("grey_45x31", Image.fromarray(noise(45, 31, 1)[:, :, 0], "L"), [40]),
        ("rgba_29x41", Image.fromarray(noise(29, 41, 4), "RGBA"), [36]),
    ]
    out = []
    for name, img, sizes in cases:
        p = os.path.join(tmp, name + ".png")
        img.save(p)
        for s in sizes:
            out.append((p, s, "%s -> %d" % (name, s)))
    return out


def main():
    if len(sys.argv) not in (2, 3):
        print(__doc__)
        return 1
    dump = sys.argv[1]
    try:
        import PIL
    except ImportError:
        print("SKIP: Pillow is not installed")
        return SKIP
    print("Pillow %s" % PIL.__version__)
    worst_lv, worst_norm, fails = 0.0, 0.0, 0
    # Self-check: each plausible mistake must move some pixel past the
    # tolerance. The pass order and the 8-bit intermediate matter because
    # the cubic's overshoot on noise is clipped between the passes.
    variants = {"bilinear": 0.0, "offset rounded up": 0.0, "black background": 0.0,
                "vertical pass first": 0.0, "float intermediate": 0.0}
    with tempfile.TemporaryDirectory(dir=sys.argv[2] if len(sys.argv) == 3 else None) as tmp:
        for path, size, what in make_images(tmp):
            out = os.path.join(tmp, "out.bin")
            r = subprocess.run([dump, path, str(size), out], capture_output=True, text=True)
            if r.returncode != 0:
                print("FAIL %s: dump_preproc exit %d: %s" % (what, r.returncode, r.stderr.strip()))
                fails += 1
                continue
            got = np.fromfile(out, dtype="<f4")
            if got.size != 3 * size * size:
                print("FAIL %s: %d floats, want %d" % (what, got.size, 3 * size * size))
                fails += 1
                continue
            got = got.reshape(3, size, size)
            px, want = reference(path, size)
            levels = (got.astype(np.float64) * STD[:, None, None] + MEAN[:, None, None]) * 255
            d_lv = float(np.abs(levels - px.transpose(2, 0, 1)).max())
            d_norm = float(np.abs(got - want).max())
            n_off = int((np.abs(levels - px.transpose(2, 0, 1)) > 0.5).sum())
            ok = d_lv <= TOL_LEVELS and d_norm <= 1e-5
            print("%s %-24s max |diff| %.4f levels (%d pixels off by a level), normalised %.2e"
                  % ("ok  " if ok else "FAIL", what, d_lv, n_off, d_norm))
            worst_lv, worst_norm = max(worst_lv, d_lv), max(worst_norm, d_norm)
            fails += not ok
            for v in variants:
                vpx = reference(path, size, v)[0].transpose(2, 0, 1).astype(np.float64)
                variants[v] = max(variants[v], float(np.abs(levels - vpx).max()))
    for v, d in variants.items():
        bad = d <= TOL_LEVELS
        print("%s self-check: with %-20s max |diff| %.0f levels%s"
              % ("FAIL" if bad else "ok  ", v, d, " (not detected)" if bad else ""))
        fails += bad
    print("max |diff| over all images: %.4f levels (tolerance %g), %.2e normalised"
          % (worst_lv, TOL_LEVELS, worst_norm))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
