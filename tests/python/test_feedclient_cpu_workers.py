"""Issue 31 item 5: for device="cpu", feedd's workers convert, normalize
and mix (the pipeline's normalize and its batch op mix), so the loop's
next() only hands batches over.

The batches must be the same bits both ways: Loader(convert_on="feedd"),
the default, against Loader(convert_on="loader"), the CPU twins run on the
loop's thread as before, for each dtype, layout and mix, over two epochs;
the feedd way must really run on the workers (the stream's pipeline ends
with them) and a label outside num_classes stops the stream naming it.
Then WAIT%: `feedctl top`'s figure (status()'s reader_wait_share, the
client's time blocked in feed_next over the stream's age) and the loop's
own (time inside next() over the same wall time, measured by the loop)
agree within a point on one synthetic run, now that next() converts
nothing.
"""

import os
import time

import numpy as np
import pytest

import feedclient

torch = pytest.importorskip("torch")

N, H, W, C = 45, 6, 7, 3
CLASSES = 10
BATCH = 8
IMAGENET = ([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])


@pytest.fixture(scope="module")
def cpud(feedpack, feedd_factory, tmp_path_factory):
    """One feedd (2 workers) serving 'cpu' (image u8[6,7,3], label i64 <
    10, a u8 'extra' field) and 'bad' (a label of 10)."""
    from types import SimpleNamespace
    from conftest import pack
    d = tmp_path_factory.mktemp("cpu")
    rng = np.random.default_rng(5)
    src = {"image": rng.integers(0, 256, (N, H, W, C), dtype=np.uint8),
           "label": rng.integers(0, CLASSES, N).astype(np.int64),
           "extra": rng.integers(0, 256, (N, 4), dtype=np.uint8)}
    for k, a in src.items():
        np.save(d / f"{k}.npy", a)
    bad = src["label"].copy()
    bad[17] = CLASSES
    np.save(d / "bad.npy", bad)
    pack(feedpack, "npy", *(f"{k}={d / k}.npy" for k in src), "-o", d / "cpu")
    pack(feedpack, "npy", f"image={d / 'image.npy'}", f"label={d / 'bad.npy'}", "-o", d / "bad")
    daemon = feedd_factory(d, "--workers", 2, "--dataset", f"cpu={d / 'cpu'}",
                           "--dataset", f"bad={d / 'bad'}")
    return SimpleNamespace(sock=daemon.sock, src=src)


def bits(t):
    return t.view(torch.int32) if t.dtype == torch.float32 else t.view(torch.int16)


