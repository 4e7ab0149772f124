"""feedclient._fastiter: next() with a batch ready in C (issue 31 item 5).
CMake builds it wherever Python's headers are (scripts/setup.sh installs
them), so here it must load. Its path serves the batches of a plain loop
without a Python method; everything else (a slot's first delivery, the
epoch's end, a lock held elsewhere, a closed, superseded or forked
Loader) goes to the Python methods and behaves as they do. Runs on
conftest's 'small' dataset in order, as torch tensors; the reuse rules
themselves run on both paths in test_feedclient_reuse.py."""

import os
import threading

import pytest

import feedclient
import feedclient._epoch as ep
from conftest import LIB, N_SMALL

torch = pytest.importorskip("torch")
B = 50


def loader(fc, **kw):
    return feedclient.Loader("small", B, socket=fc.sock, shuffle=False, as_torch=True, **kw)


@pytest.fixture
def calls(monkeypatch):
    """How often next() went to each Python method; _delivered's r values
    (0: a batch the Python path made; END; a wait)."""
    n = {"_next": 0, "_delivered": 0, "made_in_python": 0, "r": []}
    nxt, dlv = ep._EpochIter._next, ep._EpochIter._delivered

    def _next(self):
        n["_next"] += 1
        return nxt(self)

    def _delivered(self, r):
        n["_delivered"] += 1
        n["made_in_python"] += r == 0
        n["r"].append(r)
        return dlv(self, r)
    monkeypatch.setattr(ep._EpochIter, "_next", _next)
    monkeypatch.setattr(ep._EpochIter, "_delivered", _delivered)
    return n


def test_it_is_built_and_loaded():
    assert (LIB / "_fastiter.abi3.so").exists(), "CMake did not build it (libpython3-dev?)"
    assert feedclient._native.fastiter is not None, feedclient._native.where
    assert issubclass(ep._EpochIter, feedclient._native.fastiter.Iter)


def test_the_c_path_serves_a_plain_loop(fc, calls):
    """Three epochs: every batch right; only each slot's first delivery,
    each epoch's end and a next() that must wait reach Python."""
    epochs, per = 3, N_SMALL // B
    with loader(fc, credits=2) as ld:
        for epoch in range(epochs):
            it = iter(ld)
            assert it._armed()
            n = 0
            for i, b in enumerate(it):
                assert b.index == i and b.epoch == epoch and not b.padded
                assert b["label"].tolist() == list(range(B * i, B * (i + 1)))
                assert b.indices.tolist() == b["label"].tolist()
                assert b.replaced == () and b.dropped == ()
                n += 1
            assert n == per
    assert calls["_next"] == 0
    assert calls["r"].count(feedclient._lib.FEED_END_OF_EPOCH) == epochs
    # the slots' first deliveries (credits and the spare); a wait's batch
    # comes through _take, which makes the first and reuses the rest too
    assert calls["made_in_python"] <= 3
    waits = calls["_delivered"] - epochs - calls["made_in_python"]
    assert epochs * per - calls["made_in_python"] - waits > 0   # served in C


def test_unarmed_runs_the_python_path(fc, calls, monkeypatch):
    monkeypatch.setattr(ep, "NATIVE", False)
    with loader(fc, credits=2) as ld:
        it = iter(ld)
        assert not it._armed()
        assert [b.index for b in it] == list(range(N_SMALL // B))
    assert calls["_next"] == N_SMALL // B + 1


def test_a_lock_held_elsewhere_is_concurrent_use(fc):
    with loader(fc) as ld:
        it = iter(ld)
        next(it)
        taken, go = threading.Event(), threading.Event()

        def hold():
            with ld._lock:
                taken.set()
                go.wait()
        t = threading.Thread(target=hold)
        t.start()
        taken.wait()
        try:
            with pytest.raises(feedclient.ConcurrentUse, match="two threads"):
                next(it)
        finally:
            go.set()
            t.join()
        assert next(it).index == 1   # and the stream goes on


def test_closed_and_superseded_iterators_refuse(fc):
    with loader(fc) as ld:
        old = iter(ld)
        next(old)
        new = iter(ld)
        with pytest.raises(feedclient.FeedError, match="superseded"):
            next(old)
        next(new)
    with pytest.raises(feedclient.LoaderClosed):
        next(new)


def test_a_forked_child_is_refused(fc):
    with loader(fc) as ld:
        it = iter(ld)
        next(it)
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                next(it)
                os.write(w, b"served")
            except feedclient.FeedError as e:
                os.write(w, str(e).encode()[:200])
            except BaseException as e:
                os.write(w, f"{type(e).__name__}".encode())
            os._exit(0)
        os.close(w)
        said = os.read(r, 256).decode()
        os.close(r)
        os.waitpid(pid, 0)
        assert "forked" in said, said
        assert next(it).index == 1   # the parent's stream is untouched


def test_a_closed_stream_leaves_no_tensor_in_an_armed_iterator(fc):
    """Closing the Loader closes its stream (no batch alive): the tensors
    cached over its slots go, though an armed iterator that holds the
    stream's cache outlives it (they view memory being unmapped)."""
    import gc
    import weakref
    ld = loader(fc, credits=2)
    it = iter(ld)
    assert it._armed()
    refs = []
    for _ in range(4):
        b = next(it)
        refs.append(weakref.ref(b["image"]))
        del b
    ld.close()
    gc.collect()
    assert it is not None and all(r() is None for r in refs)
