"""Loader(pin_memory=True) (issue 21): the stream's data region is
registered with the CUDA driver loaded at run time (feed_stream_pin:
cuMemHostRegister, PORTABLE), so .to("cuda", non_blocking=True) of a
batch's tensors is a real asynchronous copy; unregistered when the stream
closes. Checked against the driver's test double (tests/gpu_double,
FEED_CUDA_DRIVER), whose counters a file shares (FAKE_CUDA_STATS); where
no driver is found, the Loader raises GpuUnavailable saying so.
"""

import ctypes
import json
import os
import subprocess
import sys

import pytest

from conftest import LIB, PYPKG

FAKE = LIB / "libfake_cuda.so"

# Opens a pinned Loader, reads a batch, closes; prints one JSON line with the
# batch's address range and the outcome.
READER = r"""
import json, sys
import feedclient
out = {}
try:
    with feedclient.Loader("small", 10, socket=sys.argv[1], shuffle=False, credits=1,
                           pin_memory=True) as loader:
        out["pinned"] = loader.pinned
        b = next(iter(loader))
        x = b["image"]
        out["ptr"], out["nbytes"] = x.ctypes.data, x.nbytes
        del b, x
except feedclient.FeedError as e:
    out["error"] = type(e).__name__ + ": " + str(e)
print(json.dumps(out))
"""


class Stats(ctypes.Structure):
    """The head of struct fake_cuda_stats (tests/gpu_double/fake_cuda.h)."""
    _fields_ = [("inits", ctypes.c_int), ("registers", ctypes.c_int),
                ("unregisters", ctypes.c_int), ("last_register_flags", ctypes.c_uint),
                ("last_register_ptr", ctypes.c_void_p),
                ("last_register_bytes", ctypes.c_size_t)]


def run(fc, env):
    e = {**os.environ, "PYTHONPATH": str(PYPKG), "FEEDCLIENT_LIB": str(LIB / "libfeedclient.so"),
         **env}
    res = subprocess.run([sys.executable, "-c", READER, fc.sock], env=e, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_pin_memory_registers_the_data_region(fc, tmp_path):
    if not FAKE.exists():
        pytest.skip("the CUDA driver's test double is not built")
    stats = tmp_path / "stats"
    out = run(fc, {"FEED_CUDA_DRIVER": str(FAKE), "FAKE_CUDA_STATS": str(stats)})
    assert "error" not in out, out
    assert out["pinned"] is True
    s = Stats.from_buffer_copy(stats.read_bytes()[:ctypes.sizeof(Stats)])
    assert s.registers == 1 and s.unregisters == 1          # once, undone at close
    assert s.last_register_flags & 0x01                      # PORTABLE: torch's context too
    lo = s.last_register_ptr
    assert lo <= out["ptr"] and out["ptr"] + out["nbytes"] <= lo + s.last_register_bytes


def test_pin_memory_without_a_driver_says_so(fc):
    out = run(fc, {"FEED_CUDA_DRIVER": "/nonexistent/libcuda.so.1"})
    err = out.get("error", "")
    assert err.startswith("GpuUnavailable: pin_memory=True: no CUDA driver to pin with"), out
    assert "/nonexistent/libcuda.so.1 not found" in err and "pin_memory=False" in err
