"""next() hands out the tensors it built over a slot again when that slot
comes back (issue 31 item 5: next() with a batch ready costs one C call,
feed_next_desc, and no torch call), but never while anything still holds
them or their memory: the batch dict, the tensor, a view of it, a numpy
array over it. Runs on conftest's 'small' dataset (image u8[8,8,1] a
pattern of the index, label i64 = index), in order, as torch tensors.
"""

import gc
import weakref

import numpy as np
import pytest

import feedclient
from conftest import N_SMALL

torch = pytest.importorskip("torch")
B = 50


@pytest.fixture(autouse=True, params=["c", "python"])
def next_path(request, monkeypatch):
    """Each test on both paths of next() and of a batch's release:
    feedclient._fastiter's C (test_feedclient_fastiter.py checks it is
    built here) and Python's."""
    import feedclient._epoch as ep
    import feedclient._reuse as reuse
    if request.param == "c" and ep._native is None:
        pytest.skip(f"feedclient._fastiter not loaded: {feedclient._native.where}")
    monkeypatch.setattr(ep, "NATIVE", request.param == "c")
    monkeypatch.setattr(reuse, "C", ep._native if request.param == "c" else None)
    return request.param


def pattern(i):
    """conftest's 'small' image of sample i."""
    k = np.arange(i * 64, (i + 1) * 64)
    return ((k + k // 64 * 7) % 251).astype(np.uint8).reshape(8, 8, 1)


def check(b, index):
    """b is batch index of the ordered epoch, whole."""
    assert b.index == index
    assert b["label"].tolist() == list(range(B * index, B * (index + 1)))
    assert np.array_equal(b["image"][0].numpy(), pattern(B * index))
    assert np.array_equal(b["image"][-1].numpy(), pattern(B * index + B - 1))
    assert b.indices.tolist() == b["label"].tolist()


def loader(fc, **kw):
    return feedclient.Loader("small", B, socket=fc.sock, shuffle=False, as_torch=True, **kw)


def test_tensors_come_back_when_nothing_holds_them(fc):
    """The plain loop: every batch is right, the slots go back as the dicts
    go (nothing detached), and the same tensor objects come back."""
    seen, again = [], 0
    with loader(fc, credits=2) as ld:
        for i, b in enumerate(ld):
            check(b, i)
            again += any(b["image"] is r() for r in seen)
            seen.append(weakref.ref(b["image"]))
        assert ld.detached == 0
    assert len(seen) == N_SMALL // B
    # a handful of slots served every batch: past their first, all reused
    assert again >= len(seen) - 4


@pytest.mark.parametrize("hold", ["tensor", "view", "numpy", "dict"])
def test_a_held_batch_is_never_handed_out_again(fc, hold):
    """Whatever keeps a batch's memory keeps its tensors from coming back:
    each later batch is a new object with its own values, and the held one
    still reads what it read (its slot detached when the credits ran out)."""
    kept = []
    with loader(fc, credits=2) as ld:
        for i, b in enumerate(ld):
            check(b, i)
            for k, t in kept:
                assert b["image"] is not t["image"] if hold == "dict" else b["image"] is not t
            if i % 3 == 0:
                img = b["image"]
                kept.append((i, {"tensor": img, "view": img[1:2], "numpy": img.numpy(),
                                 "dict": b}[hold]))
            del b
        assert ld.detached > 0
    gc.collect()
    for i, k in kept:
        if hold == "dict":
            check(k, i)
            continue
        first = 1 if hold == "view" else 0
        assert np.array_equal(np.asarray(k)[0], pattern(B * i + first))


def test_a_tensor_dropped_after_its_dict_frees_its_slot(fc):
    """Tensors kept past their dict hold the slot; once they are dropped,
    the slot goes back: with every slot held so, nothing is detached."""
    with loader(fc, credits=1) as ld:
        it = iter(ld)
        held = []
        for i in range(2):           # every slot (credits + the spare) held by a tensor
            b = next(it)
            check(b, i)
            held.append(b["image"])
            del b
        del held
        for i in range(2, 6):
            b = next(it)
            check(b, i)
            del b
        assert ld.detached == 0


def test_a_dict_whose_tensors_were_replaced_keeps_its_slot(fc):
    """A batch dict kept after its tensors were swapped for copies still
    holds its slot: the tensors it had are not handed out again while it
    lives, though nothing else holds them."""
    kept, old = [], []
    with loader(fc, credits=2) as ld:
        for i, b in enumerate(ld):
            check(b, i)
            assert all(b["image"] is not r() for r in old)
            if i % 4 == 0:
                b.indices
                old.append(weakref.ref(b["image"]))
                b["image"] = b["image"].clone()
                b["label"] = b["label"].clone()
                kept.append((i, b))
            del b
        assert ld.detached > 0
    for i, b in kept:
        check(b, i)


def test_a_tensor_changed_in_place_is_not_handed_out_again(fc):
    """In-place changes of a tensor's shape (squeeze_, unsqueeze_) do not
    reach later batches."""
    with loader(fc, credits=2) as ld:
        for i, b in enumerate(ld):
            check(b, i)
            assert b["image"].shape == (B, 8, 8, 1) and b["label"].shape == (B,)
            assert not b["image"].requires_grad
            b["image"].squeeze_(3)
            b["label"].unsqueeze_(0)
            del b


def test_a_batch_saved_by_an_autograd_graph_is_never_handed_out_again(fc):
    """Losses summed over several batches before one backward(): each
    graph saves its batch's tensor (a C++ reference, no Python one), so the
    dict may go while the memory is still needed; the slot must not come
    back with new values under the graph, and the gradient must be the
    batches' own."""
    w = torch.ones(B, 8, 8, 1, requires_grad=True)
    losses, want = [], torch.zeros(B, 8, 8, 1)
    with loader(fc, credits=2) as ld:
        for i, b in enumerate(ld):
            check(b, i)
            losses.append((w * b["image"]).sum())   # mul saves the slot's tensor
            want += b["image"].float()
            del b
            if len(losses) == 6:
                break
    torch.stack(losses).sum().backward()
    assert torch.equal(w.grad, want)


def test_a_tensor_popped_from_its_batch_is_never_handed_out_again(fc):
    """labels = batch.pop("label"), then the dict dropped: the counts alone
    cannot tell the user's reference from the dict's, so the popped tensor
    must keep its slot (and its values) and never come back."""
    kept = []
    with loader(fc, credits=2) as ld:
        for i, b in enumerate(ld):
            check(b, i)
            for _, t in kept:
                assert b["label"] is not t
            if i % 2 == 0:
                kept.append((i, b.pop("label")))
            del b
    gc.collect()
    for i, t in kept:
        assert t.tolist() == list(range(B * i, B * (i + 1))), i


def test_batches_dropped_on_another_thread_come_back(fc):
    """A consumer thread checks and drops each batch while the loop fetches
    the next (the release runs there, next() here, both on the stream):
    every batch is right when the thread reads it, no slot is detached,
    and the slots' tensors come back."""
    import queue
    import threading
    q, bad = queue.Queue(maxsize=1), []

    def consume():
        while (item := q.get()) is not None:
            i, b = item
            try:
                check(b, i)
            except AssertionError as e:   # reported by the loop's thread
                bad.append((i, e))
            del b, item
    t = threading.Thread(target=consume)
    t.start()
    seen, again, n = [], 0, 0
    try:
        with loader(fc, credits=3) as ld:
            for epoch in range(3):
                for i, b in enumerate(ld):
                    again += any(b["image"] is r() for r in seen)
                    seen.append(weakref.ref(b["image"]))
                    n += 1
                    q.put((i, b))
                    del b
            q.put(None)
            t.join()
            assert ld.detached == 0
    finally:
        if t.is_alive():
            q.put(None)
            t.join()
    assert not bad, bad[:3]
    assert n == 3 * (N_SMALL // B)
    assert again >= n - 5   # past each slot's first delivery, its tensors came back
