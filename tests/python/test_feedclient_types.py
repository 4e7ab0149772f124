"""Types torch expects (issue 21): integer labels (one integer per
sample) arrive as int64 tensors under as_torch and device= (label_dtype=
keeps another type, None the stored one); .indices is a tensor under
as_torch; loader.fields describes what the batches hold after device=,
dtype=, layout= and label_dtype=.
"""

import numpy as np
import pytest

import feedclient

torch = pytest.importorskip("torch")

SCALAR_INTS = ("i8", "i16", "u32", "u64", "i64")   # 'kinds' fields of one integer per sample


def test_integer_labels_are_int64_under_as_torch(fc):
    src = fc.src["kinds"]
    with feedclient.Loader("kinds", 8, socket=fc.sock, shuffle=False, as_torch=True) as loader:
        b = next(iter(loader))
        for k in SCALAR_INTS:
            assert b[k].dtype == torch.int64, k
            assert b[k].tolist() == src[k][:8].astype(np.int64).tolist(), k
        assert b["mask"].dtype == torch.bool           # not an integer
        assert b["u16"].shape == (8, 2)                 # not one per sample: as stored
        loss = torch.nn.functional.cross_entropy(torch.zeros(8, 40), b["i8"].abs())
        assert torch.isfinite(loss)


def test_label_dtype_keeps_another_type(fc):
    with feedclient.Loader("kinds", 8, socket=fc.sock, shuffle=False, as_torch=True,
                           label_dtype=torch.int32) as loader:
        assert next(iter(loader))["i8"].dtype == torch.int32
    with feedclient.Loader("kinds", 8, socket=fc.sock, shuffle=False, as_torch=True,
                           label_dtype=None) as loader:
        assert next(iter(loader))["i8"].dtype == torch.int8
    with pytest.raises(feedclient.InvalidArgument, match="label_dtype='text'"):
        feedclient.Loader("kinds", 8, socket=fc.sock, as_torch=True, label_dtype="text")


def test_labels_are_int64_under_device(fc):
    with feedclient.Loader("kinds", 8, socket=fc.sock, shuffle=False, device="cpu") as loader:
        b = next(iter(loader))
        assert b["i8"].dtype == torch.int64 and b["i16"].dtype == torch.int64


def test_indices_are_a_tensor_under_as_torch(fc):
    with feedclient.Loader("small", 10, socket=fc.sock, shuffle=True, as_torch=True) as loader:
        b = next(iter(loader))
        assert isinstance(b.indices, torch.Tensor) and b.indices.dtype == torch.int64
        assert b["label"].tolist() == b.indices.tolist()
    with feedclient.Loader("small", 10, socket=fc.sock, shuffle=True) as loader:
        b = next(iter(loader))
        assert isinstance(b.indices, np.ndarray) and not b.indices.flags.writeable


def test_fields_describe_what_batches_hold(fc):
    with feedclient.Loader("kinds", 8, socket=fc.sock, shuffle=False, device="cpu",
                           dtype=torch.bfloat16) as loader:
        f = {x.name: x for x in loader.fields}
        b = next(iter(loader))
    assert (f["img"].dtype, f["img"].shape) == ("bf16", (3, 5, 4))
    assert f["img"].max_bytes == 3 * 5 * 4 * 2
    assert (f["u16"].dtype, f["u16"].shape) == ("i64", (2,))
    assert f["i8"].dtype == "i64" and f["f32"].dtype == "f32"
    assert tuple(b["img"].shape[1:]) == f["img"].shape
    with feedclient.Loader("kinds", 8, socket=fc.sock, device="cpu", layout="NHWC") as loader:
        f = {x.name: x for x in loader.fields}
    assert (f["img"].dtype, f["img"].shape) == ("f32", (5, 4, 3))
    with feedclient.Loader("kinds", 8, socket=fc.sock, as_torch=True) as loader:
        f = {x.name: x for x in loader.fields}
    assert (f["img"].dtype, f["img"].shape) == ("u8", (5, 4, 3))   # as stored
    assert f["i8"].dtype == "i64" and f["u16"].dtype == "u16"


FIELDS_READER = r"""
import json, sys
import torch, feedclient
with feedclient.Loader("small", 8, socket=sys.argv[1], shuffle=False, device_slots=0,
                       dtype=torch.bfloat16, layout="NHWC") as loader:
    b = next(iter(loader))
    print(json.dumps({"granted": loader.device_slots, "reason": loader.device_reason,
                      "fields": [[f.name, f.dtype, list(f.shape)] for f in loader.fields],
                      "shape": list(b["image"].shape) if loader.device_slots else None}))
"""


def test_fields_describe_device_slots(fc, feedd_factory, tmp_path, monkeypatch):
    import json
    import os
    import subprocess
    import sys
    from conftest import LIB, PYPKG
    fake = LIB / "libfake_cuda.so"
    if not fake.exists():
        pytest.skip("the driver's test double is not built")
    env = {"FEED_CUDA_DRIVER": str(fake), "FAKE_CUDA_EVENTS": "auto"}
    with monkeypatch.context() as m:
        for k, v in env.items():
            m.setenv(k, v)
        d = feedd_factory(tmp_path, "--dataset", f"small={fc.dir / 'small'}")
    res = subprocess.run([sys.executable, "-c", FIELDS_READER, d.sock], capture_output=True,
                         text=True, timeout=120,
                         env={**os.environ, **env, "PYTHONPATH": str(PYPKG)})
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout.splitlines()[-1])
    if not out["granted"]:
        pytest.skip(f"no device slots here: {out['reason']}")
    assert out["fields"] == [["image", "bf16", [8, 8, 1]], ["label", "i64", []]]
    assert out["shape"] == [8, 8, 8, 1]
    d.stop()
