"""`feedpack imagefolder`: a folder of class subfolders, against torchvision.

The dataset must hold ImageFolder's samples in ImageFolder's order, with
its labels and class names, each image's bytes exactly as the file; bad
files are refused naming them, or with --skip-bad listed and left out;
`feedpack inspect` shows the classes and the largest image dimensions.

The JPEGs are a small set made by bench/make_jpeg_set.py (the CTest fixture
jpeg_set puts it in the build tree and names it in FEED_JPEG_SET; run by
hand, it is made here).
"""

import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest
from PIL import Image

from conftest import SRC

sys.path.insert(0, str(SRC / "bench"))
import feedformat as ff  # noqa: E402

torchvision = pytest.importorskip("torchvision")


def run(feedpack, *args):
    return subprocess.run([feedpack, *map(str, args)], capture_output=True, text=True,
                          timeout=120)


@pytest.fixture(scope="session")
def jpeg_set(tmp_path_factory):
    """Directory of class_KKK/img_NNNNNN.jpg (60 images, 3 classes)."""
    env = os.environ.get("FEED_JPEG_SET")
    if env and os.path.isdir(env):
        return pathlib.Path(env)
    out = tmp_path_factory.mktemp("jpegs") / "set"
    subprocess.run([sys.executable, SRC / "bench" / "make_jpeg_set.py", "--out", out,
                    "--count", "60", "--classes", "3"], check=True, capture_output=True)
    return out


@pytest.fixture
def folder(tmp_path, jpeg_set):
    """An ImageFolder tree with what sorting and filtering must get right:
    class names whose byte order differs from other orders, nested folders
    (walked as os.walk sorts them), upper-case extensions, a PNG, files
    that ImageFolder ignores, a hidden class, and a file in the root."""
    root = tmp_path / "in"
    src = sorted(jpeg_set.rglob("*.jpg"))
    assert len(src) >= 40
    layout = {
        "B": ["x.jpg", "a.JPG", "sub/z.jpeg", "sub-1/b.jpg", "sub/deeper/c.jpg", "Y.jpg"],
        "a": ["10.jpg", "9.jpg", "1.jpg"],
        "a-b": ["p.png", "q.jpg"],
        "a_b": ["m.jpg"],
        ".hidden": ["h.jpg"],
        "zz": ["only.jpg"],
    }
    i = 0
    for cls, names in layout.items():
        for name in names:
            p = root / cls / name
            p.parent.mkdir(parents=True, exist_ok=True)
            if name.endswith(".png"):
                Image.open(src[i]).save(p)
            else:
                shutil.copy(src[i], p)
            i += 1
    (root / "B" / "notes.txt").write_text("not an image, and no image extension")
    (root / "a" / "sub" ).mkdir()
    (root / "a" / "sub" / "README").write_text("ignored")
    (root / "stray.jpg").write_bytes(b"files in the root are not samples")
    return root


def image_folder(root):
    ds = torchvision.datasets.ImageFolder(str(root))
    return ds.classes, ds.samples


def records(out):
    ds = ff.Dataset(out)
    return ds, [(bytes(ds[i]["image"]), int(ds[i]["label"])) for i in range(len(ds))]


def test_matches_torchvision_imagefolder(feedpack, folder, tmp_path):
    out = tmp_path / "out"
    res = run(feedpack, "imagefolder", folder, "-o", out)
    assert res.returncode == 0, res.stderr
    classes, samples = image_folder(folder)
    assert classes == [".hidden", "B", "a", "a-b", "a_b", "zz"]
    ds, recs = records(out)
    assert ds.fields["label"].dtype_name == "i64" and not ds.fields["label"].variable
    assert ds.fields["image"].dtype_name == "u8" and ds.fields["image"].variable
    assert len(recs) == len(samples)
    for (data, label), (path, target) in zip(recs, samples):
        assert label == target, path
        assert data == pathlib.Path(path).read_bytes(), path
    assert ds.verify() == ds.version
    m = re.search(r"(\d+) classes; .* (\d+) files without an image extension ignored",
                  res.stdout)
    assert m and int(m.group(1)) == 6 and int(m.group(2)) == 2, res.stdout


