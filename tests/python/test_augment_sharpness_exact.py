"""adjust_sharpness is torchvision's to the bit: core/augment_filter.c's
rows vectorize (GCC's dynamic cost model, a branch-free rounding of the
smoothing), which must change no output value. Checked against
F.adjust_sharpness on u8 tensors through check_augment's pixel probe, on
sizes whose rows end inside and outside a vector, the 1- and 3-channel
cases, the border rows and columns that keep their value, and the images
too small to smooth."""
import subprocess

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")
import torchvision.transforms.functional as F  # noqa: E402

SIZES = [(54, 72, 3), (31, 17, 1), (3, 3, 3), (40, 9, 3), (176, 176, 3), (5, 33, 1), (2, 9, 3),
         (9, 2, 1)]
FACTORS = [0.0, 0.3, 0.9, 1.7, 2.0, 7.5]


def probe_sharpness(augment_probe, img, factor):
    h, w, c = img.shape
    res = subprocess.run([augment_probe, "--pixel", f"adjust_sharpness(factor={factor})",
                          str(h), str(w), str(c), "3", "0", "0"], input=img.tobytes(),
                         capture_output=True, check=False)
    assert res.returncode == 0, res.stderr.decode()
    head, rest = res.stdout.split(b"\n", 1)
    oh, ow, oc, n = (int(v) for v in head.split())
    for _ in range(n):  # one line per basic op the probe ran
        _, rest = rest.split(b"\n", 1)
    return np.frombuffer(rest, dtype=np.uint8).reshape(oh, ow, oc)


@pytest.mark.parametrize("h,w,c", SIZES)
def test_augment_sharpness_equals_torchvision_bit_for_bit(augment_probe, h, w, c):
    rng = np.random.default_rng(h * 1000 + w * 10 + c)
    # random levels, and a smooth gradient (sums that land near .5 ties)
    noisy = rng.integers(0, 256, (h, w, c), dtype=np.uint8)
    y, x = np.mgrid[0:h, 0:w]
    smooth = np.repeat(((x * 7 + y * 3) % 256).astype(np.uint8)[..., None], c, axis=2)
    for img in (noisy, smooth):
        t = torch.from_numpy(img).permute(2, 0, 1).contiguous()
        for f in FACTORS:
            got = probe_sharpness(augment_probe, img, f)
            want = F.adjust_sharpness(t, f).permute(1, 2, 0).numpy()
            diff = got.astype(int) - want.astype(int)
            assert not diff.any(), (f"{h}x{w}x{c} factor {f}: {int((diff != 0).sum())} values "
                                    f"differ, first at {np.argwhere(diff)[0].tolist()}")
