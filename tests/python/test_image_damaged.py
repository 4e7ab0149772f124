"""Damaged JPEGs: feedd decodes what PIL decodes, to PIL's pixels, and
refuses what PIL refuses (core/image_decode.c, issue 20).

The fixtures are made at test time by tests/images/make_fixtures.py:
damaged_*.jpg carry damage libjpeg only warns about (scrambled entropy
data, a stray restart marker, a baseline file cut mid-scan and a
progressive one cut after its first scan, each closed by an EOI, junk
between markers, bytes past the end); bad_*.jpg carry damage PIL refuses
(cut with no EOI: "image file is truncated"; a bogus marker: "broken data
stream"). torchvision's ImageFolder loader is PIL with its defaults
(LOAD_TRUNCATED_IMAGES off), so it agrees with PIL on every one.

Each damaged file is compared on every decode path of image_dump: the
whole image, boxes (rows above skipped, columns cropped), and libjpeg's
DCT scaling (against PIL's draft(), which asks libjpeg for the same
scale), the whole image and boxes.
"""

import errno
import math
import subprocess

import numpy as np
import pytest

from conftest import BIN
from test_image_torchvision import IMAGES, dump, need_fixtures  # noqa: F401

Image = pytest.importorskip("PIL.Image")
folder = pytest.importorskip("torchvision.datasets.folder")

# (file, does libjpeg warn)
DAMAGED = [
    ("damaged_scrambled.jpg", True),
    ("damaged_marker.jpg", True),
    ("damaged_cut_scan.jpg", True),
    ("damaged_progressive_first_scan.jpg", False),
    ("damaged_progressive_mid_scan.jpg", True),
    ("damaged_junk.jpg", True),
    ("damaged_trailing.jpg", False),
]
# (file, the decoder's words)
REFUSED = [
    ("bad_truncated.jpg", "JPEG: truncated: no end-of-image marker"),
    ("bad_no_eoi.jpg", "JPEG: truncated: no end-of-image marker"),
    ("bad_progressive_cut.jpg", "JPEG: truncated: no end-of-image marker"),
    ("bad_garbage.jpg", "JPEG: Bogus marker length"),
    ("bad_marker_after_scan.jpg", "JPEG: Bogus marker length"),
]


def pil(name, scale=1):
    im = Image.open(IMAGES / name)
    if scale > 1:
        im.draft("RGB", (im.width // scale, im.height // scale))
    return np.asarray(im.convert("RGB"))


def dump_warn(name, *args):
    """image_dump's stderr (the warnings line) on a decode that succeeds."""
    r = subprocess.run([str(BIN / "image_dump"), str(IMAGES / name), *map(str, args)],
                       capture_output=True, check=False)
    assert r.returncode == 0, r.stderr.decode()
    return r.stderr.decode()


def some_boxes(w, h):
    rng = np.random.default_rng(len(str(w * h)))
    out = [(0, 0, w, h), (0, 0, 17, 9), (w - 40, h - 30, 40, 30), (0, h // 2, w, h - h // 2),
           (w // 3, 0, w // 3, h // 4)]
    for _ in range(8):
        bw = int(rng.integers(1, w + 1))
        bh = int(rng.integers(1, h + 1))
        out.append((int(rng.integers(0, w - bw + 1)), int(rng.integers(0, h - bh + 1)), bw, bh))
    return out


@pytest.mark.parametrize("name,warns", DAMAGED)
def test_image_damaged_decodes_as_pil(name, warns):
    ref = pil(name)
    got, _ = dump(name)
    assert got.shape == ref.shape
    assert np.array_equal(got, ref), f"{name}: {np.count_nonzero(got != ref)} bytes differ"
    gray, _ = dump(name, "-c", 1)
    assert np.array_equal(gray[..., 0], np.asarray(Image.fromarray(ref).convert("L")))
    # torchvision's default loader is PIL's defaults: it reads these too
    assert np.array_equal(np.asarray(folder.default_loader(str(IMAGES / name))), ref)
    said = dump_warn(name)
    assert ("Corrupt JPEG data" in said) == warns, said


@pytest.mark.parametrize("name,warns", DAMAGED)
def test_image_damaged_boxes_as_pil(name, warns):
    ref = pil(name)
    h, w = ref.shape[:2]
    for x, y, bw, bh in some_boxes(w, h):
        got, (bx, by, _, _, _) = dump(name, "-b", f"{x},{y},{bw},{bh}")
        bx, by = int(bx), int(by)  # the box in the decoded view (which may be wider)
        assert np.array_equal(got[by:by + bh, bx:bx + bw], ref[y:y + bh, x:x + bw]), \
            f"{name} box {x},{y} {bw}x{bh}"


@pytest.mark.parametrize("scale", [2, 4, 8])
@pytest.mark.parametrize("name,warns", DAMAGED)
def test_image_damaged_dct_scaled_as_pil(name, warns, scale):
    ref = pil(name, scale)
    got, _ = dump(name, "-s", scale)
    assert got.shape == ref.shape
    assert np.array_equal(got, ref), f"{name} 1/{scale}: {np.count_nonzero(got != ref)} differ"
    h, w = pil(name).shape[:2]
    for x, y, bw, bh in some_boxes(w, h):
        got, (bx, by, _, _, s) = dump(name, "-b", f"{x},{y},{bw},{bh}", "-s", scale)
        assert s == scale
        x0, y0 = round(x / scale - bx), round(y / scale - by)  # where the view starts
        assert math.isclose(x0, x / scale - bx) and math.isclose(y0, y / scale - by)
        # the scaled pixels the box touches
        c0, c1 = x // scale, -(-(x + bw) // scale)
        r0, r1 = y // scale, -(-(y + bh) // scale)
        assert np.array_equal(got[r0 - y0:r1 - y0, c0 - x0:c1 - x0], ref[r0:r1, c0:c1]), \
            f"{name} 1/{scale} box {x},{y} {bw}x{bh}"


@pytest.mark.parametrize("name,words", REFUSED)
def test_image_damaged_refused_as_pil(name, words):
    with pytest.raises(OSError):  # "image file is truncated" or "broken data stream"
        pil(name)
    with pytest.raises(OSError):
        folder.default_loader(str(IMAGES / name))
    for args in [(), ("-s", 2), ("-b", "0,150,301,53"), ("-b", "0,150,301,53", "-s", 4)]:
        with pytest.raises(RuntimeError) as e:
            dump(name, *args)
        msg = str(e.value)
        assert msg.startswith(f"error {-errno.EBADMSG} "), msg
        assert words in msg, msg


@pytest.mark.parametrize("name", [n for n, _ in REFUSED])
@pytest.mark.parametrize("scale", [1, 4])
def test_image_damaged_refused_in_any_box(name, scale):
    """Truncation is found before any row, a progressive file's scans are all
    read up front, and a baseline file whose scan data runs into anything
    but its end is read to the bottom: a box far above the damage is
    refused too, as PIL refuses the file."""
    with pytest.raises(RuntimeError):
        dump(name, "-b", "0,0,16,8", "-s", scale)
