"""feedclient.Loader(device_slots=N): feedd converts each batch on the GPU
into device slots it hands over by CUDA IPC, and the batch's fixed fields
are DeviceArrays (__cuda_array_interface__) over them.

There is no GPU here: feedd and the reading process both load the test
double of the CUDA driver (tests/gpu_double, FEED_CUDA_DRIVER), whose
device memory is shared host memory, so a test can read what feedd put in
a device slot through the interface's pointer. Each reader runs in a fresh
process: the driver is loaded once per process, with the environment it
finds then. torch.as_tensor(x, device="cuda") itself needs a CUDA torch
and is not run here.
"""

import json
import os
import subprocess
import sys

import pytest

import feedclient
from conftest import LIB, PYPKG

torch = pytest.importorskip("torch")

FAKE = LIB / "libfake_cuda.so"

# Reads the first batches through device slots and, for comparison, the
# same batches converted on the CPU; prints one JSON line.
READER = r"""
import ctypes, json, sys
import numpy as np, torch
import feedclient
sock, mean, std = sys.argv[1], [0.5], [0.25]
out = {}
with feedclient.Loader("small", 8, socket=sock, shuffle=False, credits=2, device_slots=0,
                       dtype=torch.bfloat16, mean=mean, std=std) as slots, \
        feedclient.Loader("small", 8, socket=sock, shuffle=False, device="cpu",
                          dtype=torch.bfloat16, mean=mean, std=std) as cpu:
    out["granted"], out["reason"] = slots.device_slots, slots.device_reason
    same = []
    it_slots, it_cpu = iter(slots), iter(cpu)
    for i in range(5):   # more batches than credits: dropped batches gave theirs back
        b, c = next(it_slots), next(it_cpu)
        x = b["image"]
        if not isinstance(x, feedclient.DeviceArray):
            out["type"] = type(x).__name__
            break
        cai = x.__cuda_array_interface__
        out.update(shape=list(cai["shape"]), typestr=cai["typestr"], dtype=x.dtype,
                   version=cai["version"], stream=cai["stream"], repr=repr(x))
        raw = (ctypes.c_char * x.nbytes).from_address(cai["data"][0])
        got = np.frombuffer(raw, cai["typestr"]).reshape(cai["shape"])
        want = c["image"].view(torch.int16).numpy()
        lab = b["label"].__cuda_array_interface__
        labels = np.frombuffer((ctypes.c_char * b["label"].nbytes).from_address(
            lab["data"][0]), lab["typestr"])
        same.append(bool(np.array_equal(got, want)) and
                    labels.tolist() == c["label"].tolist() and
                    list(b.indices) == list(c.indices))
        del b, x, got, raw, labels
    out["same"] = same
print(json.dumps(out))
"""


def read(sock, env):
    pypath = os.pathsep.join(p for p in (str(PYPKG), os.environ.get("PYTHONPATH")) if p)
    res = subprocess.run([sys.executable, "-c", READER, sock],
                         env={**os.environ, "PYTHONPATH": pypath, **env},
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout.splitlines()[-1])


def start(feedd_factory, fc, tmp_path, monkeypatch, driver):
    """A feedd on the test datasets with driver as its CUDA driver (its
    events complete as recorded: its copies are done when enqueued)."""
    with monkeypatch.context() as m:
        m.setenv("FEED_CUDA_DRIVER", driver)
        m.setenv("FAKE_CUDA_EVENTS", "auto")
        return feedd_factory(tmp_path, "--dataset", f"small={fc.dir / 'small'}")


@pytest.fixture
def fake():
    if not FAKE.exists():
        pytest.skip("the driver's test double is not built")
    return str(FAKE)


def test_device_slots_hold_the_converted_batch(fc, feedd_factory, tmp_path, monkeypatch,
                                               fake):
    d = start(feedd_factory, fc, tmp_path, monkeypatch, fake)
    # no context on the GPU before a stream asks for device slots
    gpus = feedclient.status(d.sock)["gpus"]
    assert [(g["ordinal"], g["allowed"], g["context"]) for g in gpus] == [(0, True, False)]
    out = read(d.sock, {"FEED_CUDA_DRIVER": fake, "FAKE_CUDA_EVENTS": "auto"})
    if not out["granted"] and "built without CUDA kernels" in out["reason"]:
        pytest.skip("this build has no kernels")
    assert out["granted"] and out["reason"] == "", out
    assert feedclient.status(d.sock)["gpus"][0]["context"]
    assert out["same"] == [True] * 5, out
    assert out["shape"] == [8, 1, 8, 8] and out["typestr"] == "<i2" and out["dtype"] == "bf16"
    assert out["version"] == 3 and out["stream"] is None
    assert out["repr"] == "<feedclient.DeviceArray cuda:0 bf16[8, 1, 8, 8]>"
    d.stop()


def test_device_slots_refused_gives_host_batches(fc, feedd_factory, tmp_path, monkeypatch,
                                                 fake):
    """feedd without a driver: the Loader opens anyway, with host batches,
    and says why."""
    d = start(feedd_factory, fc, tmp_path, monkeypatch, "/nonexistent/libcuda.so.1")
    out = read(d.sock, {"FEED_CUDA_DRIVER": fake, "FAKE_CUDA_EVENTS": "auto"})
    if "built without CUDA kernels" in out["reason"]:
        pytest.skip("this build has no kernels")
    assert not out["granted"]
    assert out["reason"].startswith("feedd: feedd has no usable GPU: /nonexistent/libcuda.so.1"), \
        out
    assert out["type"] == "ndarray"
    d.stop()


def test_device_slots_arguments(fc):
    with pytest.raises(feedclient.InvalidArgument, match="device and device_slots: choose one"):
        feedclient.Loader("small", 4, socket=fc.sock, device="cpu", device_slots=0)
    with pytest.raises(feedclient.InvalidArgument, match="device_slots: a CUDA device ordinal"):
        feedclient.Loader("small", 4, socket=fc.sock, device_slots="cuda")
    with pytest.raises(feedclient.InvalidArgument, match="mean and std: 2 and 3 values"):
        feedclient.Loader("small", 4, socket=fc.sock, device_slots=0, mean=[0.1, 0.2],
                          std=[1, 1, 1])
