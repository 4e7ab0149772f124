"""Epochs of a feedclient.Loader: which epoch an iteration gives, how many
batches of which sizes, and in which order.

Each iteration is one epoch: the one set_epoch() chose, else the one after
the previous iteration's. A new iteration after a partial one (a break)
still gives a whole epoch. Sample counts are DataLoader's: the last batch
is partial unless drop_last drops it or pad_last fills it; len() agrees.
Orders: sequential, full shuffle (a new permutation each epoch, the same
for the same seed and epoch), block-window (each window of W blocks' worth
of positions draws from W blocks), eval (each sample once across ranks).
"""

import numpy as np
import pytest

import feedclient
from conftest import N_SMALL

BATCH = 64


def epoch_order(fc, epoch, **kw):
    """The sample indices of one epoch from a fresh Loader with set_epoch."""
    with feedclient.Loader("small", BATCH, socket=fc.sock, **kw) as loader:
        loader.set_epoch(epoch)
        return [i for b in loader for i in b.indices.tolist()]


def test_implicit_next_epoch(fc):
    got = []
    with feedclient.Loader("small", BATCH, socket=fc.sock, seed=4) as loader:
        for _ in range(3):
            got.append([(b.epoch, b.indices.tolist()) for b in loader])
    for e, batches in enumerate(got):
        assert {ep for ep, _ in batches} == {e}
        order = [i for _, idx in batches for i in idx]
        assert sorted(order) == list(range(N_SMALL))
        assert order == epoch_order(fc, e, seed=4)
    assert len({tuple(i for _, idx in b for i in idx) for b in got}) == 3


def test_set_epoch_chooses_the_next_iteration(fc):
    with feedclient.Loader("small", BATCH, socket=fc.sock, seed=4) as loader:
        loader.set_epoch(5)
        five = [(b.epoch, b.index, b.indices.tolist()) for b in loader]
        assert [x[:2] for x in five] == [(5, i) for i in range(len(loader))]
        order5 = [i for x in five for i in x[2]]
        six = [i for b in loader for i in b.indices.tolist()]      # then 6
        loader.set_epoch(5)
        again = [i for b in loader for i in b.indices.tolist()]
        loader.set_epoch(2)
        two = [b.epoch for b in loader]
    assert order5 == again == epoch_order(fc, 5, seed=4)
    assert six == epoch_order(fc, 6, seed=4) != order5
    assert set(two) == {2}
    assert epoch_order(fc, 5, seed=5) != order5                     # the seed matters


@pytest.mark.parametrize("set_epoch", [None, 0, 3])
def test_partial_iteration_then_a_whole_epoch(fc, set_epoch):
    with feedclient.Loader("small", BATCH, socket=fc.sock, seed=1) as loader:
        for n, b in enumerate(loader):
            if n == 2:
                break
        if set_epoch is not None:
            loader.set_epoch(set_epoch)
        want = 1 if set_epoch is None else set_epoch
        batches = [(b.epoch, b.index, b.indices.tolist()) for b in loader]
    assert [x[:2] for x in batches] == [(want, i) for i in range(len(batches))]
    assert len(batches) == -(-N_SMALL // BATCH)
    assert [i for x in batches for i in x[2]] == epoch_order(fc, want, seed=1)


def test_older_iterator_stops(fc):
    with feedclient.Loader("small", BATCH, socket=fc.sock) as loader:
        first = iter(loader)
        next(first)
        second = iter(loader)
        with pytest.raises(feedclient.FeedError, match="superseded"):
            next(first)
        assert next(second).epoch == 1


@pytest.mark.parametrize("batch", [64, 256, 1000, 3])
@pytest.mark.parametrize("last", ["partial", "drop_last", "pad_last"])
def test_counts_are_dataloaders(fc, batch, last):
    torch = pytest.importorskip("torch")
    kw = {"drop_last": last == "drop_last", "pad_last": last == "pad_last"}
    with feedclient.Loader("small", batch, socket=fc.sock, shuffle=False, **kw) as loader:
        got = [(len(b.indices), b.padded) for b in loader]
        n = len(loader)
    ref = torch.utils.data.DataLoader(range(N_SMALL), batch_size=batch,
                                      drop_last=kw["drop_last"])
    sizes = [len(b) for b in ref]
    if last == "pad_last":
        sizes = [batch] * len(sizes)
    assert [s for s, _ in got] == sizes
    assert n == len(ref) == len(got)
    full = N_SMALL % batch == 0 or last != "pad_last"
    assert [p for _, p in got] == [False] * (len(got) - 1) + [not full]


def test_the_issues_example():
    """60,000 samples at batch 256: 234 full batches and one of 96."""
    torch = pytest.importorskip("torch")
    assert [len(b) for b in torch.utils.data.DataLoader(range(60000), batch_size=256)][-2:] \
        == [256, 96]


def test_sequential_and_shuffled_orders(fc):
    seq = epoch_order(fc, 0, shuffle=False)
    assert seq == list(range(N_SMALL))
    assert epoch_order(fc, 1, shuffle=False) == seq
    full = epoch_order(fc, 0, seed=9)
    assert sorted(full) == seq and full != seq
    assert epoch_order(fc, 0, seed=9) == full


def test_block_window_order(fc):
    # 'small' has 10 records a block: a window of 3 blocks is 30 positions
    order = epoch_order(fc, 0, seed=2, window=3)
    assert sorted(order) == list(range(N_SMALL)) and order != list(range(N_SMALL))
    for w in range(0, N_SMALL, 30):
        blocks = {i // 10 for i in order[w:w + 30]}
        assert len(blocks) <= 3, (w, blocks)
    assert order != epoch_order(fc, 0, seed=2)


def test_eval_covers_each_sample_once_across_ranks(fc):
    seen = []
    for rank in range(3):
        with feedclient.Loader("small", BATCH, socket=fc.sock, eval=True, rank=rank,
                               world_size=3) as loader:
            got = [i for b in loader for i in b.indices.tolist()]
            assert len(loader) == -(-len(got) // BATCH)
            assert got == sorted(got)
            seen.extend(got)
    assert sorted(seen) == list(range(N_SMALL))


def test_augmentation_depends_on_epoch_not_on_run(fc):
    pipe = "random_crop(size=8, pad=2) | hflip(p=0.5)"

    def images(epoch):
        with feedclient.Loader("small", BATCH, socket=fc.sock, pipeline=pipe, shuffle=False,
                               seed=3) as loader:
            loader.set_epoch(epoch)
            return np.concatenate([b["image"].copy() for b in loader])

    a, b = images(0), images(0)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, images(1))
    assert not np.array_equal(a, fc.src["small"]["image"])
