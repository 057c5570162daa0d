#!/usr/bin/env python3
"""Checks kvfold's image decoding against Pillow, and what hostile files cost.

    image_decode_ref.py DUMP_IMAGE DUMP_PREPROC [TMPDIR]

1. Decoding. LLaVA's image processor runs Image.open(f).convert("RGB"), so
   that is the reference, pixel for pixel. The test images are written by
   Pillow and, for what Pillow cannot write (16-bit RGB and grey+alpha,
   1/2/4-bit grey, Adam7 interlacing, GIF frames offset or larger than the
   screen, indices past the palette), by the small writers below, straight
   from the format specifications. Every case must match exactly: the same
   libjpeg-turbo ISLOW IDCT and fancy upsampling, the same lossless formats,
   and libwebp's VP8 decoding (deterministic by its specification).
2. Memory and time. DUMP_IMAGE decodes each hostile file and reports its
   peak RSS (VmHWM), which is compared with the bound docs/RELIABILITY.md
   gives for that format, over the RSS of decoding a 1x1 PNG; each must fail
   (or succeed) as stated, and none may hang. The square-padding resize of
   a 1x40000 image must take at most 8 times the CPU time of a 1x10000 one
   (linear: 4; the quadratic one it replaced: 16), whatever the machine.
Exit status 0 on success, 1 on a failed check, 77 when Pillow is absent.
"""
import io
import os
import resource
import struct
import subprocess
import sys
import tempfile
import time
import zlib

import numpy as np

SKIP = 77
MB = 1 << 20


def fail(msg):
    print("FAIL:", msg)
    return 1


# ------------------------------------------------------------- writers --

def png_chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png_raw_rows(rows):
    return b"".join(b"\0" + r for r in rows)


def adam7_passes(w, h):
    for x0, y0, dx, dy in ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2),
                           (0, 1, 1, 2)):
        yield x0, y0, dx, dy


def png_bytes(samples, colour, depth, interlace=False, extra=b""):
    """samples: uint array [h][w][c] of the stored sample values."""
    h, w = samples.shape[:2]
    c = samples.shape[2]

    def pack(row):  # one row of samples -> bytes at `depth` bits
        flat = row.reshape(-1).astype(np.uint32)
        if depth == 16:
            return flat.astype(">u2").tobytes()
        if depth == 8:
            return flat.astype(np.uint8).tobytes()
        bits = "".join(format(int(v), "0%db" % depth) for v in flat)
        bits += "0" * (-len(bits) % 8)
        return bytes(int(bits[i:i + 8], 2) for i in range(0, len(bits), 8))

    if interlace:
        raw = b""
        for x0, y0, dx, dy in adam7_passes(w, h):
            sub = samples[y0::dy, x0::dx]
            if sub.shape[0] and sub.shape[1]:
                raw += png_raw_rows([pack(r) for r in sub])
    else:
        raw = png_raw_rows([pack(r) for r in samples])
    ihdr = struct.pack(">IIBBBBB", w, h, depth, colour, 0, 0, 1 if interlace else 0)
    assert c == {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}[colour]
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + extra + png_chunk(b"IDAT", zlib.compress(raw)) +
            png_chunk(b"IEND", b""))


def lzw_gif(indices, min_size):
    """GIF LZW with a clear code before every code (never grows the table):
    valid, if large, and all a test needs."""
    clear, end, size = 1 << min_size, (1 << min_size) + 1, min_size + 1
    codes = []
    for v in indices:
        codes += [clear, int(v)]
    codes.append(end)
    acc = nbits = 0
    out = bytearray()
    for code in codes:
        acc |= code << nbits
        nbits += size
        while nbits >= 8:
            out.append(acc & 0xff)
            acc >>= 8
            nbits -= 8
    if nbits:
        out.append(acc & 0xff)
    blocks = b"".join(bytes([len(out[i:i + 255])]) + bytes(out[i:i + 255]) for i in range(0, len(out), 255))
    return bytes([min_size]) + blocks + b"\0"


def gif_bytes(screen, frame, palette, indices, transparent=None, local=False):
    sw, sh = screen
    left, top, fw, fh = frame
    bits = max(1, (len(palette) - 1).bit_length())
    table = b"".join(bytes(c) for c in palette) + b"\0" * (3 * ((1 << bits) - len(palette)))
    flags = 0x80 | (bits - 1)
    out = b"GIF89a" + struct.pack("<HHBBB", sw, sh, 0 if local else flags, 0, 0)
    if not local:
        out += table
    if transparent is not None:
        out += b"\x21\xf9\x04\x01\x00\x00" + bytes([transparent]) + b"\x00"
    out += b"," + struct.pack("<HHHHB", left, top, fw, fh, flags if local else 0)
    if local:
        out += table
    return out + lzw_gif(indices.reshape(-1), 8) + b";"


