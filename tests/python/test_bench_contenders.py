"""bench/contenders.py's consumer: every loader bench/run compares is
charged through it, so it must read every byte once and count what it
says it counts."""
import os
import sys
import time

import numpy as np
import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
import contenders  # noqa: E402


def reference(a):
    b = np.ascontiguousarray(a).reshape(-1).view(np.uint8)
    n8 = b.size // 8 * 8
    return (int(b[:n8].view(np.uint64).sum(dtype=np.uint64)) + int(b[n8:].sum())), b.size


@pytest.mark.parametrize("shape", [(256, 28, 28), (3, 5, 7), (1,), (64, 1024)])
def test_bench_contenders_touch_reads_every_byte(shape):
    rng = np.random.default_rng(1)
    a = rng.integers(0, 256, shape, dtype=np.uint8)
    assert contenders.touch(a) == reference(a)
    assert contenders.touch(torch.from_numpy(a)) == reference(a)
    # a change in the last byte (past the uint64 part) changes the sum
    b = a.copy()
    b.reshape(-1)[-1] ^= 1
    assert contenders.touch(b)[0] != contenders.touch(a)[0]


def test_bench_contenders_touch_non_contiguous_and_wide_dtypes():
    a = np.arange(4096, dtype=np.uint16).reshape(64, 64)[:, ::2]
    s, n = contenders.touch(a)
    assert n == a.size * 2
    assert (s, n) == reference(np.ascontiguousarray(a))


class Batches:
    """epochs of k batches of n samples, each batch a dict of arrays."""

    def __init__(self, k, n, delay=0.0):
        self.k, self.n, self.delay = k, n, delay

    def __iter__(self):
        for i in range(self.k):
            if self.delay:
                time.sleep(self.delay)
            yield {"x": np.full((self.n, 4), i, np.uint8), "y": np.arange(self.n)}


def test_bench_contenders_consume_counts_after_the_first_batch():
    r = contenders.consume(lambda: Batches(5, 10), epochs=3, max_s=60)
    # 15 batches read, the first opens the window and is not counted
    assert r["batches"] == 14 and r["samples"] == 140
    assert r["bytes_per_sample"] == 4 + 8
    assert r["first_batch_ms"] >= 0 and r["wall_s"] > 0


def test_bench_contenders_consume_stops_at_max_batches():
    r = contenders.consume(lambda: Batches(100, 2), epochs=10, max_s=60, max_batches=7)
    assert r["batches"] == 7


def test_bench_contenders_consume_stall_sees_a_slow_loader():
    slow = contenders.consume(lambda: Batches(8, 2, delay=0.02), epochs=1, max_s=60,
                              step_ms=5, timeline=True)
    fast = contenders.consume(lambda: Batches(8, 2), epochs=1, max_s=60, step_ms=5)
    assert slow["stall_pct"] > 50 > fast["stall_pct"]
    ev = slow["events"]
    assert len(ev) == 7 and all(a <= g <= d for a, g, d in ev)
