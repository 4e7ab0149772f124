#!/usr/bin/python3
"""resample_vs_libyuv.py BIN DIR [N]: mean absolute difference of each
method of bench/resample_vs_libyuv.c from torchvision's
resized_crop(antialias=True), over 3 RandomResizedCrop boxes of each of the
first N (40) JPEGs in DIR, decoded at scale 1 (integer boxes)."""
import glob
import subprocess
import sys

import numpy as np
import torch
import torchvision.transforms.functional as F
from PIL import Image

NAMES = ["ours", "RGBScale box", "RGBScale bilinear", "ARGBScale box", "ARGBScale bilinear"]


def main():
    binary, d = sys.argv[1], sys.argv[2]
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 40
    rng = np.random.default_rng(3)
    mads = [[] for _ in NAMES]
    worst = [0] * len(NAMES)
    for f in sorted(glob.glob(d + "/*.jpg"))[:n]:
        full = np.asarray(Image.open(f).convert("RGB"))
        h, w = full.shape[:2]
        t = torch.from_numpy(full.copy()).permute(2, 0, 1)
        for _ in range(3):
            area = w * h * rng.uniform(0.08, 1)
            r = np.exp(rng.uniform(np.log(3 / 4), np.log(4 / 3)))
            bw, bh = int(round(np.sqrt(area * r))), int(round(np.sqrt(area / r)))
            if bw > w or bh > h:
                continue
            x, y = int(rng.integers(0, w - bw + 1)), int(rng.integers(0, h - bh + 1))
            ref = F.resized_crop(t, y, x, bh, bw, [224, 224], antialias=True)
            ref = ref.permute(1, 2, 0).numpy().astype(int)
            out = subprocess.run([binary, "--dump", f, str(x), str(y), str(bw), str(bh)],
                                 capture_output=True, check=True).stdout
            a = np.frombuffer(out, np.uint8).reshape(len(NAMES), 224, 224, 3).astype(int)
            for m in range(len(NAMES)):
                diff = np.abs(a[m] - ref)
                mads[m].append(diff.mean())
                worst[m] = max(worst[m], int(diff.max()))
    for m, name in enumerate(NAMES):
        print(f"{name:20s} MAD vs torchvision: mean {np.mean(mads[m]):.3f} "
              f"worst crop {np.max(mads[m]):.3f}, max abs {worst[m]} ({len(mads[m])} crops)")


if __name__ == "__main__":
    main()