# --------------------------------------------------------------- cases --

def decode_cases(Image):
    rng = np.random.default_rng(7)
    cases = []

    def pil(name, im, fmt, **kw):
        buf = io.BytesIO()
        im.save(buf, fmt, **kw)
        cases.append((name, buf.getvalue()))

    rgb = Image.fromarray(rng.integers(0, 256, (23, 37, 3), dtype=np.uint8))
    smooth = np.zeros((41, 58, 3), np.uint8)
    yy, xx = np.mgrid[0:41, 0:58]
    smooth[..., 0], smooth[..., 1], smooth[..., 2] = 3 * xx + yy, 200 - 4 * yy, (xx * yy) % 256
    smooth = Image.fromarray(smooth)
    rgba = Image.fromarray(rng.integers(0, 256, (19, 21, 4), dtype=np.uint8))
    pil("png-rgb", rgb, "PNG")
    pil("png-rgba", rgba, "PNG")
    pil("png-grey", rgb.convert("L"), "PNG")
    pil("png-la", rgba.convert("LA"), "PNG")
    pil("png-1bit", rgb.convert("1"), "PNG")
    pil("png-palette", rgb.convert("P", palette=Image.ADAPTIVE, colors=13), "PNG")
    pal_t = rgb.convert("P", palette=Image.ADAPTIVE, colors=7)
    pil("png-palette-trns", pal_t, "PNG", transparency=3)
    grey16 = rng.integers(0, 65536, (9, 11, 1)).astype(np.uint16)
    grey16[0, :4, 0] = [0, 255, 256, 65535]
    cases.append(("png-grey16", png_bytes(grey16, 0, 16)))
    cases.append(("png-rgb16", png_bytes(rng.integers(0, 65536, (7, 10, 3)), 2, 16)))
    cases.append(("png-rgba16", png_bytes(rng.integers(0, 65536, (7, 10, 4)), 6, 16)))
    cases.append(("png-la16", png_bytes(rng.integers(0, 65536, (7, 10, 2)), 4, 16)))
    for d in (1, 2, 4):
        cases.append(("png-grey%d" % d, png_bytes(rng.integers(0, 1 << d, (6, 13, 1)), 0, d)))
    cases.append(("png-adam7", png_bytes(rng.integers(0, 256, (13, 11, 3)), 2, 8, interlace=True)))
    cases.append(("png-adam7-grey2", png_bytes(rng.integers(0, 4, (9, 10, 1)), 0, 2, interlace=True)))
    # A gamma chunk and an ICC-less sRGB chunk: Pillow applies neither.
    cases.append(("png-gama", png_bytes(rng.integers(0, 256, (5, 6, 3)), 2, 8,
                                        extra=png_chunk(b"gAMA", struct.pack(">I", 22727)) +
                                        png_chunk(b"sRGB", b"\0"))))
    for q, sub in ((90, 2), (75, 0), (95, 1)):
        pil("jpeg-q%d-sub%d" % (q, sub), smooth, "JPEG", quality=q, subsampling=sub)
    pil("jpeg-noise", rgb, "JPEG", quality=85)
    pil("jpeg-grey", smooth.convert("L"), "JPEG", quality=90)
    pil("jpeg-progressive", smooth, "JPEG", quality=80, progressive=True)
    pil("jpeg-optimised", rgb, "JPEG", quality=70, optimize=True)
    pil("jpeg-cmyk", smooth.convert("CMYK"), "JPEG", quality=92)
    pil("gif-palette", rgb.convert("P", palette=Image.ADAPTIVE, colors=31), "GIF")
    pil("gif-transparent", pal_t, "GIF", transparency=2)
    pil("gif-grey", rgb.convert("L"), "GIF")
    pal = [(10 * i, 255 - 20 * i, (37 * i) % 256) for i in range(6)]
    idx = rng.integers(0, 6, (5, 7)).astype(np.uint8)
    cases.append(("gif-offset", gif_bytes((12, 9), (3, 2, 7, 5), pal, idx)))
    cases.append(("gif-offset-transparent", gif_bytes((12, 9), (3, 2, 7, 5), pal, idx, transparent=4)))
    cases.append(("gif-local-palette", gif_bytes((7, 5), (0, 0, 7, 5), pal, idx, local=True)))
    cases.append(("gif-past-screen", gif_bytes((4, 3), (2, 1, 7, 5), pal, idx)))
    past = idx.copy()
    past[0, :3] = [6, 7, 200]
    cases.append(("gif-index-past-palette", gif_bytes((7, 5), (0, 0, 7, 5), pal, past)))
    pil("webp-lossless", rgb, "WEBP", lossless=True)
    pil("webp-lossless-opaque-rgba", rgb.convert("RGBA"), "WEBP", lossless=True)
    pil("webp-lossy", smooth, "WEBP", quality=80)
    pil("ppm", rgb, "PPM")
    pil("pgm", rgb.convert("L"), "PPM")
    return cases


