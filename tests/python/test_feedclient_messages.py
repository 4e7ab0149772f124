"""Errors in the words of the Python arguments (issue 21): each names the
argument or environment variable the user set, its value and the allowed
range or the fix, for every case the issue lists; mean/std are checked
against the dataset's channels when the Loader is made, and one value is
broadcast in the pipeline's normalize() as in Loader(mean=).
"""

import os
import subprocess
import sys

import numpy as np
import pytest

import feedclient
from conftest import LIB, PYPKG


def test_credits_above_the_daemons_limit(fc):
    with pytest.raises(feedclient.InvalidArgument) as e:
        feedclient.Loader("small", 4, socket=fc.sock, credits=100)
    msg = str(e.value)
    assert msg.startswith("credits=100 is out of range: this feedd allows 1..63"), msg
    assert "limits.max_credits is 64" in msg and "pass credits <= 63" in msg
    assert not msg.startswith("open_stream")


def test_dataset_given_as_a_path(fc):
    with pytest.raises(feedclient.InvalidArgument) as e:
        feedclient.Loader("/path/to/packed", 4, socket=fc.sock)
    msg = str(e.value)
    assert "dataset='/path/to/packed': a name feedd serves, not a path" in msg
    assert "feedd --dataset NAME=/path/to/packed" in msg


def test_resume_with_another_shuffle(fc):
    with feedclient.Loader("small", 10, socket=fc.sock, shuffle=True, seed=3) as a:
        it = iter(a)
        next(it)
        state = a.state_dict()
    b = feedclient.Loader("small", 10, socket=fc.sock, shuffle=False, seed=3)
    with pytest.raises(feedclient.ResumeRefused) as e:
        b.load_state_dict(state)
    b.close()
    msg = str(e.value)
    assert msg.startswith("load_state_dict: the state was taken with shuffle=True, this "
                          "Loader has shuffle=False (or eval=True)"), msg
    assert "open the Loader with shuffle=True to resume" in msg


def test_resume_with_another_seed(fc):
    with feedclient.Loader("small", 10, socket=fc.sock, seed=3) as a:
        next(iter(a))
        state = a.state_dict()
    with feedclient.Loader("small", 10, socket=fc.sock, seed=4) as b:
        with pytest.raises(feedclient.ResumeRefused, match="taken with seed=3, this Loader "
                                                           "has seed=4"):
            b.load_state_dict(state)


def test_rank_from_the_environment_without_world_size(fc, monkeypatch):
    for k in ("RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("RANK", "1")
    with pytest.raises(feedclient.InvalidArgument) as e:
        feedclient.Loader("small", 4, socket=fc.sock)
    msg = str(e.value)
    assert msg.startswith("$RANK=1 must be below world_size=1 (the default: neither "
                          "$WORLD_SIZE nor $SLURM_NTASKS is set)"), msg
    assert "set $WORLD_SIZE too" in msg


@pytest.fixture(scope="module")
def two_streams(fc, feedd_factory, tmp_path_factory):
    d = tmp_path_factory.mktemp("two_streams")
    cfg = d / "feedd.yaml"
    cfg.write_text(f"limits:\n  max_streams: 2\n  max_credits: 8\n"
                   f"datasets:\n  - name: small\n    path: {fc.dir / 'small'}\n")
    return feedd_factory(d, "--config", cfg).sock


def test_one_loader_too_many(two_streams):
    a = feedclient.Loader("small", 4, socket=two_streams)
    b = feedclient.Loader("small", 4, socket=two_streams)
    with pytest.raises(feedclient.LimitReached) as e:
        feedclient.Loader("small", 4, socket=two_streams)
    a.close()
    b.close()
    msg = str(e.value)
    assert "2 streams open, limit max_streams is 2" in msg
    assert "each Loader holds one stream until close()" in msg
    assert "raise limits.max_streams" in msg


def test_credits_above_a_configured_limit(two_streams):
    """limits.max_credits: 8 in feedd's config: credits=8 asks for 9 slots."""
    with pytest.raises(feedclient.InvalidArgument) as e:
        feedclient.Loader("small", 4, socket=two_streams, credits=8)
    msg = str(e.value)
    assert msg.startswith("credits=8 is out of range: this feedd allows 1..7 (its "
                          "limits.max_credits is 8"), msg
    feedclient.Loader("small", 4, socket=two_streams, credits=7).close()


def test_pipeline_refusal_says_pipeline_once(fc):
    with pytest.raises(feedclient.BadPipeline) as e:
        feedclient.Loader("small", 4, socket=fc.sock, pipeline=" | ".join(["hflip"] * 17))
    msg = str(e.value)
    assert "pipeline: " in msg and "pipeline: pipeline:" not in msg, msg


def test_gpu_unavailable_does_not_claim_to_convert(fc):
    code = ("import feedclient\n"
            "try:\n"
            f"    feedclient.Loader('small', 4, socket={str(fc.sock)!r}, device='cuda')\n"
            "except feedclient.GpuUnavailable as e:\n"
            "    print(str(e))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120,
                         env={**os.environ, "PYTHONPATH": str(PYPKG),
                              "FEEDCLIENT_LIB": str(LIB / "libfeedclient.so"),
                              "FEED_CUDA_DRIVER": "/nonexistent/libcuda.so.1"}).stdout
    assert "/nonexistent/libcuda.so.1 not found" in out, out
    assert "converting on the CPU" not in out
    assert "pass device='cpu'" in out


def test_mean_checked_against_channels_at_construction(fc):
    pytest.importorskip("torch")
    # 'small' has one channel: three values are refused when the Loader is made
    with pytest.raises(feedclient.InvalidArgument) as e:
        feedclient.Loader("small", 4, socket=fc.sock, device="cpu", mean=[.5, .5, .5],
                          std=0.5)
    msg = str(e.value)
    assert "mean=[0.5, 0.5, 0.5]: 3 values, but field 'image' has 1 channel" in msg
    assert "give one value for all channels or 1" in msg


def test_one_mean_broadcast_in_loader_and_pipeline(fc):
    torch = pytest.importorskip("torch")
    kw = dict(socket=fc.sock, shuffle=False)
    # Loader(mean=0.5) on three channels equals three values
    with feedclient.Loader("kinds", 37, device="cpu", mean=0.5, std=0.25, **kw) as one, \
            feedclient.Loader("kinds", 37, device="cpu", mean=[.5] * 3, std=[.25] * 3,
                              **kw) as three:
        assert torch.equal(next(iter(one))["img"], next(iter(three))["img"])
    # and so does the pipeline's normalize(mean=0.5, std=0.25)
    p1 = "normalize(mean=0.5, std=0.25, field=img)"
    p3 = "normalize(mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25), field=img)"
    with feedclient.Loader("kinds", 37, pipeline=p1, **kw) as one, \
            feedclient.Loader("kinds", 37, pipeline=p3, **kw) as three:
        a, b = next(iter(one))["img"], next(iter(three))["img"]
        assert a.shape == (37, 3, 5, 4)
        np.testing.assert_array_equal(a, b)
