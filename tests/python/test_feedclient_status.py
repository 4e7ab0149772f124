"""feedclient.status(): what `feedctl status` shows, from Python, through a
real feedd: the daemon's counters, the cache, and this process's streams
with their facts; a closed stream is gone from it."""

import os

import pytest

import feedclient


def mine(st, batch):
    """This process's streams of batch size `batch` (other tests' may be open)."""
    return [s for s in st["streams"] if s["pid"] == os.getpid() and s["batch"] == batch]


def test_status_lists_a_stream_and_drops_it_when_closed(fc):
    with feedclient.Loader("small", 9, socket=fc.sock, shuffle=False, credits=3) as loader:
        it = iter(loader)
        next(it)
        st = feedclient.status(socket=fc.sock)
        assert st["workers"] == 2
        assert st["server_version"] == feedclient.__version__
        assert st["connections"] >= 2           # the loader's and status()'s own
        assert set(st["cache"]) == {"hits", "misses", "evictions", "bytes", "entries",
                                    "budget"}
        assert st["cache"]["misses"] >= 1       # a block was read
        # where JPEGs can decode: nvJPEG's version, or why the CPU only
        assert st["jpeg_decode"].startswith(("nvJPEG ", "CPU only: ")), st["jpeg_decode"]
        (s,) = mine(st, 9)
        assert s["kind"] == "stream" and s["dataset"] == "small" and s["group"] == ""
        # the daemon grants the Loader credits + 1: the batch being fetched
        assert s["credits"] == 4 and 1 <= s["credits_in_use"] <= 4
        assert s["members"] == 1 and s["batches"] >= 1 and s["samples"] >= 9
        assert s["uid"] == os.getuid()
        assert s["device"] == "" and s["device_bytes"] == 0   # no device slots asked
        assert s["shm_bytes"] > 0
        assert s["member_pids"] == [] and s["member_reader_wait_ns"] == []
        del it
    assert mine(feedclient.status(socket=fc.sock), 9) == []


def test_status_without_daemon_names_the_socket(tmp_path):
    sock = str(tmp_path / "none.sock")
    with pytest.raises(feedclient.DaemonNotRunning, match="none.sock"):
        feedclient.status(socket=sock)
