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

Pixels of damaged files are what the libjpeg-turbo in use makes of the
damage, and versions differ there (PyPI's Pillow 13 bundles libjpeg-turbo
3.2.0, whose two damaged progressive files differ from Debian's 2.1.5,
which feedd links): the pixel comparisons run only when PIL's
libjpeg-turbo is the one feedd loaded (`image_dump -V`), and skip naming
both otherwise. Refusals are compared always.
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


def _libjpeg_versions():
    """(feedd's libjpeg-turbo version, PIL's): feedd's as the library this
    build loads says it (image_dump -V), PIL's as PIL.features reports."""
    from PIL import features
    r = subprocess.run([str(BIN / "image_dump"), "-V"], capture_output=True, text=True,
                       check=True)
    return r.stdout.split()[0], features.version("libjpeg_turbo")


@pytest.fixture(scope="module")
def same_libjpeg():
    """Skips a test comparing damaged files' pixels unless PIL decodes with
    the libjpeg-turbo feedd loaded."""
    ours, theirs = _libjpeg_versions()
    if ours != theirs:
        pytest.skip(f"PIL's libjpeg-turbo is {theirs}, feedd's {ours}: a damaged file's "
                    f"pixels are the library's choice, bit-exact only against the same one")


def test_image_dump_reports_the_libjpeg_it_loaded():
    """image_dump -V names a version and the library file holding it."""
    r = subprocess.run([str(BIN / "image_dump"), "-V"], capture_output=True, text=True,
                       check=True)
    version, where = r.stdout.split()
    assert [p.isdigit() for p in version.split(".")] == [True] * 3, r.stdout
    assert "libjpeg" in where or where == "headers", r.stdout

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
def test_image_damaged_decodes_as_pil(name, warns, same_libjpeg):
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
def test_image_damaged_boxes_as_pil(name, warns, same_libjpeg):
    ref = pil(name)
    h, w = ref.shape[:2]
    for x, y, bw, bh in some_boxes(w, h):
        got, (bx, by, _, _, _) = dump(name, "-b", f"{x},{y},{bw},{bh}")
        bx, by = int(bx), int(by)  # the box in the decoded view (which may be wider)
        assert np.array_equal(got[by:by + bh, bx:bx + bw], ref[y:y + bh, x:x + bw]), \
            f"{name} box {x},{y} {bw}x{bh}"


@pytest.mark.parametrize("scale", [2, 4, 8])
@pytest.mark.parametrize("name,warns", DAMAGED)
def test_image_damaged_dct_scaled_as_pil(name, warns, scale, same_libjpeg):
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


def damage(rng, d):
    """One random kind of damage to the JPEG bytes d: a cut (with or
    without an EOI after it), random bytes in the scan data, a few bytes
    changed anywhere, junk before a marker, a piece of scan data gone, or a
    stray marker in the scan data."""
    sos = d.find(b"\xff\xda")
    k = rng.randrange(7)
    if k == 0:
        return d[:rng.randrange(2, len(d))]
    if k == 1:
        return d[:rng.randrange(sos, len(d))] + b"\xff\xd9"
    if k == 2:
        g, at = bytearray(d), rng.randrange(sos + 20, len(d) - 2)
        for i in range(at, min(at + rng.randrange(1, 300), len(d) - 2)):
            g[i] = rng.randrange(256)
        return bytes(g)
    if k == 3:
        g = bytearray(d)
        for _ in range(rng.randrange(1, 4)):
            g[rng.randrange(2, len(d))] = rng.randrange(256)
        return bytes(g)
    if k == 4:
        marks = [i for i in range(2, len(d) - 1) if d[i] == 0xFF and d[i + 1] not in (0, 0xFF)
                 and not 0xD0 <= d[i + 1] <= 0xD7]
        i = rng.choice(marks)
        return d[:i] + bytes(rng.randrange(255) for _ in range(rng.randrange(1, 20))) + d[i:]
    if k == 5:
        a = rng.randrange(sos + 20, len(d) - 10)
        return d[:a] + d[rng.randrange(a, min(a + 2000, len(d) - 2)):]
    at = rng.randrange(sos + 20, len(d) - 2)
    return d[:at] + bytes([0xFF, rng.choice([0xD0, 0xD3, 0xD9, 0xC4, 0xDB, 0xDA, 0xE1, 0xC0])]) + \
        d[at:]


def test_image_random_damage_as_pil(tmp_path, same_libjpeg):
    """Random damage to baseline, progressive, gray and CMYK files: feedd
    decodes exactly the files PIL decodes, to PIL's pixels, in full, in a
    box and DCT-scaled, and refuses the others in every path."""
    import io
    import random
    rng = random.Random(20)
    srcs = [(IMAGES / n).read_bytes() for n in ["rgb420.jpg", "progressive.jpg", "gray.jpg",
                                                   "cmyk.jpg", "photo_00.jpg"]]
    decoded = refused = 0
    for t in range(150):
        d = damage(rng, rng.choice(srcs))
        name = f"random_{t}.jpg"
        (tmp_path / name).write_bytes(d)
        path = str(tmp_path / name)
        try:
            ref = np.asarray(Image.open(io.BytesIO(d)).convert("RGB"))
        except OSError:
            refused += 1
            for args in [(), ("-b", "0,0,8,8"), ("-b", "0,0,8,8", "-s", 2)]:
                r = subprocess.run([str(BIN / "image_dump"), path, *map(str, args)],
                                   capture_output=True)
                assert r.returncode == 2, f"damage {t}: PIL refuses it, feedd decodes {args}"
            continue
        decoded += 1
        got = dump_path(path)
        assert np.array_equal(got, ref), f"damage {t}: pixels differ"
        h, w = ref.shape[:2]
        x, y = rng.randrange(w // 2), rng.randrange(h // 2)
        box = dump_path(path, "-b", f"{x},{y},{w // 3 + 1},{h // 3 + 1}", keep_box=True)
        assert np.array_equal(box, ref[y:y + h // 3 + 1, x:x + w // 3 + 1]), f"damage {t}: box"
    assert decoded > 40 and refused > 40, (decoded, refused)


def dump_path(path, *args, keep_box=False):
    """image_dump on a path: the pixels (with keep_box, the box's alone)."""
    r = subprocess.run([str(BIN / "image_dump"), path, *map(str, args)], capture_output=True)
    assert r.returncode == 0, r.stderr.decode()
    nl = r.stdout.index(b"\n")
    head = r.stdout[:nl].split()
    w, h, c = (int(v) for v in head[:3])
    px = np.frombuffer(r.stdout[nl + 1:], np.uint8).reshape(h, w, c)
    if keep_box:
        bx, by, bw, bh = (int(float(v)) for v in head[3:7])
        px = px[by:by + bh, bx:bx + bw]
    return px
