"""Loader(transform=fn, transform_threads=k) (issue 21): fn(batch) runs on
k threads of this process ahead of use, results in order; a batch's slot
goes back once fn's output no longer refers to it; an exception reaches
the loop as TransformError with the batch's position; state_dict() and
resume are those of a Loader without transform.
"""

import threading

import numpy as np
import pytest

import feedclient
from conftest import N_SMALL


def doubled(batch):
    return {"x": np.array(batch["image"], dtype=np.float32) * 2, "y": np.array(batch["label"]),
            "index": batch.index, "thread": threading.get_ident()}


@pytest.mark.parametrize("k", [1, 3])
def test_runs_ahead_in_order_on_k_threads(fc, k):
    src = fc.src["small"]
    ys = []
    threads = set()
    with feedclient.Loader("small", 40, socket=fc.sock, shuffle=True, seed=9, credits=1,
                           transform=doubled, transform_threads=k) as loader:
        for i, out in enumerate(loader):
            assert out["index"] == i                     # in order
            np.testing.assert_array_equal(out["x"], src["image"][out["y"]] * 2.0)
            ys.extend(out["y"].tolist())
            threads.add(out["thread"])
    assert sorted(ys) == list(range(N_SMALL))
    assert threading.get_ident() not in threads and 1 <= len(threads) <= k


def test_slots_go_back_when_fn_output_lets_go(fc):
    """fn returns copies: with credits=1 the loop can keep every output."""
    with feedclient.Loader("small", 50, socket=fc.sock, shuffle=False, credits=1,
                           transform=doubled, transform_threads=2) as loader:
        kept = list(loader)
    assert [o["index"] for o in kept] == list(range(N_SMALL // 50))


def test_exception_carries_the_batch_position(fc):
    def fail_on_3(batch):
        if batch.index == 3:
            raise ValueError("bad batch")
        return batch.index

    with feedclient.Loader("small", 100, socket=fc.sock, shuffle=False, transform=fail_on_3,
                           transform_threads=2) as loader:
        it = iter(loader)
        assert [next(it) for _ in range(3)] == [0, 1, 2]
        with pytest.raises(feedclient.TransformError) as e:
            next(it)
        assert (e.value.epoch, e.value.index) == (0, 3)
        assert isinstance(e.value.__cause__, ValueError)
        assert "raised ValueError: bad batch, on batch 3 of epoch 0" in str(e.value)
        assert next(it) == 4                             # the loop may go on


def test_state_dict_and_resume_unchanged(fc):
    kw = dict(socket=fc.sock, shuffle=True, seed=5)
    with feedclient.Loader("small", 30, **kw) as plain:
        it = iter(plain)
        for _ in range(4):
            next(it)
        want_state = plain.state_dict()
        want_rest = [b.index for b in it]
    with feedclient.Loader("small", 30, transform=lambda b: b.index, transform_threads=3,
                           **kw) as loader:
        it = iter(loader)
        assert [next(it) for _ in range(4)] == [0, 1, 2, 3]
        state = loader.state_dict()          # fn ran ahead: the position is still 4
    assert state["epoch"] == want_state["epoch"] and state["token"] == want_state["token"]
    with feedclient.Loader("small", 30, transform=lambda b: b.index, transform_threads=2,
                           **kw) as resumed:
        resumed.load_state_dict(state)
        assert list(resumed) == want_rest


def test_epochs_end_and_begin_with_transform(fc):
    with feedclient.Loader("small", 300, socket=fc.sock, shuffle=False,
                           transform=lambda b: (b.epoch, b.index), transform_threads=4) as ld:
        assert list(ld) == [(0, i) for i in range(4)]
        assert list(ld) == [(1, i) for i in range(4)]


def test_bad_transform_arguments(fc):
    with pytest.raises(feedclient.InvalidArgument, match="transform=3"):
        feedclient.Loader("small", 4, socket=fc.sock, transform=3)
    with pytest.raises(feedclient.InvalidArgument, match="transform_threads: 0"):
        feedclient.Loader("small", 4, socket=fc.sock, transform=len, transform_threads=0)
