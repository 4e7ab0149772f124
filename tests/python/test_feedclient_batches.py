"""feedclient batches against the records they came from, through a real feedd.

With the identity pipeline every field of every batch equals the packed
source at the batch's .indices, for every field kind feedpack writes (each
npy dtype and shape, u16 tokens, variable-length bytes and str fields,
empty records too), with the source's dtype and shape. Arrays and tensors
view the daemon's shared memory (a memfd mapping of this process), with no
copy: a tensor's data_ptr is that memory, and a write through it is seen
in the memory. In-place ops on a batch change that batch only: the slot
it came from, refilled by the daemon, shows the source again.
"""

import ctypes

import numpy as np
import pytest

import feedclient
from conftest import N_SMALL


def memfd_ranges():
    """(start, end) of every memfd mapping of this process."""
    out = []
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(maxsplit=5)
            if len(parts) == 6 and parts[5].startswith("/memfd:"):
                lo, hi = (int(x, 16) for x in parts[0].split("-"))
                out.append((lo, hi))
    return out


def in_memfd(addr, nbytes):
    return any(lo <= addr and addr + nbytes <= hi for lo, hi in memfd_ranges())


def test_datasets_lists_what_is_served(fc):
    by_name = {d.name: d for d in feedclient.datasets(fc.sock)}
    assert set(by_name) == {"small", "kinds", "tokens", "files", "corrupt"}
    name, samples, version, fields, classes = by_name["small"]
    assert (name, samples, classes) == ("small", N_SMALL, ())
    assert len(version) == 16 and int(version, 16) >= 0
    assert fields == (feedclient.FieldInfo("image", "u8", (8, 8, 1), False, 64),
                      feedclient.FieldInfo("label", "i64", (), False, 8))
    f = {x.name: x for x in by_name["files"].fields}
    assert (f["data"].dtype, f["data"].variable) == ("u8", True)
    assert (f["name"].dtype, f["name"].variable) == ("str", True)
    assert by_name["kinds"].samples == 37 and by_name["tokens"].samples == 50


def check_fixed(batch, src):
    assert set(batch) == set(src)
    idx = batch.indices
    assert idx.dtype == np.int64 and len(idx) > 0
    for k, a in src.items():
        got = batch[k]
        assert isinstance(got, np.ndarray), k
        assert got.dtype == a.dtype, (k, got.dtype, a.dtype)
        assert got.shape == (len(idx),) + a.shape[1:], (k, got.shape)
        np.testing.assert_array_equal(got, a[idx], err_msg=k)


