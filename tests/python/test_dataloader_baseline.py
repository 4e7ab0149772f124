"""bench/dataloader_baseline.py, the loader feedd's figures are compared with:
its two sources give the same records, and --source memory refuses a
dataset it cannot hold as arrays, naming the field."""

import subprocess
import sys

import numpy as np
import pytest

from conftest import SRC

sys.path.insert(0, str(SRC / "bench"))
import dataloader_baseline as dlb  # noqa: E402


def pack(feedpack, *args):
    res = subprocess.run([feedpack, *map(str, args)], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0, res.stderr


def test_memory_equals_blocks(feedpack, tmp_path):
    n = 300
    img = np.random.default_rng(3).integers(0, 256, (n, 6, 5, 1), dtype=np.uint8)
    np.save(tmp_path / "image.npy", img)
    np.save(tmp_path / "label.npy", np.arange(n, dtype=np.int64) * 3)
    out = tmp_path / "ds"
    pack(feedpack, "npy", f"image={tmp_path / 'image.npy'}",
         f"label={tmp_path / 'label.npy'}", "--block-records", 7, "-o", out)
    blocks = dlb.FeedDataset(str(out), "none", 0, 0, "blocks")
    memory = dlb.FeedDataset(str(out), "none", 0, 0, "memory")
    assert len(memory) == n
    for i in (0, 6, 7, 150, 299, 42):
        a, b = blocks[i], memory[i]
        assert a.keys() == b.keys() == {"image", "label"}
        assert np.array_equal(b["image"].numpy(), img[i])
        assert np.array_equal(a["image"].numpy(), img[i])
        assert int(a["label"]) == int(b["label"]) == 3 * i


def test_memory_refuses_variable_fields(feedpack, tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    for k in range(3):
        (src / f"f{k}.bin").write_bytes(bytes(k + 1))
    out = tmp_path / "ds"
    pack(feedpack, "files", src, "-o", out)
    with pytest.raises(SystemExit, match="--source memory: field '.+' is variable-length"):
        dlb.load_all(dlb.feedformat.Dataset(str(out)))


def crops(img, size, pad):
    """Every image np_crop_flip can make of img: each offset, flipped or not."""
    h, w = img.shape[:2]
    padded = np.zeros((h + 2 * pad, w + 2 * pad) + img.shape[2:], img.dtype)
    padded[pad:pad + h, pad:pad + w] = img
    for top in range(h + 2 * pad - size + 1):
        for left in range(w + 2 * pad - size + 1):
            c = padded[top:top + size, left:left + size]
            yield (top, left, False), c
            yield (top, left, True), c[:, ::-1]


def test_crop_flip_batch_crops_each_sample_on_its_own():
    rng = np.random.default_rng(5)
    imgs = rng.integers(1, 256, (64, 6, 5, 1), dtype=np.uint8)  # no zeros: padding shows
    out = dlb.np_crop_flip_batch(imgs, 4, 2, np.random.default_rng(9))
    assert out.shape == (64, 4, 4, 1) and out.dtype == np.uint8 and out.flags.c_contiguous
    drawn = set()
    for img, o in zip(imgs, out):
        match = [k for k, c in crops(img, 4, 2) if np.array_equal(c, o)]
        assert match, "not a crop (with zero padding 2), flipped or not, of its own image"
        drawn.update(match)
    # the offsets and flips vary from sample to sample
    assert len({k[:2] for k in drawn}) > 5 and {k[2] for k in drawn} == {False, True}
