"""feedclient.Loader(device="cpu", mixup_alpha=..., cutmix_alpha=..., num_classes=...,
label_smoothing=...) through a real feedd: mixup and cutmix after the
conversion, with soft labels (kernels/mix.h's CPU twins).

Each mixed batch must equal torchvision's reference logic
(references/classification/transforms.py RandomMixup / RandomCutmix, with
timm's label smoothing) re-done here in torch on the same Loader's unmixed
batch with the same lambda and box (feedclient.device.mix_draw: the draws
of the stream's seed, epoch and batch number), bit for bit: fp32 exactly as
torch computes it; fp16 / bf16 as torch's CUDA ops (and its CPU ops since
torch 2) compute them, each product and sum in fp32 rounded to the type.
The draws: lambda's distribution against scipy's Beta (Kolmogorov-Smirnov)
and numpy's Beta sampler (two-sample KS); the same mix after a resume and
for one or two daemon workers; refusals naming the argument.
"""

import numpy as np
import pytest

import feedclient
from feedclient.device import mix_draw

torch = pytest.importorskip("torch")

N, H, W, C = 53, 6, 7, 3
CLASSES = 10
BATCH = 8
IMAGENET = ([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])


@pytest.fixture(scope="module")
def mixd(feedpack, feedd_factory, tmp_path_factory):
    """Two feedd (1 and 2 workers) serving 'mix' (image u8[6,7,3], label
    i64 < 10), 'mix8' (the same with u8 labels) and 'nolabel' (images only)."""
    from types import SimpleNamespace
    from conftest import pack
    d = tmp_path_factory.mktemp("mix")
    rng = np.random.default_rng(11)
    src = {"image": rng.integers(0, 256, (N, H, W, C), dtype=np.uint8),
           "label": rng.integers(0, CLASSES, N).astype(np.int64)}
    for k, a in src.items():
        np.save(d / f"{k}.npy", a)
    np.save(d / "label8.npy", src["label"].astype(np.uint8))
    pack(feedpack, "npy", f"image={d / 'image.npy'}", f"label={d / 'label.npy'}",
         "--block-records", 5, "-o", d / "mix")
    pack(feedpack, "npy", f"image={d / 'image.npy'}", f"label={d / 'label8.npy'}",
         "-o", d / "mix8")
    pack(feedpack, "npy", f"image={d / 'image.npy'}", "-o", d / "nolabel")
    args = [a for k in ("mix", "mix8", "nolabel") for a in ("--dataset", f"{k}={d / k}")]
    (d / "w1").mkdir()
    (d / "w2").mkdir()
    one = feedd_factory(d / "w1", "--workers", 1, *args)
    two = feedd_factory(d / "w2", "--workers", 2, *args)
    return SimpleNamespace(sock=one.sock, sock2=two.sock, src=src)


def one_hot(y, smoothing):
    """timm's mixup_target one-hot: off = s / C, on = 1 - s + off (fp32)."""
    off = smoothing / CLASSES
    on = 1.0 - smoothing + off
    t = torch.full((len(y), CLASSES), off, dtype=torch.float32)
    return t.scatter_(1, torch.as_tensor(y).long().view(-1, 1), on)


def mul(t, s):
    """t * s as torch's CUDA kernels (and CPU ones since torch 2) do it: in
    fp32 with the scalar as fp32, rounded once to t's dtype."""
    return (t.float() * torch.tensor(s, dtype=torch.float32)).to(t.dtype)


def add(a, b):
    return (a.float() + b.float()).to(a.dtype)


def reference(x, y, draw, smoothing):
    """torchvision's RandomMixup / RandomCutmix forward on a converted
    batch x (NCHW) and labels y, with the draw's lambda and box."""
    x = x.clone()
    target = one_hot(y, smoothing)
    lam = draw.lam
    if draw.op == "none":
        return x, target
    x_rolled = x.roll(1, 0)
    t_rolled = target.roll(1, 0)
    if draw.op == "mixup":
        x = add(mul(x, lam), mul(x_rolled, 1.0 - lam))
    else:
        x1, y1, x2, y2 = draw.box
        x[:, :, y1:y2, x1:x2] = x_rolled[:, :, y1:y2, x1:x2]
        assert lam == 1.0 - (x2 - x1) * (y2 - y1) / (W * H)
    t_rolled.mul_(1.0 - lam)
    target.mul_(lam).add_(t_rolled)
    return x, target


def bits(t):
    return t.view(torch.int32) if t.dtype == torch.float32 else t.view(torch.int16)


def loaders(mixd, sock=None, dtype=torch.float32, **mix):
    kw = dict(socket=sock or mixd.sock, shuffle=True, seed=21, device="cpu", dtype=dtype,
              mean=IMAGENET[0], std=IMAGENET[1])
    return (feedclient.Loader("mix", BATCH, **kw),
            feedclient.Loader("mix", BATCH, num_classes=CLASSES, **mix, **kw))