def run_decode(exe, path, out, max_pixels=None):
    args = [exe, path, out] + ([str(max_pixels)] if max_pixels else [])
    t0 = time.monotonic()
    r = subprocess.run(args, capture_output=True, text=True, errors="replace")
    secs = time.monotonic() - t0
    rss = [int(x.split()[1]) for x in r.stdout.splitlines() if x.startswith("peak_rss ")]
    return r.returncode, r.stderr.strip(), rss[0] if rss else 0, secs


def read_rgb(path):
    data = open(path, "rb").read()
    nl = data.index(b"\n")
    w, h = map(int, data[:nl].split())
    return np.frombuffer(data[nl + 1:], np.uint8).reshape(h, w, 3)


def check_decoding(Image, exe, tmp):
    bad = 0
    cases = decode_cases(Image)
    for name, data in cases:
        path = os.path.join(tmp, name)
        with open(path, "wb") as f:
            f.write(data)
        want = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
        rc, err, _, _ = run_decode(exe, path, path + ".rgb")
        if rc != 0:
            bad += fail("%s: kvfold could not decode it: %s" % (name, err))
            continue
        got = read_rgb(path + ".rgb")
        if got.shape != want.shape:
            bad += fail("%s: %s, Pillow %s" % (name, got.shape, want.shape))
            continue
        diff = np.abs(got.astype(int) - want.astype(int))
        if diff.max():
            y, x, c = np.unravel_index(diff.argmax(), diff.shape)
            bad += fail("%s: %d pixels differ, worst %d at (%d,%d,%d): %d vs Pillow %d" % (
                name, int((diff.max(axis=2) > 0).sum()), diff.max(), x, y, c, got[y, x, c], want[y, x, c]))
    print("decoding: %d cases, %d equal to Pillow's" % (len(cases), len(cases) - bad))
    return bad


def hostile_cases(Image):
    """(name, bytes, max_pixels, must decode, bound in bytes over the baseline)."""
    cases = []
    f2 = bytearray(png_bytes(np.zeros((1, 1, 3), np.uint8), 2, 8))
    f2 = f2[:33] + struct.pack(">I", 0x7fffffff) + b"IDAT"  # 41 bytes, the IDAT never comes
    cases.append(("f2-idat-2gb.png", bytes(f2), None, False, 4 * MB))
    # Ancillary chunks that inflate to 200 MB: libpng's 8 MB cap on them.
    z = zlib.compressobj(9)
    bomb = b"".join(z.compress(b"\0" * MB) for _ in range(200)) + z.flush()
    one = np.zeros((1, 1, 3), np.uint8)
    cases.append(("ztxt-bomb.png", png_bytes(one, 2, 8, extra=png_chunk(b"zTXt", b"k\0\0" + bomb)), None, True,
                  16 * MB))
    cases.append(("iccp-bomb.png", png_bytes(one, 2, 8, extra=png_chunk(b"iCCP", b"p\0\0" + bomb)), None, True,
                  16 * MB))
    # Big headers with no pixels: at most what the header's size allows.
    w = h = 3000
    p = w * h
    cases.append(("big-header-cut.png", png_bytes(np.zeros((h, w, 3), np.uint8), 2, 8)[:200], None, False,
                  3 * p + 4 * MB))
    # Progressive JPEGs cut inside their first scan: libjpeg has already
    # made its whole coefficient buffer.
    jpeg_bound = 3 * p + 8 * (w + 32) * (h + 32) + 16 * MB
    for name, im, kw in (("progressive-cut.jpg", Image.new("RGB", (w, h), (9, 99, 199)), {"subsampling": 0}),
                         ("cmyk-progressive-cut.jpg", Image.new("CMYK", (w, h)), {})):
        buf = io.BytesIO()
        im.save(buf, "JPEG", progressive=True, **kw)
        data = buf.getvalue()
        cases.append((name, data[:data.index(b"\xff\xda") + 300], None, False, jpeg_bound))
        cases.append((name.replace("-cut", "-whole"), data, None, True, jpeg_bound))
    pal = [(1, 2, 3), (4, 5, 6)]
    cases.append(("gif-1px-frame-big-screen.gif", gif_bytes((w, h), (0, 0, 1, 1), pal, np.zeros((1, 1), np.uint8)),
                   None, True, 3 * p + 4 * MB))
    lossless = io.BytesIO()
    Image.new("RGBA", (w, h), (1, 2, 3, 4)).save(lossless, "WEBP", lossless=True)
    cases.append(("webp-lossless.webp", lossless.getvalue(), None, True, 8 * p + 8 * MB))
    # Over the caller's limit: refused from the header, nothing allocated.
    cases.append(("over-limit.png", png_bytes(np.zeros((64, 64, 3), np.uint8), 2, 8), 4095, False, 4 * MB))
    return cases


