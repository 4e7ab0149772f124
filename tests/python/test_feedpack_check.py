"""`feedpack imagefolder DIR --check` and `feedpack verify DIR --decode`
(issue 20): every image decoded in full, as feedd decodes it; those that
fail listed by path with the decoder's words, exit 1 if any.

The tree mixes good images, damaged ones PIL decodes (listed as warnings,
not failures) and bad ones whose headers are fine (ingest takes them:
only a full decode finds them), one of them a decompression bomb.
"""

import shutil
import subprocess

import numpy as np
import pytest

from conftest import pack
from test_image_torchvision import IMAGES

TREE = {
    "cat/a.jpg": "photo_00.jpg",
    "cat/b.png": "rgb8.png",
    "cat/c.jpg": "damaged_junk.jpg",
    "cat/d.jpg": "bad_garbage.jpg",
    "dog/e.jpg": "damaged_cut_scan.jpg",
    "dog/f.jpg": "bad_truncated.jpg",
    "dog/g.jpg": "bomb.jpg",
    "dog/h.jpg": "small.jpg",
}
FAILING = {"cat/d.jpg": "JPEG: Bogus marker length",
           "dog/f.jpg": "JPEG: truncated: no end-of-image marker",
           "dog/g.jpg": "65000x65000 is past max_pixels"}
WARNING = {"cat/c.jpg": "extraneous bytes before marker",
           "dog/e.jpg": "premature end of data segment"}


def tree(root, files):
    for rel, src in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(IMAGES / src, root / rel)
    return root


def run(feedpack, *args):
    return subprocess.run([feedpack, *map(str, args)], capture_output=True, text=True,
                          timeout=120)


def listed(stdout):
    """path -> the rest of its line, for the lines naming a file."""
    out = {}
    for line in stdout.splitlines():
        if ": " in line and not line[0].isdigit() and not line.startswith("ok: "):
            path, rest = line.split(": ", 1)
            out[path] = rest
    return out


def check_listing(res):
    assert res.returncode == 1, res.stderr
    got = listed(res.stdout)
    assert {p for p, r in got.items() if not r.startswith("warning: ")} == set(FAILING)
    for p, words in FAILING.items():
        assert words in got[p], got[p]
    for p, words in WARNING.items():
        assert got[p].startswith("warning: Corrupt JPEG data: ") and words in got[p], got[p]
    assert f"{len(TREE)} images decoded in full" in res.stdout
    assert "3 of 8 images do not decode" in res.stderr


def test_imagefolder_check_lists_the_bad_files(feedpack, tmp_path):
    root = tree(tmp_path / "tree", TREE)
    res = run(feedpack, "imagefolder", root, "--check")
    check_listing(res)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tree"]   # wrote nothing


def test_imagefolder_check_passes_a_good_tree(feedpack, tmp_path):
    good = {k: v for k, v in TREE.items() if k not in FAILING}
    res = run(feedpack, "imagefolder", tree(tmp_path / "tree", good), "--check")
    assert res.returncode == 0, res.stderr
    assert f"{len(good)} images decoded in full" in res.stdout and " 0 fail" in res.stdout


def test_imagefolder_check_writes_nothing(feedpack, tmp_path):
    root = tree(tmp_path / "tree", TREE)
    res = run(feedpack, "imagefolder", root, "--check", "-o", tmp_path / "out")
    assert res.returncode == 2 and "--check writes nothing" in res.stderr


def test_verify_decode_lists_the_bad_samples_by_path(feedpack, tmp_path):
    root = tree(tmp_path / "tree", TREE)
    pack(feedpack, "imagefolder", root, "-o", tmp_path / "ds")
    plain = run(feedpack, "verify", tmp_path / "ds")
    assert plain.returncode == 0, plain.stderr   # the blocks are fine: only decoding tells
    check_listing(run(feedpack, "verify", tmp_path / "ds", "--decode"))


def test_verify_decode_without_paths_names_indices(feedpack, tmp_path):
    root = tree(tmp_path / "tree", TREE)
    pack(feedpack, "imagefolder", root, "-o", tmp_path / "ds")
    (tmp_path / "ds" / "paths.txt").unlink()
    res = run(feedpack, "verify", tmp_path / "ds", "--decode")
    assert res.returncode == 1
    order = sorted(TREE)
    for p in FAILING:
        assert f"sample {order.index(p)}: " in res.stdout, res.stdout


def test_verify_decode_needs_an_image_field(feedpack, tmp_path):
    np.save(tmp_path / "x.npy", np.arange(10, dtype=np.int64))
    pack(feedpack, "npy", f"x={tmp_path / 'x.npy'}", "-o", tmp_path / "ds")
    res = run(feedpack, "verify", tmp_path / "ds", "--decode")
    assert res.returncode == 1 and "no image field" in res.stderr


@pytest.mark.parametrize("cmd", [["imagefolder", "X", "-o", "Y", "--decode"],
                                 ["verify", "X", "--check"]])
def test_check_and_decode_belong_to_their_command(feedpack, cmd):
    res = run(feedpack, *cmd)
    assert res.returncode == 2 and "takes no option" in res.stderr


def test_paths_file_with_another_line_count_is_refused(feedpack, tmp_path):
    root = tree(tmp_path / "tree", {k: v for k, v in TREE.items() if k not in FAILING})
    pack(feedpack, "imagefolder", root, "-o", tmp_path / "ds")
    paths = tmp_path / "ds" / "paths.txt"
    assert paths.read_text().splitlines() == sorted(k for k in TREE if k not in FAILING)
    paths.write_text("cat/a.jpg\n")
    res = run(feedpack, "verify", tmp_path / "ds")
    assert res.returncode == 1 and "paths.txt: 1 whole lines for 5 samples" in res.stderr, \
        res.stderr