CASES = [
    dict(),
    dict(mixup_alpha=0.2, num_classes=CLASSES),
    dict(cutmix_alpha=1.0, num_classes=CLASSES),
    dict(mixup_alpha=0.8, cutmix_alpha=1.0, mix_switch_prob=0.3, label_smoothing=0.1,
         num_classes=CLASSES),
    dict(label_smoothing=0.1, num_classes=CLASSES),
]


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("mix", CASES)
def test_cpu_workers_same_batches_as_the_loop(cpud, dtype, layout, mix):
    kw = dict(socket=cpud.sock, shuffle=True, seed=3, device="cpu", dtype=dtype,
              mean=IMAGENET[0], std=IMAGENET[1], layout=layout, **mix)
    with feedclient.Loader("cpu", BATCH, **kw) as ours, \
            feedclient.Loader("cpu", BATCH, convert_on="loader", **kw) as before:
        # the conversion (and the mix) are the workers' ops, not the loop's
        assert "| normalize(" in ours.pipeline and "normalize" not in before.pipeline
        assert ("| mix(" in ours.pipeline) == bool(mix)
        assert ours.fields == before.fields
        for epoch in range(2):
            ours.set_epoch(epoch)
            before.set_epoch(epoch)
            n = 0
            for a, b in zip(ours, before):
                assert a.index == b.index and np.array_equal(a.indices, b.indices)
                assert set(a) == set(b) == {"image", "label", "extra"}
                assert a["image"].dtype == b["image"].dtype == dtype
                assert a["image"].shape == b["image"].shape
                assert torch.equal(bits(a["image"]), bits(b["image"])), \
                    f"epoch {epoch} batch {a.index}: images differ"
                assert a["label"].dtype == b["label"].dtype
                assert torch.equal(a["label"], b["label"]) if not mix else \
                    torch.equal(bits(a["label"]), bits(b["label"]))
                assert torch.equal(torch.as_tensor(a["extra"]), torch.as_tensor(b["extra"]))
                n += 1
            assert n == -(-N // BATCH)


def test_cpu_workers_mix_is_on_the_batch(cpud):
    """The workers' mix does mix: unmixed images are not what it gives,
    and every soft-label row sums to 1 over two classes at most."""
    kw = dict(socket=cpud.sock, shuffle=False, device="cpu")
    with feedclient.Loader("cpu", BATCH, **kw) as plain, \
            feedclient.Loader("cpu", BATCH, mixup_alpha=1.0, num_classes=CLASSES,
                              **kw) as mixed:
        bp, bm = next(iter(plain)), next(iter(mixed))
    assert tuple(bm["label"].shape) == (BATCH, CLASSES)
    assert not torch.equal(bp["image"], bm["image"])
    torch.testing.assert_close(bm["label"].sum(1), torch.ones(BATCH), rtol=0, atol=1e-6)
    assert (bm["label"] > 0).sum(1).max() <= 2


def test_cpu_workers_label_out_of_range_stops_the_stream(cpud):
    with feedclient.Loader("bad", N, socket=cpud.sock, shuffle=False, device="cpu",
                           mixup_alpha=0.2, num_classes=CLASSES) as loader:
        with pytest.raises(feedclient.StreamStopped,
                           match=r"mix: sample 17 \(row 17 of the batch\): field 'label' "
                                 r"10 not in \[0, num_classes=10\)"):
            next(iter(loader))


def test_cpu_workers_bad_convert_on(cpud):
    with pytest.raises(feedclient.InvalidArgument, match="convert_on='gpu'"):
        feedclient.Loader("cpu", 4, socket=cpud.sock, device="cpu", convert_on="gpu")


def spin(ms):
    """A training step's work: the loop's thread busy for ms."""
    end = time.perf_counter() + ms / 1e3
    while time.perf_counter() < end:
        pass


def slow_transform(batch):
    spin(4)
    return batch


def test_cpu_workers_wait_share_is_the_loops_own(cpud):
    """One synthetic run: a transform= thread makes each batch wait about
    4 ms, the loop works about 4 ms between next() calls. The loop's own
    measure (time inside next() / wall time since the Loader opened) and
    `feedctl top`'s (status()'s reader_wait_share of this stream) are the
    same figure within a point; before, feedd counted only feed_next()'s
    sleeps, never the wait for transform= nor next()'s own work."""
    with feedclient.Loader("cpu", 5, socket=cpud.sock, shuffle=True, device="cpu",
                           mixup_alpha=1.0, num_classes=CLASSES, transform=slow_transform,
                           credits=2) as ld:
        t_start = time.perf_counter()
        in_next, batches = 0.0, 0
        while batches < 120:
            it = iter(ld)
            while True:
                t0 = time.perf_counter()
                try:
                    b = next(it)
                except StopIteration:
                    in_next += time.perf_counter() - t0
                    break
                in_next += time.perf_counter() - t0
                batches += 1
                spin(4)
                del b
        wall = time.perf_counter() - t_start
        mine = [s for s in feedclient.status(cpud.sock)["streams"]
                if s["pid"] == os.getpid() and s["batch"] == 5 and s["dataset"] == "cpu"]
    assert len(mine) == 1, mine
    loop, top = in_next / wall, mine[0]["reader_wait_share"]
    print(f"WAIT%: loop {100 * loop:.2f}, feedctl top {100 * top:.2f}")
    assert 0.2 < loop < 0.8, loop  # the run waits and works: a test of both
    assert abs(top - loop) < 0.01, (top, loop)
