"""core/image_*.c against PIL and torchvision.

The C side runs through tests/images/image_dump (a test-only CLI: decode a
box at a DCT scale, optionally resample it); the fixtures are those
tests/images/make_fixtures.py writes into $FEED_IMAGES (a CTest fixture),
including small real photographs cut from Debian's wallpapers.

- decode equals PIL's (Debian's PIL runs the same libjpeg-turbo) bit for
  bit on every fixture, CMYK included, and channels=1 equals PIL's
  convert('L');
- the resample of a box equals torchvision's
  resized_crop(antialias=True) (float, rounded) on that box within a mean
  absolute difference of 1.5 levels, flipped or not;
- decoding with libjpeg's DCT scaling (img_scale_for) stays >= 30 dB PSNR
  from a full-resolution decode + the same resample;
- every bad image is refused with its code and the decoder's words.
"""

import errno
import os
import pathlib
import subprocess

import numpy as np
import pytest

from conftest import BIN, SRC

Image = pytest.importorskip("PIL.Image")
torch = pytest.importorskip("torch")
TF = pytest.importorskip("torchvision.transforms.functional")

IMAGES = pathlib.Path(os.environ.get("FEED_IMAGES", SRC / "build" / "images"))
JPEGS = ["rgb420.jpg", "rgb422.jpg", "rgb444.jpg", "progressive.jpg", "gray.jpg", "cmyk.jpg",
         "small.jpg", "tiny.jpg"]
PNGS = ["rgb8.png", "gray8.png", "palette.png", "rgba.png", "gray_alpha.png"]
# 16-bit and interlaced PNGs whose decode is that of an 8-bit plain one
PNG_SAME = {"rgb16.png": "rgb8.png", "interlaced.png": "rgb8.png", "gray16.png": "gray8.png"}


def photos():
    return sorted(p.name for p in IMAGES.glob("photo_*.jpg"))


def dump(name, *args):
    """image_dump's (pixels as H x W x C array, header fields) or raises."""
    r = subprocess.run([str(BIN / "image_dump"), str(IMAGES / name), *map(str, args)],
                       capture_output=True, check=False)
    if r.returncode:
        raise RuntimeError(r.stderr.decode().strip())
    nl = r.stdout.index(b"\n")
    head = r.stdout[:nl].split()
    w, h, c = (int(v) for v in head[:3])
    px = np.frombuffer(r.stdout[nl + 1:], np.uint8).reshape(h, w, c)
    return px, [float(v) for v in head[3:]]


def pil_rgb(name):
    return np.asarray(Image.open(IMAGES / name).convert("RGB"))


@pytest.fixture(scope="module", autouse=True)
def need_fixtures():
    if not (IMAGES / "rgb420.jpg").exists() or not os.access(BIN / "image_dump", os.X_OK):
        pytest.fail(f"no fixtures in {IMAGES} or no {BIN}/image_dump "
                    "(run through ctest, which makes them)")


@pytest.mark.parametrize("name", JPEGS + PNGS + list(PNG_SAME))
def test_image_decode_equals_pil(name):
    ref = pil_rgb(PNG_SAME.get(name, name))
    got, _ = dump(name)
    assert got.shape == ref.shape
    assert np.array_equal(got, ref), f"{name}: max diff {np.abs(got.astype(int) - ref).max()}"
    gray, _ = dump(name, "-c", 1)
    ref_l = np.asarray(Image.fromarray(ref).convert("L"))
    assert np.array_equal(gray[..., 0], ref_l)


def test_image_decode_photos_equal_pil():
    assert len(photos()) >= 4
    for name in photos():
        got, _ = dump(name)
        assert np.array_equal(got, pil_rgb(name)), name


