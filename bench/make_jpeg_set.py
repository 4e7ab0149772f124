#!/usr/bin/python3
"""Builds a real JPEG set in class folders (torchvision ImageFolder layout).

Each image is a random crop of one of the photographs among Debian's
plasma-workspace-wallpapers (the package ships drawings too; only the
photographs below are used), resized so its shorter side is 375..500 px
(aspect 3:4..4:3), mirrored half the time, saved as baseline JPEG at
quality 90 with 4:2:0 chroma: the typical size and quality of ImageNet's
training images. The same seed, count and classes give the same files
(on the same Pillow/libjpeg).

    /usr/bin/python3 bench/make_jpeg_set.py --out DIR [--count 5000]
        [--classes 10] [--seed 1]

Images go to DIR/class_KKK/img_NNNNNN.jpg; class k gets images k, k+K,
k+2K, ... (the classes are labels only: the pictures do not depend on them).
"""
import argparse
import os
import random
import shutil
import sys

from PIL import Image

WALLPAPERS = "/usr/share/wallpapers"
MARKER = ".make_jpeg_set"  # in the root: not a class folder, so no sample
# The photographs (the others are drawings or renders).
PHOTOS = ["BytheWater", "ColdRipple", "ColorfulCups", "DarkestHour", "EveningGlow",
          "FallenLeaf", "Grey", "Kite", "OneStandsOut", "Path", "Volna", "summer_1am"]


def find_sources():
    """The largest picture of each photograph wallpaper that is installed."""
    out = []
    for name in PHOTOS:
        best, best_px = None, 0
        base = os.path.join(WALLPAPERS, name, "contents")
        if not os.path.isdir(base):
            continue
        for sub in sorted(os.listdir(base)):
            if not sub.startswith("images"):
                continue
            for f in sorted(os.listdir(os.path.join(base, sub))):
                if not f.lower().endswith((".jpg", ".png")):
                    continue
                path = os.path.join(base, sub, f)
                with Image.open(path) as im:
                    px = im.size[0] * im.size[1]
                if px > best_px:
                    best, best_px = path, px
        if best:
            out.append(best)
    return out


def make_one(rng, src):
    """One image: a random crop of src, resized to shorter side 375..500."""
    short = rng.randint(375, 500)
    aspect = rng.uniform(3 / 4, 4 / 3)          # width / height
    if aspect >= 1:
        h, w = short, round(short * aspect)
    else:
        w, h = short, round(short / aspect)
    sw, sh = src.size
    # The crop covers between the output size and the whole source.
    fmax = min(sw / w, sh / h)
    f = rng.uniform(min(1.0, fmax), fmax)
    cw, ch = min(sw, round(w * f)), min(sh, round(h * f))
    x, y = rng.randint(0, sw - cw), rng.randint(0, sh - ch)
    im = src.resize((w, h), Image.BILINEAR, box=(x, y, x + cw, y + ch), reducing_gap=3.0)
    if rng.random() < 0.5:
        im = im.transpose(Image.FLIP_LEFT_RIGHT)
    return im


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="directory to create (must not exist)")
    ap.add_argument("--count", type=int, default=5000, help="images (default 5000)")
    ap.add_argument("--classes", type=int, default=10, help="class folders (default 10)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--quality", type=int, default=90)
    ap.add_argument("--replace", action="store_true",
                    help="replace --out if this script made it (test fixtures)")
    a = ap.parse_args()
    if a.count < 1 or a.classes < 1 or a.classes > a.count:
        ap.error("need 1 <= --classes <= --count")
    paths = find_sources()
    if not paths:
        sys.exit("make_jpeg_set: no photographs under %s (apt-get install "
                 "plasma-workspace-wallpapers)" % WALLPAPERS)
    srcs = [Image.open(p).convert("RGB") for p in paths]
    rng = random.Random(a.seed)
    if a.replace and os.path.isfile(os.path.join(a.out, MARKER)):
        shutil.rmtree(a.out)
    os.makedirs(a.out)
    with open(os.path.join(a.out, MARKER), "w") as f:
        f.write("made by bench/make_jpeg_set.py %s\n" % " ".join(sys.argv[1:]))
    for k in range(a.classes):
        os.mkdir(os.path.join(a.out, "class_%03d" % k))
    total = 0
    for i in range(a.count):
        im = make_one(rng, srcs[rng.randrange(len(srcs))])
        path = os.path.join(a.out, "class_%03d" % (i % a.classes), "img_%06d.jpg" % i)
        im.save(path, "JPEG", quality=a.quality, subsampling="4:2:0", optimize=False)
        total += os.path.getsize(path)
    print("make_jpeg_set: %d images in %d classes under %s, %.1f MB, mean %.1f KB, "
          "from %d photographs" % (a.count, a.classes, a.out, total / 1e6,
                                   total / a.count / 1e3, len(srcs)))


if __name__ == "__main__":
    main()
