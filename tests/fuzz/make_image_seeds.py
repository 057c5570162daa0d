"""Image seeds for the fuzz harness fuzz_image, in every format and layout
Pillow writes that kvfold reads (tiny pictures, so that mutations reach the
headers). make_seeds writes the PPM/PGM ones without Python.

usage: make_image_seeds.py OUTDIR   (exits 0 with a message without Pillow)"""
import os
import sys

try:
    from PIL import Image, features
except ImportError:
    print("make_image_seeds: no Pillow, only the PPM/PGM seeds")
    sys.exit(0)


def picture(mode, w=7, h=5):
    img = Image.new("RGB", (w, h))
    img.putdata([(x * 36 % 256, y * 50 % 256, (x + y) * 20 % 256) for y in range(h) for x in range(w)])
    return img.convert(mode)


def main(out):
    os.makedirs(out, exist_ok=True)
    seeds = [
        ("rgb.png", picture("RGB"), "PNG", {}),
        ("rgba.png", picture("RGBA"), "PNG", {}),
        ("grey.png", picture("L"), "PNG", {}),
        ("palette.png", picture("P"), "PNG", {}),
        ("grey16.png", picture("I;16"), "PNG", {}),
        ("baseline.jpg", picture("RGB", 17, 9), "JPEG", {"quality": 80}),
        ("progressive.jpg", picture("RGB", 17, 9), "JPEG", {"progressive": True}),
        ("grey.jpg", picture("L"), "JPEG", {}),
        ("cmyk.jpg", picture("CMYK"), "JPEG", {}),
        ("rgb.bmp", picture("RGB"), "BMP", {}),
        ("rgb.tga", picture("RGB"), "TGA", {}),
        ("still.gif", picture("P"), "GIF", {}),
    ]
    if features.check("webp"):
        seeds += [("lossy.webp", picture("RGB"), "WEBP", {"quality": 60}),
                  ("lossless.webp", picture("RGBA"), "WEBP", {"lossless": True})]
    for name, img, fmt, opts in seeds:
        img.save(os.path.join(out, name), fmt, **opts)
    frames = [picture("P"), picture("P").rotate(90, expand=False)]
    frames[0].save(os.path.join(out, "animated.gif"), "GIF", save_all=True, append_images=frames[1:], duration=50)


if __name__ == "__main__":
    main(sys.argv[1])
