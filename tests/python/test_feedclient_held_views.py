"""Held views never exhaust credits (issue 31 item 7).

A trainer that keeps a 1-row view of every batch (b["image"][:1] for
logging) used to raise CreditsExhausted at the credits-th batch. Now the
oldest held batch is detached when the loop needs its slot: its bytes move
to private memory at the same addresses (feed_batch_detach), every view
stays valid and keeps the values it had, and the slot goes back to feedd.
Runs on the shared 'small' dataset of conftest.fc (image = a pattern of
the sample index, label = index).
"""

import gc

import numpy as np
import pytest

import feedclient
from conftest import N_SMALL


def pattern(i):
    """conftest's 'small' image of sample i."""
    k = np.arange(i * 64, (i + 1) * 64)
    return ((k + k // 64 * 7) % 251).astype(np.uint8).reshape(8, 8, 1)


@pytest.mark.parametrize("as_torch", [False, True])
def test_one_row_of_every_batch_kept_for_ten_epochs(fc, as_torch):
    if as_torch:
        pytest.importorskip("torch")
    kept = []
    with feedclient.Loader("small", 100, socket=fc.sock, credits=2, seed=3,
                           as_torch=as_torch) as loader:
        for epoch in range(10):
            loader.set_epoch(epoch)
            for b in loader:
                kept.append((int(b["label"][0]), b["image"][:1], b["label"][:1]))
        assert loader.detached >= len(kept) - 3
    assert len(kept) == 10 * N_SMALL // 100
    for first, img, label in kept:  # every view reads what it read when taken
        img = np.asarray(img)
        assert int(np.asarray(label)[0]) == first
        assert np.array_equal(img[0], pattern(first)), first


@pytest.mark.parametrize("as_torch", [False, True])
def test_a_detached_batch_keeps_its_indices(fc, as_torch):
    """Batches kept whole past their slot: .indices read only after the
    batch was detached (its C batch then describes the slot's next
    delivery) are still its own, and match its labels (label = index)."""
    if as_torch:
        pytest.importorskip("torch")
    kept = []
    with feedclient.Loader("small", 50, socket=fc.sock, credits=1, shuffle=True, seed=5,
                           as_torch=as_torch) as loader:
        for b in loader:
            kept.append(b)
        assert loader.detached >= len(kept) - 2
    assert len(kept) == N_SMALL // 50
    for b in kept:
        assert np.asarray(b.indices).tolist() == np.asarray(b["label"]).tolist()


def test_detached_views_outlive_the_loader(fc):
    with feedclient.Loader("small", 50, socket=fc.sock, credits=1, shuffle=False) as loader:
        kept = [b["image"][:2] for b in loader]
    gc.collect()
    for k, v in enumerate(kept):
        assert np.array_equal(v[0], pattern(50 * k)) and np.array_equal(v[1], pattern(50 * k + 1))
    del kept
    gc.collect()


def test_dropping_detached_views_frees_them(fc):
    """Copies go when their views go; the stream keeps running."""
    with feedclient.Loader("small", 100, socket=fc.sock, credits=1, seed=5) as loader:
        for epoch in range(3):
            loader.set_epoch(epoch)
            window = []
            for b in loader:
                window.append(b["image"][:1])
                if len(window) > 3:
                    window.pop(0)  # a detached copy freed while the loop goes on
            assert len(window) == 3
        assert loader.detached > 0
