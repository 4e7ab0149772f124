"""When a batch's slot goes back to feedd, and when a Loader's stream closes.

A slot is released only when the batch and every array or tensor viewing it
(views of views included) are gone, whichever goes last, on whatever thread
drops it. Observed through credits, with detaching off (the Loader
otherwise detaches a held batch from its slot, issue 31: see
test_feedclient_held_views.py): with all of them held by live views the
next step raises CreditsExhausted saying how many are held; dropping the
last view lets the iteration go on. A stream closes when the Loader is
closed or collected and no batch of it is alive: observed through a daemon
that allows one stream per user, where a second Loader is refused while
the first stream lives and opens as soon as it is gone.
"""

import gc
import threading

import numpy as np
import pytest

import feedclient
import feedclient.loader


@pytest.fixture(autouse=True)
def no_detaching(monkeypatch):
    """Held batches keep their slots here, as a stream that cannot detach."""
    monkeypatch.setattr(feedclient.loader._Stream, "detach_oldest", lambda self: False)


def test_slot_released_only_after_last_view(fc):
    src = fc.src["small"]
    # credits=1: the loop may hold 1 batch while it fetches the next; 2 alive exhaust it
    with feedclient.Loader("small", 50, socket=fc.sock, shuffle=False, credits=1) as loader:
        it = iter(loader)
        b0 = next(it)
        view = b0["image"][3:5].reshape(2, -1)[:, :8]   # a view of a view of the slot
        del b0
        b1 = next(it)
        label = b1["label"]
        del b1
        with pytest.raises(feedclient.CreditsExhausted) as e:
            next(it)
        assert e.value.held == 2
        assert "2 batches of this stream are still alive" in str(e.value)
        assert "credits=1" in str(e.value)
        # the memory stays the batch's while viewed
        np.testing.assert_array_equal(view, src["image"][3:5].reshape(2, -1)[:, :8])
        np.testing.assert_array_equal(label, src["label"][50:100])
        del view
        b2 = next(it)                      # b0's slot came back
        np.testing.assert_array_equal(b2["label"], src["label"][100:150])
        with pytest.raises(feedclient.CreditsExhausted):
            next(it)
        del label
        b3 = next(it)                      # b1's slot came back
        assert (b2.index, b3.index) == (2, 3)


def test_tensor_views_hold_the_slot(fc):
    torch = pytest.importorskip("torch")
    with feedclient.Loader("small", 50, socket=fc.sock, shuffle=False, credits=1,
                           as_torch=True) as loader:
        it = iter(loader)
        kept = [next(it)["image"][1:].view(-1), torch.from_numpy(next(it)["label"].numpy())]
        with pytest.raises(feedclient.CreditsExhausted):
            next(it)
        assert kept[0].numel() == 49 * 64
        del kept[0]
        next(it)
        kept.clear()
        next(it)


def test_batch_dict_alone_holds_the_slot(fc):
    with feedclient.Loader("files", 2, socket=fc.sock, shuffle=False, credits=1) as loader:
        it = iter(loader)
        batch = next(it)
        names = batch["name"]       # str: copies, no view of the slot
        other = next(it)            # credits=1: one held while the next is fetched
        with pytest.raises(feedclient.CreditsExhausted) as e:
            next(it)
        assert e.value.held == 2
        assert "2 batches of this stream are still alive" in str(e.value)
        del batch
        assert next(it).index == 2
        assert len(names) == 2 and other.index == 1


def test_release_on_another_thread(fc):
    with feedclient.Loader("small", 100, socket=fc.sock, shuffle=False, credits=1) as loader:
        it = iter(loader)
        box = [next(it)["image"], next(it)["image"]]
        with pytest.raises(feedclient.CreditsExhausted):
            next(it)
        t = threading.Thread(target=box.clear)
        t.start()
        t.join()
        assert next(it).index == 2


def test_dead_batches_in_reference_cycles_are_collected(fc):
    with feedclient.Loader("small", 100, socket=fc.sock, shuffle=False, credits=1) as loader:
        it = iter(loader)
        gc.disable()
        try:
            for _ in range(2):              # credits=1 lets 1 be held while fetching
                batch = next(it)
                batch["me"] = batch         # a cycle: only the collector frees it
                del batch
            assert next(it).index == 2      # CreditsExhausted collects and looks again
        finally:
            gc.enable()


# ---- the stream's lifetime --------------------------------------------------

@pytest.fixture(scope="module")
def one_stream(fc, feedd_factory, tmp_path_factory):
    """A feedd allowing each user one stream, serving 'small'; its socket."""
    d = tmp_path_factory.mktemp("one_stream")
    cfg = d / "feedd.yaml"
    cfg.write_text(f"limits:\n  max_streams: 1\n"
                   f"datasets:\n  - name: small\n    path: {fc.dir / 'small'}\n")
    return feedd_factory(d, "--config", cfg).sock


def assert_refused_while_open(sock):
    with pytest.raises(feedclient.LimitReached) as e:
        feedclient.Loader("small", 10, socket=sock)
    assert "max_streams" in str(e.value)


def test_close_frees_the_stream(one_stream):
    loader = feedclient.Loader("small", 10, socket=one_stream)
    assert_refused_while_open(one_stream)
    loader.close()
    loader.close()                           # again: nothing
    feedclient.Loader("small", 10, socket=one_stream).close()


def test_garbage_collection_closes(one_stream):
    loader = feedclient.Loader("small", 10, socket=one_stream)
    del loader                               # reference count
    loader = feedclient.Loader("small", 10, socket=one_stream)
    loader.me = loader                       # a cycle: the collector
    del loader
    gc.collect()
    with feedclient.Loader("small", 10, socket=one_stream):
        pass


def test_batches_outlive_their_loader(fc, one_stream):
    src = fc.src["small"]
    with feedclient.Loader("small", 10, socket=one_stream, shuffle=False) as loader:
        it = iter(loader)
        batch = next(it)
        image = next(it)["image"]
    with pytest.raises(feedclient.LoaderClosed):
        next(it)
    # the stream stays open, its memory mapped, while they live
    assert_refused_while_open(one_stream)
    np.testing.assert_array_equal(batch["image"], src["image"][:10])
    np.testing.assert_array_equal(image, src["image"][10:20])
    del batch
    assert_refused_while_open(one_stream)
    del image                                # the last one: the stream closes
    with feedclient.Loader("small", 10, socket=one_stream):
        pass


def test_new_iteration_leaves_held_batches_valid(fc):
    src = fc.src["small"]
    with feedclient.Loader("small", 10, socket=fc.sock, shuffle=False) as loader:
        old = next(iter(loader))             # then a new epoch on a new stream
        for batch in loader:
            pass
        np.testing.assert_array_equal(old["image"], src["image"][:10])