def test_inspect_shows_classes_and_largest_image(feedpack, folder, tmp_path):
    out = tmp_path / "out"
    assert run(feedpack, "imagefolder", folder, "-o", out).returncode == 0
    classes, samples = image_folder(folder)
    sizes = [Image.open(p).size for p, _ in samples]
    w, h = max(s[0] for s in sizes), max(s[1] for s in sizes)
    px = max(s[0] * s[1] for s in sizes)
    text = run(feedpack, "inspect", out).stdout
    assert f"image: max {w} wide, {h} high, {px} pixels" in text, text
    listed = re.findall(r"^  (\d+) +(\S+)$", text.split("classes:")[1], re.M)
    assert [(int(i), c) for i, c in listed] == list(enumerate(classes)), text
    ver = run(feedpack, "verify", out)
    assert ver.returncode == 0 and ver.stdout.startswith("ok: %d samples" % len(samples))


def bad_files(folder):
    """A truncated JPEG, garbage named .jpg, a GIF named .png, a BMP."""
    good = (folder / "a" / "1.jpg").read_bytes()
    bad = {
        folder / "a" / "2_truncated.jpg": good[:100],
        folder / "B" / "sub" / "garbage.jpg": b"\x00" * 64,
        folder / "a-b" / "gif.png": b"GIF89a" + b"\x00" * 64,
    }
    for p, data in bad.items():
        p.write_bytes(data)
    bmp = folder / "zz" / "pic.bmp"
    Image.new("RGB", (8, 8)).save(bmp)
    bad[bmp] = bmp.read_bytes()
    return bad


def test_bad_file_refused_with_its_path(feedpack, folder, tmp_path):
    bad = bad_files(folder)
    out = tmp_path / "out"
    res = run(feedpack, "imagefolder", folder, "-o", out)
    assert res.returncode == 1, res.stderr
    line = res.stderr.strip()
    assert line.startswith("feedpack: ") and len(line.splitlines()) == 1, res.stderr
    # the first bad file in ImageFolder's order is named, with the decoder's words
    _, samples = image_folder(folder)
    first = next(p for p, _ in samples if pathlib.Path(p) in bad)
    assert first in line and "JPEG" in line, line
    assert not out.exists()
    assert [n for n in os.listdir(tmp_path) if "tmp" in n] == []


@pytest.mark.parametrize("name,data,words", [
    ("garbage.jpg", b"\x00" * 64, ["garbage.jpg"]),
    ("gif.png", b"GIF89a" + b"\x00" * 64, ["gif.png", "GIF"]),
    ("short.jpg", b"\xff\xd8", ["short.jpg"]),
])
def test_each_kind_of_bad_file_is_named(feedpack, folder, tmp_path, name, data, words):
    (folder / "a" / name).write_bytes(data)
    res = run(feedpack, "imagefolder", folder, "-o", tmp_path / "out")
    assert res.returncode == 1
    for w in words:
        assert w in res.stderr, res.stderr


def test_skip_bad_leaves_them_out_and_lists_them(feedpack, folder, tmp_path):
    bad = bad_files(folder)
    out = tmp_path / "out"
    res = run(feedpack, "imagefolder", folder, "--skip-bad", "-o", out)
    assert res.returncode == 0, res.stderr
    listed = [ln for ln in res.stderr.splitlines() if ln.startswith("feedpack: skipped ")]
    assert sorted(ln.split()[2].rstrip(":") for ln in listed) == sorted(map(str, bad)), \
        res.stderr
    assert re.search(r"\b4 bad files skipped", res.stdout), res.stdout
    classes, samples = image_folder(folder)
    kept = [(p, t) for p, t in samples if pathlib.Path(p) not in bad]
    ds, recs = records(out)
    assert ds.manifest["schema"] and len(recs) == len(kept)
    for (data, label), (path, target) in zip(recs, kept):
        assert label == target and data == pathlib.Path(path).read_bytes(), path
    assert run(feedpack, "verify", out).returncode == 0


