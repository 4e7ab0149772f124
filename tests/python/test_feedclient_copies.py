"""Batches that can leave their slot (issue 21): pickle, torch.save,
batch.copy(), copy.copy and copy.deepcopy give a Batch whose arrays own
their memory, with epoch, index, indices and padded kept; the original's
slot goes back to feedd once the original is dropped, while the copy
lives on.
"""

import copy
import io
import pickle

import numpy as np
import pytest

import feedclient


def owns(a):
    """a (numpy array or torch tensor) does not view a batch slot."""
    if isinstance(a, np.ndarray):
        return a.flags.owndata or (a.base is not None and
                                   type(a.base).__name__ != "_Slot" and owns(a.base))
    return True


def check_copy(c, batch, src):
    assert isinstance(c, feedclient.Batch)
    assert (c.epoch, c.index, c.padded) == (batch.epoch, batch.index, batch.padded)
    assert np.asarray(c.indices).tolist() == np.asarray(batch.indices).tolist()
    np.testing.assert_array_equal(np.asarray(c["image"]), src["image"][np.asarray(c.indices)])
    np.testing.assert_array_equal(np.asarray(c["label"]), src["label"][np.asarray(c.indices)])


@pytest.mark.parametrize("how", ["pickle", "copy", "copy.copy", "copy.deepcopy"])
def test_copies_own_their_memory(fc, how):
    src = fc.src["small"]
    make = {"pickle": lambda b: pickle.loads(pickle.dumps(b)),
            "copy": lambda b: b.copy(),
            "copy.copy": copy.copy,
            "copy.deepcopy": copy.deepcopy}[how]
    with feedclient.Loader("small", 10, socket=fc.sock, shuffle=True, seed=2,
                           credits=1) as loader:
        it = iter(loader)
        b = next(it)
        ref = {"epoch": b.epoch, "index": b.index, "padded": b.padded,
               "indices": b.indices.copy()}
        c = make(b)
        assert all(owns(v) for v in c.values()) and owns(c.indices)
        check_copy(c, b, src)
        del b
        # the original's slot went back: two more can be fetched with credits=1
        nxt = next(it)
        assert next(it).index == nxt.index + 1
        assert loader.detached == 0   # went back, not moved aside (held views)
        assert (c.epoch, c.index, c.padded) == (ref["epoch"], ref["index"], ref["padded"])
        np.testing.assert_array_equal(c.indices, ref["indices"])
        np.testing.assert_array_equal(c["label"], src["label"][ref["indices"]])


def test_torch_save_and_load(fc, tmp_path):
    torch = pytest.importorskip("torch")
    src = fc.src["small"]
    with feedclient.Loader("small", 10, socket=fc.sock, shuffle=True, seed=1, credits=1,
                           as_torch=True) as loader:
        it = iter(loader)
        b = next(it)
        buf = io.BytesIO()
        torch.save(b, buf)
        path = tmp_path / "batch.pt"
        torch.save(b, path)
        want = b.copy()
        del b
        for loaded in (torch.load(io.BytesIO(buf.getvalue())), torch.load(path)):
            assert isinstance(loaded["image"], torch.Tensor)
            assert isinstance(loaded.indices, torch.Tensor)
            check_copy(loaded, want, src)


def test_torch_load_weights_only(fc):
    """torch >= 2.6 loads with weights_only=True by default: a saved batch
    loads so, feedclient's rebuild function being registered as safe (on
    torch without add_safe_globals, weights_only cannot allow it: skip)."""
    torch = pytest.importorskip("torch")
    if not hasattr(torch.serialization, "add_safe_globals"):
        pytest.skip("this torch has no add_safe_globals (scripts/test-torch-latest runs this)")
    src = fc.src["small"]
    with feedclient.Loader("small", 10, socket=fc.sock, shuffle=True, seed=1, credits=1,
                           as_torch=True) as loader:
        b = next(iter(loader))
        buf = io.BytesIO()
        torch.save(b, buf)
        want = b.copy()
        del b
    loaded = torch.load(io.BytesIO(buf.getvalue()), weights_only=True)
    assert isinstance(loaded, feedclient.Batch)
    check_copy(loaded, want, src)


def test_copy_of_variable_and_string_fields(fc):
    src = fc.src["files"]
    with feedclient.Loader("files", 3, socket=fc.sock, shuffle=False) as loader:
        b = next(iter(loader))
        c = pickle.loads(pickle.dumps(b))
        assert c["name"] == b["name"]
        for x, y in zip(c["data"], b["data"]):
            assert owns(x)
            np.testing.assert_array_equal(x, y)
        assert c["name"] == src["name"][:3]