def check_memory(Image, exe, tmp):
    bad = 0
    base_path = os.path.join(tmp, "base.png")
    with open(base_path, "wb") as f:
        f.write(png_bytes(np.zeros((1, 1, 3), np.uint8), 2, 8))
    rc, err, base, _ = run_decode(exe, base_path, base_path + ".rgb")
    if rc != 0:
        return fail("1x1 PNG: %s" % err)
    print("memory: baseline %.1f MB peak RSS (1x1 PNG)" % (base / MB))
    for name, data, limit, ok, bound in hostile_cases(Image):
        path = os.path.join(tmp, name)
        with open(path, "wb") as f:
            f.write(data)
        rc, err, rss, secs = run_decode(exe, path, path + ".rgb", limit)
        extra = max(0, rss - base)
        print("  %-28s %6d bytes  %-5s %7.1f MB over baseline (bound %7.1f)  %.2f s  %s" % (
            name, len(data), "ok" if rc == 0 else "error", extra / MB, bound / MB, secs, err[:90]))
        if (rc == 0) != ok:
            bad += fail("%s: expected %s, got exit %d (%s)" % (name, "success" if ok else "an error", rc, err))
        if rc not in (0, 1):
            bad += fail("%s: exit %d (a crash?)" % (name, rc))
        if extra > bound:
            bad += fail("%s: %.1f MB over the baseline, bound %.1f MB" % (name, extra / MB, bound / MB))
        if secs > 60:  # a hang, not a speed: each takes well under a second here
            bad += fail("%s: %.1f s" % (name, secs))
    return bad


def resize_cpu_secs(preproc, tmp, side):
    """CPU seconds dump_preproc takes to resize a 1 x side image to 336x336."""
    path = os.path.join(tmp, "tall%d.ppm" % side)
    with open(path, "wb") as f:
        f.write(b"P6\n1 %d\n255\n" % side + bytes(range(256)) * (3 * side // 256) + b"\0" * (3 * side % 256))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = subprocess.run([preproc, path, "336", path + ".bin"], capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode:
        raise RuntimeError("1x%d image: %s" % (side, r.stderr.strip()))
    return after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def check_resize_time(preproc, tmp):
    # A tall image's square padding cost O(side^2) taps before (a 1x40000
    # image about 10 s here); now O(side x (size + taps)), about 0.3 s. A
    # side 4 times longer costs 4 times more when linear, 16 when quadratic:
    # the ratio holds on a machine of any speed (the least of three runs
    # each, against the noise of a shared machine).
    try:
        short = min(resize_cpu_secs(preproc, tmp, 10000) for _ in range(3))
        tall = min(resize_cpu_secs(preproc, tmp, 40000) for _ in range(3))
    except RuntimeError as e:
        return fail(str(e))
    print("resize to 336x336: 1x10000 in %.2f s, 1x40000 in %.2f s of CPU" % (short, tall))
    return fail("1x40000 took %.2f s, 1x10000 %.2f s: not linear" % (tall, short)) if tall > 8 * short + 0.05 else 0


def main():
    if len(sys.argv) not in (3, 4):
        print(__doc__)
        return 2
    try:
        from PIL import Image
    except ImportError:
        print("SKIP: Pillow not installed (scripts/setup.sh makes .venv)")
        return SKIP
    exe, preproc = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory(dir=sys.argv[3] if len(sys.argv) == 4 else None) as tmp:
        bad = check_decoding(Image, exe, tmp)
        bad += check_memory(Image, exe, tmp)
        bad += check_resize_time(preproc, tmp)
    print("FAILED" if bad else "OK")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