def test_empty_class_and_no_classes_refused(feedpack, tmp_path, jpeg_set):
    root = tmp_path / "in"
    (root / "cats").mkdir(parents=True)
    shutil.copy(next(jpeg_set.rglob("*.jpg")), root / "cats" / "c.jpg")
    (root / "dogs").mkdir()
    (root / "dogs" / "readme.txt").write_text("no images here")
    res = run(feedpack, "imagefolder", root, "-o", tmp_path / "out")
    assert res.returncode == 1 and "dogs" in res.stderr and "no image files" in res.stderr
    with pytest.raises(FileNotFoundError):   # ImageFolder refuses it too
        torchvision.datasets.ImageFolder(str(root))
    flat = tmp_path / "flat"
    flat.mkdir()
    res = run(feedpack, "imagefolder", flat, "-o", tmp_path / "out")
    assert res.returncode == 1 and "no class folders" in res.stderr
    assert not (tmp_path / "out").exists()


def test_generated_set_round_trip_and_defaults(feedpack, jpeg_set, tmp_path):
    out = tmp_path / "set"
    res = run(feedpack, "imagefolder", jpeg_set, "-o", out)
    assert res.returncode == 0, res.stderr
    classes, samples = image_folder(jpeg_set)
    ds, recs = records(out)
    assert [(d, t) for d, t in recs] == [(pathlib.Path(p).read_bytes(), t) for p, t in samples]
    assert ds.zstd_level == 1
    assert ds.num_blocks == len(ds) and ds.block_records == 1   # one image per block
    for p, _ in samples:  # the set is what make_jpeg_set.py promises
        w, h = Image.open(p).size
        assert 375 <= min(w, h) <= 500, (p, w, h)


def test_skip_bad_is_imagefolder_only(feedpack, tmp_path):
    res = run(feedpack, "files", tmp_path, "--skip-bad", "-o", tmp_path / "out")
    assert res.returncode == 2 and "--skip-bad" in res.stderr


def test_symlinks_followed_as_imagefolder_and_loops_refused(feedpack, tmp_path, jpeg_set):
    """ImageFolder walks with followlinks=True: a linked image and a linked
    folder of images are samples, as there; a link that loops back is
    refused naming the path, not walked forever."""
    root = tmp_path / "in"
    jpgs = sorted(jpeg_set.rglob("*.jpg"))
    (root / "cats").mkdir(parents=True)
    shutil.copy(jpgs[0], root / "cats" / "a.jpg")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.copy(jpgs[1], elsewhere / "b.jpg")
    shutil.copy(jpgs[2], elsewhere / "c.jpg")
    os.symlink(elsewhere / "b.jpg", root / "cats" / "linked.jpg")
    os.symlink(elsewhere, root / "cats" / "more")
    out = tmp_path / "out"
    res = run(feedpack, "imagefolder", root, "-o", out)
    assert res.returncode == 0, res.stderr
    _, samples = image_folder(root)
    ds, recs = records(out)
    assert len(recs) == len(samples) == 4
    for (data, _), (path, _) in zip(recs, samples):
        assert data == pathlib.Path(path).read_bytes(), path
    os.symlink(root / "cats", root / "cats" / "loop")
    res = run(feedpack, "imagefolder", root, "-o", tmp_path / "out2")
    assert res.returncode == 1
    # the kernel's bound on links in a path (ELOOP) or ours on depth, whichever first
    assert "cats/loop/loop" in res.stderr, res.stderr
    assert ("Too many levels of symbolic links" in res.stderr or
            "nested too deep (a symlink loop?)" in res.stderr), res.stderr