def boxes(rng, w, h, n):
    for _ in range(n):
        bw = int(rng.integers(max(1, w // 5), w + 1))
        bh = int(rng.integers(max(1, h // 5), h + 1))
        yield int(rng.integers(0, w - bw + 1)), int(rng.integers(0, h - bh + 1)), bw, bh


SIZES = [(224, 224), (100, 37), (300, 350), (64, 64), (1, 5)]


def _aa_one_column_broken():
    """Whether this torch's antialiased bilinear kernel on float tensors
    (torchvision's tensor resize casts uint8 to float) gives every row of a
    one-column output the first row's value: torch 2.15 does (1.13 and
    2.15's uint8 kernel do not), which made 60x47 -> 1x5 crops 10-30
    levels "off" with feedd, PIL and torch 1.13 agreeing."""
    x = torch.arange(8.0).reshape(1, 1, 4, 2)
    y = torch.nn.functional.interpolate(x, size=(2, 1), mode="bilinear", antialias=True,
                                        align_corners=False)
    return bool(y[0, 0, 0, 0] == y[0, 0, 1, 0])


def resized_crop_ref(t, x, y, bw, bh, ow, oh):
    """torchvision's resized_crop (antialias=True); for a one-column output
    under a torch whose kernel repeats the first row there, the same
    separable filter on the transposed image (rows and columns swapped)."""
    if ow == 1 and oh > 1 and _aa_one_column_broken():
        return TF.resized_crop(t.transpose(1, 2), x, y, bw, bh, [ow, oh],
                               antialias=True).transpose(1, 2)
    return TF.resized_crop(t, y, x, bh, bw, [oh, ow], antialias=True)


@pytest.mark.parametrize("name", ["rgb420.jpg", "gray.jpg", "palette.png"] + ["photo"])
def test_image_resample_matches_torchvision(name):
    rng = np.random.default_rng(5)
    names = photos() if name == "photo" else [name]
    for n in names:
        full = pil_rgb(n)
        t = torch.from_numpy(full.copy()).permute(2, 0, 1)
        for k, (x, y, bw, bh) in enumerate(boxes(rng, full.shape[1], full.shape[0], 10)):
            ow, oh = SIZES[k % len(SIZES)]
            flip = k % 2 == 1
            ref = resized_crop_ref(t, x, y, bw, bh, ow, oh)
            if flip:
                ref = TF.hflip(ref)
            ref = ref.permute(1, 2, 0).numpy().astype(int)
            got, _ = dump(n, "-b", f"{x},{y},{bw},{bh}", "-o", f"{ow}x{oh}",
                          *(["-f"] if flip else []))
            diff = np.abs(got.astype(int) - ref)
            assert diff.mean() <= 1.5, f"{n} box {x},{y} {bw}x{bh} -> {ow}x{oh}: {diff.mean()}"
            assert diff.max() <= 3, f"{n} box {x},{y} {bw}x{bh} -> {ow}x{oh}: max {diff.max()}"


@pytest.mark.parametrize("name", JPEGS + ["photo"])
def test_image_dct_scaled_psnr(name):
    """Per image, over a dozen boxes and output sizes (PSNR of all their
    pixels together: a 1x1 output alone says little)."""
    rng = np.random.default_rng(9)
    names = photos() if name == "photo" else [name]
    scaled = 0
    for n in names:
        full, _ = dump(n)
        h, w = full.shape[:2]
        se, count = 0.0, 0
        for x, y, bw, bh in boxes(rng, w, h, 12):
            # 1/4, 1/9 of a side: scaled (img_scale_for wants box/s >= 2 x out)
            ow = max(1, bw // int(rng.choice([2, 3, 4, 9])))
            oh = max(1, bh // int(rng.choice([3, 4, 9])))
            ref, _ = dump(n, "-b", f"{x},{y},{bw},{bh}", "-o", f"{ow}x{oh}")
            got, meta = dump(n, "-b", f"{x},{y},{bw},{bh}", "-o", f"{ow}x{oh}", "-s", "auto")
            scaled += meta[-1] > 1
            se += ((got.astype(float) - ref) ** 2).sum()
            count += got.size
        psnr = 99.0 if se == 0 else 10 * np.log10(255.0 ** 2 * count / se)
        assert psnr >= 30, f"{n}: {psnr:.1f} dB"
    if name != "tiny.jpg":  # 7x5: nothing to scale
        assert scaled > 0, "no box was decoded with DCT scaling"


BAD = [
    ("bad_truncated.jpg", errno.EBADMSG, "JPEG: truncated: no end-of-image marker"),
    ("bad_truncated_header.jpg", errno.EBADMSG, "JPEG: Premature end of JPEG file"),
    ("bad_garbage.jpg", errno.EBADMSG, "JPEG: Bogus marker length"),
    ("bad_truncated.png", errno.EBADMSG, "PNG: end of stream"),
    ("bad_crc.png", errno.EBADMSG, "PNG: invalid chunk checksum"),
    ("bomb.jpg", errno.E2BIG, "65000x65000 is past max_pixels"),
    ("bomb.png", errno.E2BIG, "60000x60000 is past max_pixels"),
    ("huge_dims.png", errno.E2BIG, "100000x10"),
    ("other.gif", errno.ENOTSUP, "GIF image: only JPEG and PNG are decoded"),
    ("other.bmp", errno.ENOTSUP, "BMP image: only JPEG and PNG are decoded"),
    ("precision12.jpg", errno.ENOTSUP, "JPEG: Unsupported JPEG data precision 12"),
]


@pytest.mark.parametrize("name,code,words", BAD)
def test_image_bad_refused(name, code, words):
    with pytest.raises(RuntimeError) as e:
        dump(name)
    msg = str(e.value)
    assert msg.startswith(f"error {-code} "), msg
    assert words in msg
