"""aug_mix (core/augment_augmix.c) against torchvision's AugMix.

With the random draws fixed, feedd's aug_mix is within +-1 of
torchvision.transforms.AugMix's forward on uint8 tensors (Debian's
torchvision 0.14 has it): the probe (`check_augment --aug-mix`) runs the
op on an image and prints the draws the sample made (the Beta weights,
each chain's weight, its ops, bins and signs); AugMix itself then runs on
the same image with its _sample_dirichlet returning those weights and
torch.randint returning those choices in the order forward() asks for
them. Then the draws' distributions: the chain weights sum to m1, the
Beta weight's mean is 1/2, ops and depths cover their ranges; and the
pipeline translation from_torchvision(AugMix(...)).
"""

import subprocess

import numpy as np
import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("torchvision.transforms")
from torchvision.transforms import InterpolationMode  # noqa: E402

import feedclient  # noqa: E402


def run_probe(probe, pipeline, img, sample, seed=7):
    h, w, c = img.shape
    res = subprocess.run([probe, "--aug-mix", pipeline, str(h), str(w), str(c), str(seed), "0",
                          str(sample)], input=np.ascontiguousarray(img).tobytes(),
                         capture_output=True, check=False)
    assert res.returncode == 0, res.stderr.decode()
    lines = res.stdout.split(b"\n", 2 + 64)
    head = lines[1].split()
    width = int(head[0])
    m0, m1 = float(head[1]), float(head[2])
    ws = [float(v) for v in head[3:3 + width]]
    chains = []
    for k in range(width):
        v = lines[2 + k].split()
        depth = int(v[0])
        chains.append([(int(v[1 + 4 * t]), int(v[2 + 4 * t]), int(v[3 + 4 * t]),
                        float(v[4 + 4 * t])) for t in range(depth)])
    rest = b"\n".join(lines[2 + width:])
    out = np.frombuffer(rest, dtype=np.uint8)[:h * w * c].reshape(h, w, c)
    return m0, m1, ws, chains, out


def torchvision_augmix(img, draws, chain_depth=-1, **kw):
    """AugMix(**kw)(img) with the probe's draws (img HWC u8 -> HWC u8)."""
    m0, m1, ws, chains = draws
    aug = T.AugMix(chain_depth=chain_depth, **kw)
    dirichlet = iter([torch.tensor([[m0, m1]], dtype=torch.float32),
                      torch.tensor([[w / m1 for w in ws]], dtype=torch.float32)])
    aug._sample_dirichlet = lambda params: next(dirichlet)
    space = list(aug._augmentation_space(aug._PARAMETER_MAX, (img.shape[0], img.shape[1])))
    picks = []
    for chain in chains:
        if chain_depth <= 0:
            picks.append(len(chain))
        for op, b, neg, _ in chain:
            picks.append(op)
            mags, signed = aug._augmentation_space(aug._PARAMETER_MAX,
                                                   (img.shape[0], img.shape[1]))[space[op]]
            if mags.ndim > 0:
                picks.append(b)
            if signed:
                picks.append(neg)
    it = iter(picks)
    real = torch.randint

    def fake(*a, **k):
        return torch.tensor([next(it)])
    torch.randint = fake
    try:
        x = torch.from_numpy(np.ascontiguousarray(img)).permute(2, 0, 1).contiguous()
        y = aug(x)
    finally:
        torch.randint = real
    assert next(it, None) is None, "AugMix asked for fewer draws than the probe made"
    return y.permute(1, 2, 0).numpy()


