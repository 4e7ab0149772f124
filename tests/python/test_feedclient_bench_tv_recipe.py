"""bench/tv_recipe.py (issue 31's target: the torchvision recipe through
from_torchvision against a DataLoader): its CutMix / MixUp for torchvision
without v2, and a smoke run on a few images through a real feedd. Checks
what each side yields (float32 batches, soft labels, every image of every
epoch), never a speed."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "bench")
sys.path.insert(0, BENCH)
import tv_recipe  # noqa: E402


def batch(n=6, h=8, w=10):
    g = torch.Generator().manual_seed(3)
    return torch.rand(n, 3, h, w, generator=g), torch.arange(n) % 4


def test_bench_tv_recipe_mixup_mixes_with_the_rolled_batch():
    torch.manual_seed(5)
    x, y = batch()
    out, soft = tv_recipe.MixUp(0.2, 4)(x.clone(), y)
    assert soft.shape == (6, 4) and torch.allclose(soft.sum(1), torch.ones(6))
    # lam from the labels: sample i holds lam of its class, 1 - lam of i-1's
    lam = float(soft[1, int(y[1])])
    assert torch.allclose(out, x * lam + x.roll(1, 0) * (1 - lam), atol=1e-6)


def test_bench_tv_recipe_cutmix_pastes_one_box_of_the_rolled_batch():
    torch.manual_seed(2)
    x, y = batch()
    for _ in range(20):
        out, soft = tv_recipe.CutMix(1.0, 4)(x, y)
        assert torch.allclose(soft.sum(1), torch.ones(6))
        pasted = (out != x).any(0).any(0)  # H x W: where any sample changed
        frac = float(pasted.float().mean())
        # every changed pixel comes from the previous sample, and the label
        # weight of the previous sample is the box's area
        rolled = x.roll(1, 0)
        assert torch.equal(out[..., pasted], rolled[..., pasted])
        assert abs(float(soft[1, int(y[0])]) - frac) < 1e-6
        assert torch.equal(x, batch()[0])  # the input is left alone


def jpeg_tree(root, n=10):
    from PIL import Image
    rng = np.random.default_rng(7)
    for k in range(n):
        d = root / f"c{k % 2}"
        d.mkdir(parents=True, exist_ok=True)
        img = rng.integers(0, 256, (int(rng.integers(120, 200)), 160, 3), dtype=np.uint8)
        Image.fromarray(img).save(d / f"{k:03d}.jpg", quality=90)


def test_bench_tv_recipe_smoke(tmp_path, feed_bin):
    jpeg_tree(tmp_path / "set")
    res = subprocess.run([sys.executable, os.path.join(BENCH, "tv_recipe.py"), "--set",
                          str(tmp_path / "set"), "--batch", "4", "--runs", "2", "--workers",
                          "1", "--bin", str(feed_bin), "--json"],
                         capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["transforms"].startswith("torchvision.transforms")
    assert out["feedd"]["pipeline"].endswith(
        "mix(num_classes=2, mixup_alpha=0.2, cutmix_alpha=1, switch_prob=0.5)")
    for side in ("feedd", "dataloader"):
        r = out[side]
        assert r["images_per_epoch"] == 10 and len(r["img_per_s_runs"]) == 2
        assert r["img_per_s"] > 0 and r["cpu_s_per_epoch"] >= 0
        # soft labels summing to 1 per image, over the 2 timed epochs
        assert abs(r["label_sum"] - 20) < 1e-3, (side, r["label_sum"])
        assert len(r["channel_means"]) == 3
    assert out["speedup"] > 0 and len(out["loadavg"]) == 3
    # feedd's CPU time can round to 0 ticks on 10 images: then no ratio, never a crash
    f, d = out["feedd"]["cpu_s_per_epoch"], out["dataloader"]["cpu_s_per_epoch"]
    if f > 0:
        assert out["cpu_ratio"] == pytest.approx(d / f)
    else:
        assert out["cpu_ratio"] is None


def test_bench_tv_recipe_refuses_bad_arguments(tmp_path):
    res = subprocess.run([sys.executable, os.path.join(BENCH, "tv_recipe.py"), "--runs", "0"],
                         capture_output=True, text=True, check=False)
    assert res.returncode == 2 and "--runs" in res.stderr
