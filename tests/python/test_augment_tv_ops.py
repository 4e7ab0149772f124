"""core/augment_tv.c's ops and the containers against torchvision.

vflip, pad and random_perspective are compared pixel by pixel with
torchvision.transforms.functional on uint8 tensors (Debian's torchvision
0.14 has them); rotate without fill with F.rotate's fill=None. The random
ops' parameters come from the probe (`check_augment --pixel`, which prints
each basic op a sample drew: the end points of a perspective, the
transforms a container chose) and are checked against torchvision's
ranges and rates. gaussian_noise is v2-only (GaussianNoise): its reference
here is numpy following v2's gaussian_noise_image (x + mean + sigma * n,
clamped to [0, 1]) with ToDtype(uint8, scale=True)'s conversion back; the
comparison with torchvision.transforms.v2 itself skips where v2 is missing
(run by scripts/test-torch-latest).
"""

import subprocess

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")
import torchvision.transforms.functional as F  # noqa: E402
from torchvision.transforms import InterpolationMode  # noqa: E402

FIELDS = ("op kind f bits ksize out_c angle tx ty scale shx shy cx cy interp fill "
          "i j h w value random pad_l pad_t pad_r pad_b pad_mode "
          "pc0 pc1 pc2 pc3 pc4 pc5 pc6 pc7 mean clip nomask").split()
K_INV, K_EQ, K_POST, K_AFFINE, K_VFLIP, K_PAD, K_PERSP, K_NOISE = 10, 8, 6, 13, 15, 16, 17, 18


def run_pixel(probe, pipeline, img, sample=0, seed=3):
    h, w, c = img.shape
    res = subprocess.run([probe, "--pixel", pipeline, str(h), str(w), str(c), str(seed), "0",
                          str(sample)], input=np.ascontiguousarray(img).tobytes(),
                         capture_output=True, check=False)
    assert res.returncode == 0, res.stderr.decode()
    head, rest = res.stdout.split(b"\n", 1)
    oh, ow, oc, n = (int(v) for v in head.split())
    lines = []
    for _ in range(n):
        line, rest = rest.split(b"\n", 1)
        vals = [float(v) for v in line.split()]
        assert len(vals) == len(FIELDS), line
        lines.append(dict(zip(FIELDS, vals)))
    return lines, np.frombuffer(rest, dtype=np.uint8).reshape(oh, ow, oc)


