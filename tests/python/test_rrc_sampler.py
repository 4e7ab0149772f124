"""random_resized_crop's box sampler against torchvision's.

core/augment.c draws RandomResizedCrop's box (aug_rrc_box) from feedd's
Philox draws, not torch's generator, so boxes cannot be compared one by one;
their distribution can. For each image size, 10,000 boxes from
`check_augment --rrc` and 10,000 from torchvision's
RandomResizedCrop.get_params must agree: the mean of top, left, height,
width and area within 5 standard errors, their standard deviations within
5%, the share of fallback (whole-image) boxes within 1.5 points, and the
two-sample Kolmogorov-Smirnov distance of area and aspect below 0.03 (the
1-in-1000 critical value for 10,000 + 10,000 draws is 0.027).

Skipped when torchvision is not importable.
"""

import subprocess

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transforms = pytest.importorskip("torchvision.transforms")

N = 10_000

CASES = [
    # (h, w, scale, ratio)
    (480, 640, (0.08, 1.0), (0.75, 1.3333)),
    (375, 500, (0.08, 1.0), (0.75, 1.3333)),
    (64, 64, (0.5, 1.0), (0.75, 1.3333)),
    (100, 400, (0.3, 1.0), (0.5, 2.0)),      # wide: many tries rejected
    (50, 60, (0.9, 1.0), (3.0, 4.0)),        # mostly the fallback
]


def feedd_boxes(augment_probe, h, w, scale, ratio, seed=7):
    cmd = [augment_probe, "--rrc", str(h), str(w), str(N), repr(scale[0]), repr(scale[1]),
           repr(ratio[0]), repr(ratio[1]), str(seed)]
    res = subprocess.run(cmd, capture_output=True, check=False)
    assert res.returncode == 0, res.stderr.decode()
    boxes = np.array([[int(v) for v in line.split()] for line in res.stdout.decode().splitlines()])
    assert boxes.shape == (N, 4)
    return boxes  # columns: top, left, height, width


def torch_boxes(h, w, scale, ratio, seed=7):
    torch.manual_seed(seed)
    img = torch.empty(3, h, w, dtype=torch.uint8)
    get = transforms.RandomResizedCrop.get_params
    return np.array([get(img, list(scale), list(ratio)) for _ in range(N)])


def ks_distance(a, b):
    a, b = np.sort(a), np.sort(b)
    grid = np.concatenate([a, b])
    cdf_a = np.searchsorted(a, grid, side="right") / len(a)
    cdf_b = np.searchsorted(b, grid, side="right") / len(b)
    return float(np.max(np.abs(cdf_a - cdf_b)))


def fallback_box(h, w, ratio):
    in_ratio = w / h
    if in_ratio < min(ratio):
        bw, bh = w, int(round(w / min(ratio)))
    elif in_ratio > max(ratio):
        bh, bw = h, int(round(h * max(ratio)))
    else:
        bw, bh = w, h
    return ((h - bh) // 2, (w - bw) // 2, bh, bw)


@pytest.mark.parametrize("h,w,scale,ratio", CASES)
def test_rrc_box_distribution_matches_torchvision(augment_probe, h, w, scale, ratio):
    ours = feedd_boxes(augment_probe, h, w, scale, ratio).astype(np.float64)
    ref = torch_boxes(h, w, scale, ratio).astype(np.float64)

    # every box inside the image
    assert (ours[:, 2] >= 1).all() and (ours[:, 3] >= 1).all()
    assert (ours[:, 0] + ours[:, 2] <= h).all() and (ours[:, 1] + ours[:, 3] <= w).all()

    cols = {"top": 0, "left": 1, "height": 2, "width": 3}
    stats = {name: (ours[:, k], ref[:, k]) for name, k in cols.items()}
    stats["area"] = (ours[:, 2] * ours[:, 3], ref[:, 2] * ref[:, 3])
    for name, (a, b) in stats.items():
        se = np.sqrt(a.var() / N + b.var() / N)
        assert abs(a.mean() - b.mean()) <= 5 * se + 1e-9, \
            f"{h}x{w} {name}: mean {a.mean():.3f} vs torchvision {b.mean():.3f} (se {se:.3f})"
        if b.std() > 0:
            assert abs(a.std() - b.std()) <= 0.05 * b.std() + 1e-9, \
                f"{h}x{w} {name}: std {a.std():.3f} vs torchvision {b.std():.3f}"

    fb = np.array(fallback_box(h, w, ratio), dtype=np.float64)
    share_ours = np.mean((ours == fb).all(axis=1))
    share_ref = np.mean((ref == fb).all(axis=1))
    assert abs(share_ours - share_ref) <= 0.015, \
        f"{h}x{w}: fallback share {share_ours:.4f} vs torchvision {share_ref:.4f}"

    area_ks = ks_distance(ours[:, 2] * ours[:, 3], ref[:, 2] * ref[:, 3])
    aspect_ks = ks_distance(ours[:, 3] / ours[:, 2], ref[:, 3] / ref[:, 2])
    assert area_ks < 0.03, f"{h}x{w}: KS distance of areas {area_ks:.4f}"
    assert aspect_ks < 0.03, f"{h}x{w}: KS distance of aspects {aspect_ks:.4f}"