CASES = [
    dict(mixup_alpha=0.2),
    dict(cutmix_alpha=1.0),
    dict(mixup_alpha=0.8, cutmix_alpha=1.0, mix_switch_prob=0.5, label_smoothing=0.1),
    dict(label_smoothing=0.1),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("mix", CASES)
def test_mix_matches_torchvision_reference(mixd, dtype, mix):
    plain, mixed = loaders(mixd, dtype=dtype, **mix)
    ops = set()
    with plain, mixed:
        for epoch in range(2):
            for bp, bm in zip(plain, mixed):
                assert bm.index == bp.index and np.array_equal(bm.indices, bp.indices)
                n = len(bm.indices)
                draw = mix_draw(21, epoch, bm.index, H, W,
                                mixup_alpha=mix.get("mixup_alpha", 0.0),
                                cutmix_alpha=mix.get("cutmix_alpha", 0.0),
                                switch_prob=mix.get("mix_switch_prob", 0.5))
                ops.add(draw.op)
                want_x, want_y = reference(bp["image"], bp["label"].numpy(), draw,
                                           mix.get("label_smoothing", 0.0))
                got_x, got_y = bm["image"], bm["label"]
                assert got_x.dtype == dtype and tuple(got_x.shape) == (n, C, H, W)
                assert got_y.dtype == torch.float32 and tuple(got_y.shape) == (n, CLASSES)
                assert torch.equal(bits(got_x), bits(want_x)), \
                    f"epoch {epoch} batch {bm.index} ({draw.op}, lam {draw.lam}): images differ"
                assert torch.equal(bits(got_y), bits(want_y)), \
                    f"epoch {epoch} batch {bm.index}: labels differ"
                torch.testing.assert_close(got_y.sum(1), torch.ones(n), rtol=0, atol=1e-6)
    if mix.get("mixup_alpha") and mix.get("cutmix_alpha"):
        assert ops == {"mixup", "cutmix"}
    elif not mix.get("mixup_alpha") and not mix.get("cutmix_alpha"):
        assert ops == {"none"}


def test_mix_changes_images_and_labels(mixd):
    plain, mixed = loaders(mixd, mixup_alpha=1.0)
    with plain, mixed:
        bp, bm = next(iter(plain)), next(iter(mixed))
    assert not torch.equal(bp["image"], bm["image"])
    assert (bm["label"] > 0).sum(1).max() == 2  # two classes per row (labels differ)


def test_mix_u8_labels_and_nhwc(mixd):
    kw = dict(socket=mixd.sock, shuffle=False, device="cpu", layout="NHWC",
              cutmix_alpha=1.0, num_classes=CLASSES)
    with feedclient.Loader("mix8", BATCH, **kw) as a, \
            feedclient.Loader("mix", BATCH, **kw) as b:
        for ba, bb in zip(a, b):
            assert torch.equal(ba["label"], bb["label"])
            assert torch.equal(ba["image"], bb["image"])
            draw = mix_draw(0, 0, ba.index, H, W, cutmix_alpha=1.0)
            x1, y1, x2, y2 = draw.box
            whole = torch.from_numpy(mixd.src["image"][ba.indices]).float() / 255
            want = whole.clone()
            want[:, y1:y2, x1:x2, :] = whole.roll(1, 0)[:, y1:y2, x1:x2, :]
            torch.testing.assert_close(ba["image"], want, rtol=2**-23, atol=0)


@pytest.mark.parametrize("alpha", [0.2, 1.0, 3.0])
def test_mix_lambda_is_beta(alpha):
    stats = pytest.importorskip("scipy.stats")
    lams = np.array([mix_draw(5, 2, k, 32, 32, mixup_alpha=alpha).lam for k in range(4000)])
    assert ((lams >= 0) & (lams <= 1)).all()
    assert stats.kstest(lams, stats.beta(alpha, alpha).cdf).pvalue > 1e-3
    ref = np.random.default_rng(3).beta(alpha, alpha, 4000)
    assert stats.ks_2samp(lams, ref).pvalue > 1e-3
    assert stats.ks_2samp(lams, torch.distributions.Beta(alpha, alpha).sample(
        (4000,)).numpy()).pvalue > 1e-3


def test_mix_cutmix_box_as_torchvision(mixd):
    """Box centres uniform over the image, sides from sqrt(1 - lambda)."""
    stats = pytest.importorskip("scipy.stats")
    ok = 0
    for k in range(2000):
        d = mix_draw(9, 0, k, 100, 100, cutmix_alpha=1.0)
        x1, y1, x2, y2 = d.box
        assert 0 <= x1 <= x2 <= 100 and 0 <= y1 <= y2 <= 100
        if 0 < x1 and x2 < 100 and 0 < y1 and y2 < 100:  # unclamped: centre and sides known
            assert (x2 - x1) == (y2 - y1) and (x2 - x1) % 2 == 0
            ok += 1
    assert ok > 200
    both = [mix_draw(9, 0, k, 16, 16, mixup_alpha=1.0, cutmix_alpha=1.0,
                     switch_prob=0.3).op for k in range(3000)]
    assert stats.binomtest(both.count("cutmix"), 3000, 0.3).pvalue > 1e-3


def epoch_bytes(loader, epoch):
    loader.set_epoch(epoch)
    return [(b.index, bits(b["image"]).clone(), bits(b["label"]).clone()) for b in loader]


def test_mix_same_after_resume_and_for_worker_counts(mixd):
    mix = dict(mixup_alpha=0.4, cutmix_alpha=1.0, label_smoothing=0.1, num_classes=CLASSES)
    kw = dict(shuffle=True, seed=77, device="cpu", dtype=torch.bfloat16, **mix)
    with feedclient.Loader("mix", BATCH, socket=mixd.sock, **kw) as one, \
            feedclient.Loader("mix", BATCH, socket=mixd.sock2, **kw) as two:
        for epoch in (0, 3):
            a, b = epoch_bytes(one, epoch), epoch_bytes(two, epoch)
            assert len(a) == len(b) == -(-N // BATCH)
            for (ia, xa, ya), (ib, xb, yb) in zip(a, b):
                assert ia == ib and torch.equal(xa, xb) and torch.equal(ya, yb)
        one.set_epoch(1)
        it = iter(one)
        whole = [next(it) for _ in range(3)]
        state = one.state_dict()
        rest = [(b.index, bits(b["image"]).clone(), bits(b["label"]).clone()) for b in it]
    assert len(whole) == 3 and len(rest) == -(-N // BATCH) - 3
    with feedclient.Loader("mix", BATCH, socket=mixd.sock2, **kw) as again:
        again.load_state_dict(state)
        resumed = [(b.index, bits(b["image"]), bits(b["label"])) for b in again]
    assert [r[0] for r in resumed] == [r[0] for r in rest]
    for (_, xa, ya), (_, xb, yb) in zip(rest, resumed):
        assert torch.equal(xa, xb) and torch.equal(ya, yb)


def test_mix_refusals(mixd):
    with pytest.raises(feedclient.InvalidArgument, match="mixup_alpha: .*give device="):
        feedclient.Loader("mix", 4, socket=mixd.sock, mixup_alpha=0.2, num_classes=CLASSES)
    with pytest.raises(feedclient.InvalidArgument, match="num_classes: .*give device="):
        feedclient.Loader("mix", 4, socket=mixd.sock, num_classes=CLASSES)
    with pytest.raises(feedclient.InvalidArgument, match="num_classes: required"):
        feedclient.Loader("mix", 4, socket=mixd.sock, device="cpu", cutmix_alpha=1.0)
    with pytest.raises(feedclient.InvalidArgument, match="mixup_alpha: a number"):
        feedclient.Loader("mix", 4, socket=mixd.sock, device="cpu", mixup_alpha=-1,
                          num_classes=CLASSES)
    with pytest.raises(feedclient.InvalidArgument, match="mix_switch_prob: a number"):
        feedclient.Loader("mix", 4, socket=mixd.sock, device="cpu", mixup_alpha=1,
                          cutmix_alpha=1, mix_switch_prob=2, num_classes=CLASSES)
    with pytest.raises(feedclient.InvalidArgument, match="label_smoothing: a number"):
        feedclient.Loader("mix", 4, socket=mixd.sock, device="cpu", label_smoothing=1.0,
                          num_classes=CLASSES)
    with pytest.raises(feedclient.InvalidArgument,
                       match="num_classes: soft labels are made from the field 'label', "
                             "which these batches lack"):
        feedclient.Loader("nolabel", 4, socket=mixd.sock, device="cpu", mixup_alpha=0.2,
                          num_classes=CLASSES)
    small = int(mixd.src["label"].max())  # some label equals it: out of range
    with feedclient.Loader("mix", N, socket=mixd.sock, shuffle=False, device="cpu",
                           mixup_alpha=0.2, num_classes=small) as loader:
        # feedd's workers mix (convert_on="feedd"): the build fails naming it
        with pytest.raises(feedclient.StreamStopped,
                           match=rf"mix: sample \d+ \(row \d+ of the batch\): field "
                                 rf"'label' {small} not in \[0, num_classes={small}\)"):
            next(iter(loader))
    with feedclient.Loader("mix", N, socket=mixd.sock, shuffle=False, device="cpu",
                           mixup_alpha=0.2, num_classes=small, convert_on="loader") as loader:
        with pytest.raises(feedclient.InvalidArgument,
                           match=rf"num_classes={small}: field 'label': .* is not in "
                                 rf"\[0, num_classes {small}\)"):
            next(iter(loader))