def params(probe, pipeline, shape, n, seed=5):
    """The basic ops samples 0..n-1 drew: {sample: [line, ...]}."""
    h, w, c = shape
    res = subprocess.run([probe, "--pixel-params", pipeline, str(h), str(w), str(c), str(seed),
                          str(n)], capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr
    out = {k: [] for k in range(n)}
    for line in res.stdout.splitlines():
        vals = line.split()
        out[int(vals[0])].append(dict(zip(FIELDS, (float(v) for v in vals[1:]))))
    return out


def chw(img):
    return torch.from_numpy(np.array(img)).permute(2, 0, 1).contiguous()


def hwc(t):
    return t.permute(1, 2, 0).contiguous().numpy()


@pytest.fixture(scope="module")
def images():
    """A smooth RGB picture (edges matter to warps) and a noisy gray one."""
    rng = np.random.default_rng(7)
    y, x = np.mgrid[0:37, 0:53]
    rgb = np.stack([(x * 4) % 256, (y * 6) % 256, ((x + y) * 3) % 256], axis=-1)
    gray = rng.integers(0, 256, size=(29, 31, 1))
    return [rgb.astype(np.uint8), gray.astype(np.uint8)]


def close(got, want, what, share=0.0):
    """Within 1 everywhere, or all but `share` of the pixels (ties of
    nearest sampling, float rounding at a pixel's edge)."""
    assert got.shape == want.shape, f"{what}: {got.shape} vs {want.shape}"
    diff = np.abs(got.astype(int) - want.astype(int))
    bad = float((diff > 1).mean())
    assert bad <= share, f"{what}: {bad:.4%} of pixels more than 1 apart, worst {diff.max()}"


def test_vflip_matches_torchvision(augment_probe, images):
    for img in images:
        _, got = run_pixel(augment_probe, "vflip(p=1)", img)
        assert np.array_equal(got, hwc(F.vflip(chw(img))))
        _, same = run_pixel(augment_probe, "random_vertical_flip(p=0)", img)
        assert np.array_equal(same, img)


def test_vflip_rate_is_p(augment_probe):
    drawn = params(augment_probe, "vflip(p=0.3)", (4, 4, 1), 2000)
    rate = sum(len(v) for v in drawn.values()) / 2000
    assert abs(rate - 0.3) < 0.04, rate


@pytest.mark.parametrize("mode", ["constant", "edge", "reflect", "symmetric"])
def test_pad_matches_torchvision(augment_probe, images, mode):
    for img in images:
        for pad, fill in (((3,), 0), ((1, 4), 200), ((2, 0, 5, 1), 17)):
            text = f"pad(({', '.join(map(str, pad))},), fill={fill}, padding_mode={mode})"
            _, got = run_pixel(augment_probe, text, img)
            want = hwc(F.pad(chw(img), list(pad), fill=fill, padding_mode=mode))
            assert np.array_equal(got, want), f"{text} on {img.shape}"


def test_pad_then_pixel_ops_share_a_stage(augment_probe, images):
    img = images[0]
    _, got = run_pixel(augment_probe, "pad(6, fill=9) | invert | vflip(p=1)", img)
    want = F.vflip(F.invert(F.pad(chw(img), [6], fill=9)))
    assert np.array_equal(got, hwc(want))


def test_rotate_without_fill_is_F_rotate_fill_none(augment_probe, images):
    """F.rotate's default fill=None: zero padding without the mask blend
    (different from fill=0 at the borders under bilinear)."""
    for img in images:
        for angle in (17.0, -40.5, 75.0):
            lines, got = run_pixel(augment_probe, f"rotate({angle}, interpolation=bilinear)", img)
            assert lines[0]["nomask"] == 1
            want = hwc(F.rotate(chw(img), angle, interpolation=InterpolationMode.BILINEAR))
            close(got, want, f"rotate {angle}")
            _, masked = run_pixel(augment_probe, f"rotate({angle}, interpolation=bilinear, "
                                  "fill=0)", img)
            masked_want = hwc(F.rotate(chw(img), angle, interpolation=InterpolationMode.BILINEAR,
                                       fill=[0.0] * img.shape[2]))
            close(masked, masked_want, f"rotate {angle} fill=0")


def corners(line):
    return [[int(line[f"pc{2 * k}"]), int(line[f"pc{2 * k + 1}"])] for k in range(4)]


def test_random_perspective_matches_F_perspective(augment_probe, images):
    for img in images:
        h, w, c = img.shape
        start = [[0, 0], [w - 1, 0], [w - 1, h - 1], [0, h - 1]]
        for sample in range(6):
            for interp, mode in (("bilinear", InterpolationMode.BILINEAR),
                                 ("nearest", InterpolationMode.NEAREST)):
                text = f"random_perspective(0.6, p=1, interpolation={interp}, fill=30)"
                lines, got = run_pixel(augment_probe, text, img, sample=sample)
                assert len(lines) == 1 and lines[0]["kind"] == K_PERSP
                want = F.perspective(chw(img), start, corners(lines[0]), interpolation=mode,
                                     fill=[30.0] * c)
                close(got, hwc(want), f"{text} sample {sample}", share=0.003)


def test_random_perspective_corners_in_torchvision_ranges(augment_probe):
    """RandomPerspective.get_params: each corner within distortion_scale of
    half the side, every value of each range drawn; p applies."""
    h, w, ds = 20, 30, 0.5
    hh, hw = h // 2, w // 2
    dx, dy = int(ds * hw), int(ds * hh)
    ranges = [(0, dx), (0, dy), (w - dx - 1, w - 1), (0, dy), (w - dx - 1, w - 1),
              (h - dy - 1, h - 1), (0, dx), (h - dy - 1, h - 1)]
    drawn = params(augment_probe, "random_perspective(p=0.5)", (h, w, 3), 3000)
    picked = [v[0] for v in drawn.values() if v]
    assert abs(len(picked) / 3000 - 0.5) < 0.04
    for k, (lo, hi) in enumerate(ranges):
        seen = {int(line[f"pc{k}"]) for line in picked}
        assert seen == set(range(lo, hi + 1)), (k, sorted(seen), lo, hi)


def noise_reference(img, mean, sigma, clip, normals):
    x = img.astype(np.float32) / np.float32(255) + (np.float32(mean) + normals * np.float32(sigma))
    if clip:
        x = np.clip(x, 0, 1)
    return np.clip(x * np.float32(255 + 1 - 1e-3), 0, 255).astype(np.uint8)


def test_gaussian_noise_shift_and_clip(augment_probe, images):
    for img in images:
        _, same = run_pixel(augment_probe, "gaussian_noise(sigma=0)", img)
        assert np.array_equal(same, img)
        for mean in (0.1, -0.25):
            _, got = run_pixel(augment_probe, f"gaussian_noise(mean={mean}, sigma=0)", img)
            want = noise_reference(img, mean, 0, True, np.zeros(img.shape, np.float32))
            assert np.abs(got.astype(int) - want.astype(int)).max() <= 1


def test_gaussian_noise_statistics(augment_probe):
    img = np.full((64, 64, 3), 128, np.uint8)
    for sigma in (0.02, 0.1):
        _, got = run_pixel(augment_probe, f"gaussian_noise(sigma={sigma})", img, sample=4)
        d = (got.astype(np.float64) - 128) / 255
        assert abs(d.mean()) < 0.01 and abs(d.std() - sigma) < 0.1 * sigma, (d.mean(), d.std())
        _, other = run_pixel(augment_probe, f"gaussian_noise(sigma={sigma})", img, sample=5)
        assert not np.array_equal(got, other)
    # clip: noise past the ends saturates
    _, hi = run_pixel(augment_probe, "gaussian_noise(mean=0.9, sigma=0.01)", img)
    assert (hi == 255).all()


def test_gaussian_noise_against_v2():
    v2 = pytest.importorskip("torchvision.transforms.v2.functional",
                             reason="torchvision.transforms.v2 missing (torchvision < 0.15): "
                                    "scripts/test-torch-latest runs this")
    if not hasattr(v2, "gaussian_noise"):
        pytest.skip("torchvision.transforms.v2.functional.gaussian_noise missing (< 0.20)")
    img = np.random.default_rng(3).integers(0, 256, (3, 9, 11)).astype(np.uint8)
    x = torch.from_numpy(img).float() / 255
    torch.manual_seed(0)
    want = v2.gaussian_noise(x, mean=0.05, sigma=0.2, clip=True)
    torch.manual_seed(0)
    normals = torch.randn_like(x).numpy()
    ref = noise_reference(img, 0.05, 0.2, True, normals)
    conv = (want * (255 + 1 - 1e-3)).to(torch.uint8).numpy()
    assert np.abs(conv.astype(int) - ref.astype(int)).max() <= 1


def test_random_apply_rate_and_pixels(augment_probe, images):
    drawn = params(augment_probe, "random_apply([invert, posterize(3)], p=0.3)", (8, 8, 3), 2000)
    applied = [v for v in drawn.values() if v]
    assert abs(len(applied) / 2000 - 0.3) < 0.04
    assert all([int(l["kind"]) for l in v] == [K_INV, K_POST] for v in applied)
    img = images[0]
    for sample in range(8):
        lines, got = run_pixel(augment_probe, "random_apply([invert, vflip(p=1)], p=0.5)", img,
                               sample=sample)
        want = hwc(F.vflip(F.invert(chw(img)))) if lines else img
        assert np.array_equal(got, want)


def test_random_choice_weights(augment_probe):
    drawn = params(augment_probe, "random_choice([invert, equalize], p=(0.2, 0.8))", (8, 8, 3),
                   3000)
    kinds = [v[0]["kind"] for v in drawn.values()]
    assert all(len(v) == 1 for v in drawn.values())
    assert abs(kinds.count(K_INV) / 3000 - 0.2) < 0.03
    uniform = params(augment_probe, "random_choice([invert, equalize, vflip(p=1)])", (8, 8, 3),
                     3000)
    for k in (K_INV, K_EQ, K_VFLIP):
        share = sum(v[0]["kind"] == k for v in uniform.values()) / 3000
        assert abs(share - 1 / 3) < 0.04, (k, share)


def test_random_order_is_a_permutation(augment_probe, images):
    drawn = params(augment_probe, "random_order([invert, equalize, vflip(p=1)])", (8, 8, 3), 3000)
    orders = {tuple(int(l["kind"]) for l in v) for v in drawn.values()}
    assert len(orders) == 6 and all(sorted(o) == sorted((K_INV, K_EQ, K_VFLIP)) for o in orders)
    img = images[0]
    fns = {K_INV: F.invert, K_EQ: F.equalize, K_VFLIP: F.vflip}
    for sample in range(6):
        lines, got = run_pixel(augment_probe, "random_order([invert, equalize, vflip(p=1)])", img,
                               sample=sample)
        t = chw(img)
        for line in lines:
            t = fns[int(line["kind"])](t)
        assert np.array_equal(got, hwc(t))


def _fixture_dir(feed_bin):
    import os
    import pathlib
    d = pathlib.Path(os.environ.get("FEED_IMAGES", feed_bin.parent / "images"))
    if not (d / "photo_00.jpg").exists():
        pytest.skip(f"no image fixtures in {d} (tests/images/make_fixtures.py makes them)")
    return d


@pytest.mark.parametrize("name", ["photo_00.jpg", "photo_04.jpg", "photo_05.jpg"])
def test_exact_decode_matches_resize_center_crop(augment_probe, feed_bin, name):
    """decode(exact=true) never decodes at a reduced DCT scale: Resize(N) +
    CenterCrop(S) within 1 level inside the crop (its outermost pixels
    are resampled from the crop alone); the default may be further off where
    it decodes at 1/2 or 1/4 (measured: up to 10 levels inside)."""
    Image = pytest.importorskip("PIL.Image")
    path = _fixture_dir(feed_bin) / name
    img = Image.open(path).convert("RGB")
    for short, size in ((256, 224), (96, 96), (64, 56)):
        ref = np.asarray(F.center_crop(F.resize(img, short, antialias=True), [size, size]))
        res = subprocess.run([augment_probe, "--decode", f"decode(exact=true) | "
                              f"resize(short={short}) | center_crop(size={size})", str(path),
                              "3", "1", "0"], capture_output=True, check=False)
        assert res.returncode == 0, res.stderr.decode()
        ours = np.frombuffer(res.stdout.split(b"\n", 1)[1], np.uint8).reshape(size, size, 3)
        diff = np.abs(ours.astype(int) - ref.astype(int))
        assert diff[1:-1, 1:-1].max() <= 1, f"{name} {short}/{size}: {diff[1:-1, 1:-1].max()}"
        assert diff.mean() < 0.2, f"{name} {short}/{size}: mean {diff.mean():.3f}"


def run_float(probe, pipeline, img, sample, dtype=np.float32):
    """--pixel on a pipeline ending in normalize: (erase lines, float array
    in the batch's shape)."""
    h, w, c = img.shape
    res = subprocess.run([probe, "--pixel", pipeline, str(h), str(w), str(c), "3", "0",
                          str(sample)], input=img.tobytes(), capture_output=True, check=False)
    assert res.returncode == 0, res.stderr.decode()
    head, rest = res.stdout.split(b"\n", 1)
    a, b, d, n = (int(v) for v in head.split())
    lines = []
    for _ in range(n):
        line, rest = rest.split(b"\n", 1)
        lines.append(dict(zip(FIELDS, (float(v) for v in line.split()))))
    return lines, np.frombuffer(rest, dtype=dtype).reshape(a, b, d)


MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
NORM = f"normalize(mean={MEAN}, std={STD})"


def test_random_erasing_after_normalize_erases_normalised_values(augment_probe, images):
    """As RandomErasing after Normalize: value 0 is the mean colour, values
    per channel, value=random N(0, 1) draws; the rest is Normalize's."""
    img = images[0]
    ref = F.normalize(chw(img).float() / 255, MEAN, STD).numpy()
    for sample in range(4):
        _, plain = run_float(augment_probe, NORM, img, sample)
        assert np.abs(plain - ref).max() < 1e-5
        for value, fill in (("0", (0, 0, 0)), ("(1, -2, 0.5)", (1, -2, 0.5))):
            lines, got = run_float(augment_probe, f"{NORM} | random_erasing(p=1, value={value})",
                                   img, sample)
            (e,) = lines
            i, j, h, w = (int(e[k]) for k in "ijhw")
            want = plain.copy()
            want[:, i:i + h, j:j + w] = np.array(fill, np.float32)[:, None, None]
            assert np.array_equal(got, want), (sample, value)
    lines, got = run_float(augment_probe, f"{NORM} | random_erasing(p=1, scale=(0.3, 0.33), "
                           "value=random)", images[0], 1)
    i, j, h, w = (int(lines[0][k]) for k in "ijhw")
    box = got[:, i:i + h, j:j + w]
    assert abs(box.mean()) < 0.15 and abs(box.std() - 1) < 0.15


def test_random_erasing_after_normalize_hwc_bf16(augment_probe, images):
    img = images[0]
    pipe = f"normalize(mean={MEAN}, std={STD}, dtype=bf16, layout=hwc)"
    _, plain = run_float(augment_probe, pipe, img, 2, np.uint16)
    lines, got = run_float(augment_probe, pipe + " | random_erasing(p=1, value=(0.5, 0.5, 0.5))",
                           img, 2, np.uint16)
    i, j, h, w = (int(lines[0][k]) for k in "ijhw")
    want = plain.copy()
    want[i:i + h, j:j + w, :] = 0x3f00  # bf16 0.5
    assert np.array_equal(got, want)


def test_random_erasing_after_normalize_keeps_channel_means(augment_probe, images):
    """The issue's figure: erasing after Normalize to value 0 moves the
    normalised channel means toward 0 (the mean colour), where erasing to
    black before Normalize moved them toward -mean / std."""
    img = np.full((40, 40, 3), [124, 116, 104], np.uint8)  # about the ImageNet mean
    after = np.mean([run_float(augment_probe, f"{NORM} | random_erasing(p=1)", img, s)[1]
                     for s in range(20)], axis=(0, 2, 3))
    before = np.mean([run_float(augment_probe, f"random_erasing(p=1) | {NORM}", img, s)[1]
                      for s in range(20)], axis=(0, 2, 3))
    assert np.abs(after).max() < 0.02, after
    assert (before < -0.05).all(), before