def images(n, h, w, c=3, seed=0):
    """Natural-ish images: smooth gradients with noise, so the ops' statistics
    (equalize, autocontrast) are not flat."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    out = []
    for k in range(n):
        base = (np.sin(xx / (3 + k % 5)) * 60 + yy * 4 + 90)[..., None] + \
            rng.integers(-30, 30, (h, w, c))
        out.append(np.clip(base + 20 * np.arange(c), 0, 255).astype(np.uint8))
    return out


CASES = [
    ("aug_mix", dict()),
    ("aug_mix(severity=5, mixture_width=2, chain_depth=2, alpha=0.5, all_ops=false)",
     dict(severity=5, mixture_width=2, alpha=0.5, all_ops=False, chain_depth=2)),
    ("aug_mix(interpolation=nearest, fill=128)",
     dict(interpolation=InterpolationMode.NEAREST, fill=[128.0] * 3)),
    ("aug_mix(severity=10, mixture_width=4)", dict(severity=10, mixture_width=4)),
]


@pytest.mark.parametrize("pipeline,kw", CASES)
def test_aug_mix_matches_torchvision_with_fixed_draws(augment_probe, pipeline, kw):
    worst = 0
    for s, img in enumerate(images(12, 24, 20)):
        m0, m1, ws, chains, ours = run_probe(augment_probe, pipeline, img, s)
        assert abs(m0 + m1 - 1) < 1e-6 and abs(sum(ws) - m1) < 1e-5
        theirs = torchvision_augmix(img, (m0, m1, ws, chains), **kw)
        diff = np.abs(ours.astype(int) - theirs.astype(int))
        worst = max(worst, int(diff.max()))
        assert diff.max() <= 1, (s, chains, int(diff.max()), int((diff > 1).sum()))
    print(pipeline, "largest difference", worst)


def test_aug_mix_gray(augment_probe):
    img = images(1, 16, 16, c=1)[0]
    for s in range(6):
        m0, m1, ws, chains, ours = run_probe(augment_probe, "aug_mix", img, s)
        theirs = torchvision_augmix(img, (m0, m1, ws, chains))
        assert np.abs(ours.astype(int) - theirs.astype(int)).max() <= 1


def test_aug_mix_draws(augment_probe):
    """Beta(1, 1) mean 1/2, chain weights m1 * Dirichlet, depths 1..3, every
    op drawn, bins below severity; a sample's draws are its own."""
    img = images(1, 8, 8)[0]
    m0s, depths, ops, bins = [], set(), set(), set()
    for s in range(300):
        m0, m1, ws, chains, _ = run_probe(augment_probe, "aug_mix(severity=2)", img, s)
        m0s.append(m0)
        for ch in chains:
            depths.add(len(ch))
            for op, b, _, _ in ch:
                ops.add(op)
                bins.add(b)
    assert abs(np.mean(m0s) - 0.5) < 0.05 and min(m0s) < 0.1 and max(m0s) > 0.9
    assert depths == {1, 2, 3} and ops == set(range(13)) and bins == {0, 1}
    a = run_probe(augment_probe, "aug_mix", img, 3)
    b = run_probe(augment_probe, "aug_mix", img, 4)
    assert a[:4] != b[:4] and np.array_equal(run_probe(augment_probe, "aug_mix", img, 3)[4], a[4])


def test_from_torchvision_aug_mix():
    from feedclient import from_torchvision
    from feedclient._tvcompat import variant_keys
    lin = ", linspace=fused" if variant_keys().get("linspace") else ""
    args = from_torchvision(T.Compose([T.AugMix(severity=4, mixture_width=2, alpha=0.5,
                                                all_ops=False)]), decode=False)
    assert args["pipeline"] == ("aug_mix(severity=4, mixture_width=2, chain_depth=-1, "
                                f"alpha=0.5, all_ops=false, interpolation=bilinear{lin})")
    args = from_torchvision(T.AugMix(interpolation=InterpolationMode.NEAREST, fill=[7, 7, 7]),
                            decode=False)
    assert args["pipeline"] == ("aug_mix(severity=3, mixture_width=3, chain_depth=-1, "
                                f"alpha=1, all_ops=true, interpolation=nearest, fill=7{lin})")
    with pytest.raises(feedclient.InvalidArgument, match="AugMix: .*interpolation"):
        from_torchvision(T.AugMix(interpolation=InterpolationMode.BICUBIC), decode=False)