@pytest.mark.parametrize("dataset", ["small", "kinds", "tokens"])
@pytest.mark.parametrize("shuffle", [False, True])
def test_identity_fixed_fields_equal_source(fc, dataset, shuffle):
    src = fc.src[dataset]
    n = len(next(iter(src.values())))
    seen = []
    with feedclient.Loader(dataset, 7, socket=fc.sock, shuffle=shuffle, seed=3) as loader:
        batches = 0
        for batch in loader:
            check_fixed(batch, src)
            assert batch.epoch == 0 and batch.index == batches
            seen.extend(batch.indices.tolist())
            batches += 1
        assert batches == len(loader) == -(-n // 7)
    assert sorted(seen) == list(range(n))
    if not shuffle:
        assert seen == list(range(n))
    else:
        assert seen != list(range(n))


def test_identity_variable_fields_equal_source(fc):
    src = fc.src["files"]
    n = len(src["name"])
    seen = []
    with feedclient.Loader("files", 3, socket=fc.sock, shuffle=False) as loader:
        for batch in loader:
            assert set(batch) == {"data", "name"}
            for j, i in enumerate(batch.indices.tolist()):
                data, name = batch["data"][j], batch["name"][j]
                assert isinstance(data, np.ndarray) and data.dtype == np.uint8
                assert data.shape == src["data"][i].shape
                np.testing.assert_array_equal(data, src["data"][i])
                assert isinstance(name, str) and name == src["name"][i]
                if len(data):
                    assert in_memfd(data.__array_interface__["data"][0], len(data))
            assert len(batch["data"]) == len(batch["name"]) == len(batch.indices)
            seen.extend(batch.indices.tolist())
    assert seen == list(range(n))
    assert any(len(a) == 0 for a in src["data"])   # the empty file is covered
    assert "dir/ü.txt" in src["name"]              # and a non-ASCII name


def test_variable_fields_as_torch(fc):
    torch = pytest.importorskip("torch")
    src = fc.src["files"]
    with feedclient.Loader("files", 4, socket=fc.sock, shuffle=False, as_torch=True) as loader:
        for batch in loader:
            for j, i in enumerate(batch.indices.tolist()):
                t = batch["data"][j]
                assert isinstance(t, torch.Tensor) and t.dtype == torch.uint8
                assert t.numpy().tobytes() == src["data"][i].tobytes()
                assert batch["name"][j] == src["name"][i]


def test_arrays_view_shared_memory(fc):
    with feedclient.Loader("small", 64, socket=fc.sock, shuffle=False) as loader:
        batch = next(iter(loader))
        for k, a in batch.items():
            assert not a.flags.owndata and a.flags.writeable, k
            assert in_memfd(a.__array_interface__["data"][0], a.nbytes), k


def test_tensors_share_the_slot_memory(fc):
    torch = pytest.importorskip("torch")
    src = fc.src["small"]
    with feedclient.Loader("small", 64, socket=fc.sock, shuffle=False, as_torch=True) as loader:
        batch = next(iter(loader))
        x, y = batch["image"], batch["label"]
        assert isinstance(x, torch.Tensor) and x.dtype == torch.uint8
        assert x.shape == (64, 8, 8, 1) and y.dtype == torch.int64
        for t in (x, y):
            assert in_memfd(t.data_ptr(), t.numel() * t.element_size())
        # the numpy array under the tensor is the same memory, both ways
        v = x.numpy()
        assert v.__array_interface__["data"][0] == x.data_ptr()
        x[0, 0, 0, 0] = 200
        assert v[0, 0, 0, 0] == 200
        v[1, 0, 0, 0] = 201
        assert x[1, 0, 0, 0].item() == 201
        # and the bytes at that address are the slot's: read them raw
        raw = ctypes.string_at(y.data_ptr(), 8 * 64)
        assert np.frombuffer(raw, np.int64).tolist() == src["label"][:64].tolist()
        y[3] = -5
        assert np.frombuffer(ctypes.string_at(y.data_ptr() + 24, 8), np.int64)[0] == -5


@pytest.mark.parametrize("as_torch", [False, True])
def test_inplace_ops_stay_in_their_batch(fc, as_torch):
    if as_torch:
        pytest.importorskip("torch")
    src = fc.src["small"]
    # 2 credits: the same two slots are refilled by the daemon over and over
    with feedclient.Loader("small", 100, socket=fc.sock, shuffle=True, credits=2,
                           as_torch=as_torch) as loader:
        for epoch in range(2):
            for batch in loader:
                x = batch["image"]
                want = src["image"][batch.indices]
                got = x.numpy() if as_torch else x
                np.testing.assert_array_equal(got, want)   # no earlier batch's edits
                if as_torch:
                    x.div_(2, rounding_mode="floor")
                    batch["label"].mul_(-1)
                else:
                    x //= 2
                    batch["label"] *= -1
                np.testing.assert_array_equal(got, want // 2)
                lab = batch["label"].numpy() if as_torch else batch["label"]
                assert (lab == -np.asarray(batch.indices)).all()


def test_fields_after_pipeline(fc):
    with feedclient.Loader("small", 10, socket=fc.sock, pipeline="center_crop(size=4)") as ld:
        assert ld.fields[0] == feedclient.FieldInfo("image", "u8", (4, 4, 1), False, 16)
        assert ld.pipeline.startswith("center_crop(") and ld.dataset_version
        batch = next(iter(ld))
        assert batch["image"].shape == (10, 4, 4, 1)
        np.testing.assert_array_equal(batch["image"],
                                      fc.src["small"]["image"][batch.indices][:, 2:6, 2:6])


def test_bfloat16_fields_become_torch_bfloat16():
    """No packer writes bf16 yet: the field plan is checked on its own."""
    torch = pytest.importorskip("torch")
    from feedclient import _lib, loader
    f = _lib.Field(name=b"x", dtype=_lib.DTYPE_BFLOAT16, dtype_name=b"bf16", elem_size=2,
                   rank=1)
    f.shape[0] = 3
    plan = loader._FieldPlan(0, f, torch)
    bits = np.array([[0x3F80, 0x4000, 0xBF80]], np.uint16)   # 1, 2, -1
    assert plan.dtype == np.uint16 and plan.trail == (3,)
    t = loader._to_torch(torch, plan, bits)
    assert t.dtype == torch.bfloat16 and t.tolist() == [[1.0, 2.0, -1.0]]
    assert t.data_ptr() == bits.__array_interface__["data"][0]


def test_batch_repr_and_len(fc):
    with feedclient.Loader("small", 64, socket=fc.sock, shuffle=False) as loader:
        batch = next(iter(loader))
        assert repr(batch) == ("<feedclient.Batch epoch 0 index 0, 64 samples, "
                               "{image: uint8[64, 8, 8, 1], label: int64[64]}>")
        assert isinstance(batch, dict) and batch.padded is False
        assert "small" in repr(loader)


def test_every_dtype_as_torch(fc):
    """Tensors where this torch has the dtype; numpy arrays (never a silent
    reinterpretation) where it has not, e.g. uint16 before torch 2.3."""
    torch = pytest.importorskip("torch")
    src = fc.src["kinds"]
    # label_dtype=None: integer labels keep their stored type too
    with feedclient.Loader("kinds", 8, socket=fc.sock, shuffle=False, as_torch=True,
                           label_dtype=None) as loader:
        for batch in loader:
            for k, a in src.items():
                got = batch[k]
                try:
                    torch.from_numpy(a[:1])
                    takes = True
                except TypeError:
                    takes = False
                if takes:
                    assert isinstance(got, torch.Tensor), k
                    assert in_memfd(got.data_ptr(), got.numel() * got.element_size()), k
                    got = got.numpy()
                else:
                    assert isinstance(got, np.ndarray), k
                assert got.dtype == a.dtype, k
                np.testing.assert_array_equal(got, a[batch.indices], err_msg=k)
