#!/usr/bin/python3
"""How far each DCT-scale policy for random_resized_crop's box decode lands
from torchvision, on real photographs (accuracy only; speed is
bench_image --mode box --margin F).

    /usr/bin/python3 bench/scale_policy.py DIR [--bin BUILD/bin] [--size N]
        [--boxes K] [--margins 1,1.5,2,0]

For every JPEG under DIR (recursively), K boxes drawn as torchvision's
RandomResizedCrop.get_params (torch seeded per image) plus the whole image.
A policy with margin F decodes a box at the largest 1/s (s in 1, 2, 4, 8)
with box/s >= F x size (F=0: always 1/1; F=1 is img_scale_for() before
issue 12's tightening). Each box is decoded and resampled by
tests/images/image_dump (core/image_*.c) at that scale and compared with
torchvision's resized_crop(antialias=True) of the same box on the PIL image
(mean absolute difference, levels), and with image_dump's own full-scale
decode + resample of the box (PSNR, dB). Prints per policy the worst and
median mean |diff|, the lowest PSNR and how many boxes it decoded scaled.
"""

import argparse
import math
import pathlib
import subprocess

import numpy as np
import torch
import torchvision.transforms as T
import torchvision.transforms.functional as TF
from PIL import Image


def scale_for(bw, bh, size, margin):
    if margin <= 0:
        return 1
    s = 8
    while s > 1 and (bw < margin * size * s or bh < margin * size * s):
        s //= 2
    return s


def dump(binary, path, box, scale, size):
    x, y, w, h = box
    res = subprocess.run([str(binary), str(path), "-b", f"{x},{y},{w},{h}", "-s", str(scale),
                          "-o", f"{size}x{size}"], capture_output=True, check=True)
    line, data = res.stdout.split(b"\n", 1)
    assert int(line.split()[-1]) == scale, (path, box, scale, line)
    return np.frombuffer(data, np.uint8).reshape(size, size, 3)


def mad(a, b):
    return float(np.abs(a.astype(np.int32) - b.astype(np.int32)).mean())


def psnr(a, b):
    mse = float(((a.astype(np.float64) - b.astype(np.float64)) ** 2).mean())
    return math.inf if mse == 0 else 10 * math.log10(255.0 ** 2 / mse)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--bin", default=str(pathlib.Path(__file__).parents[1] / "build" / "bin"))
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--boxes", type=int, default=4)
    ap.add_argument("--margins", default="1,1.5,2,0")
    a = ap.parse_args()
    binary = pathlib.Path(a.bin) / "image_dump"
    margins = [float(m) for m in a.margins.split(",")]
    files = sorted(p for p in pathlib.Path(a.dir).rglob("*") if p.suffix.lower() in
                   (".jpg", ".jpeg"))
    res = {m: {"mad": [], "psnr": [], "scaled": 0} for m in margins}
    rrc = T.RandomResizedCrop(a.size)
    for i, path in enumerate(files):
        img = Image.open(path)
        img.load()
        img = img.convert("RGB")
        torch.manual_seed(i)
        boxes = [(0, 0, img.width, img.height)]
        for _ in range(a.boxes):
            top, left, h, w = rrc.get_params(img, rrc.scale, rrc.ratio)
            boxes.append((left, top, w, h))
        for box in boxes:
            x, y, w, h = box
            ref = np.asarray(TF.resized_crop(img, y, x, h, w, [a.size, a.size],
                                             interpolation=T.InterpolationMode.BILINEAR,
                                             antialias=True))
            outs = {1: dump(binary, path, box, 1, a.size)}
            for m in margins:
                s = scale_for(w, h, a.size, m)
                if s not in outs:
                    outs[s] = dump(binary, path, box, s, a.size)
                r = res[m]
                r["mad"].append(mad(outs[s], ref))
                r["psnr"].append(psnr(outs[s], outs[1]))
                r["scaled"] += s > 1
    n = len(res[margins[0]]["mad"])
    print(f"{len(files)} images, {n} boxes ({a.boxes} RandomResizedCrop + whole image each), "
          f"output {a.size}x{a.size}")
    print(f"{'policy':<22} {'scaled':>7} {'MAD worst':>10} {'MAD median':>11} {'PSNR min':>9}")
    for m in margins:
        r = res[m]
        name = "no scaling" if m <= 0 else f"box/s >= {m:g} x out"
        print(f"{name:<22} {r['scaled']:>7} {max(r['mad']):>10.3f} "
              f"{float(np.median(r['mad'])):>11.3f} {min(r['psnr']):>9.2f}")


if __name__ == "__main__":
    main()
