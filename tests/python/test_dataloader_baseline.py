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
