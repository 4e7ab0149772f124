#!/usr/bin/python3
"""How long a training loop spends in next() when a batch is ready, for
Loader(device="cpu") with normalize and mixup/cutmix (issue 31 item 5).

    PYTHONPATH=client/python /usr/bin/python3 bench/next_ready.py --bin build/bin
        [--batch 64] [--size 128] [--batches 200] [--epoch 16] [--step-ms 20]
        [--workers 2] [--loop for|del] [--json]

Packs a small dataset of random u8 images (size x size x 3, --epoch
batches of them) and labels into a temporary directory, starts
build/bin/feedd on a private socket (--workers, 2 by default), and runs a
loop that spins --step-ms after each batch, as a training step would, so
the next batch is built by the time next() is called. With
convert_on="feedd" (the workers convert and mix) the loop steps through
three lanes in turn, each next() after a step of its own, so that all see
the same machine at the same time: a Loader whose next() and releases run
in C (feedclient._fastiter; "c"), one on the Python path ("python"), and
the machine's floor (next() of itertools.repeat); then one
convert_on="loader" Loader (the loop's thread converts, as before). For
each: the median and 99th percentile of next()'s time (us), the median
time the previous batch's release takes (--loop for, the default: when
next() returns, as `for b in loader` lets it go; --loop del: after its
step, before next(), as `del b` does), and WAIT% as feedctl top reads it
(status()'s reader_wait_share) beside the loop's own (time in next() and
releases / wall). The first 4 batches, and the next() that ends an
epoch, are not counted.

Measured: bench/README.md (the figures, and where the time goes).
"""
import argparse
import contextlib
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

import feedclient
import feedclient._epoch
import feedclient._reuse

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def spin(ms):
    end = time.perf_counter() + ms / 1e3
    while time.perf_counter() < end:
        pass


def serve(bin_dir, d, size, n, workers):
    rng = np.random.default_rng(0)
    np.save(os.path.join(d, "image.npy"),
            rng.integers(0, 256, (n, size, size, 3), dtype=np.uint8))
    np.save(os.path.join(d, "label.npy"), rng.integers(0, 1000, n).astype(np.int64))
    subprocess.run([os.path.join(bin_dir, "feedpack"), "npy",
                    f"image={d}/image.npy", f"label={d}/label.npy", "-o", f"{d}/ds"],
                   check=True, capture_output=True)
    sock = os.path.join(d, "feedd.sock")
    proc = subprocess.Popen([os.path.join(bin_dir, "feedd"), "--socket", sock, "--workers", str(workers),
                             "--dataset", f"ds={d}/ds"], stderr=subprocess.DEVNULL)
    for _ in range(200):
        if os.path.exists(sock):
            break
        time.sleep(0.05)  # feedd starting: its socket appears when it serves
    return proc, sock


class Lane:
    """One Loader measured in the loop: its iterator and its figures."""

    def __init__(self, ld, path):
        self.ld, self.path = ld, path
        self.us, self.rel, self.in_next, self.b = [], [], 0.0, None
        self.it = self.iter()

    def iter(self):
        with native(self.path):
            return iter(self.ld)

    def step(self, i, args):
        """next() (timed), then the previous batch let go (timed apart)."""
        with native(self.path):
            t0 = time.perf_counter()
            try:
                nb = next(self.it)
            except StopIteration:   # the epoch's end: not a batch ready, not counted
                self.in_next += time.perf_counter() - t0
                self.it = self.iter()
                t0 = time.perf_counter()
                nb = next(self.it)
            t1 = time.perf_counter()
            self.b = nb   # `for b in loader`: the previous batch goes once next() returns
            del nb        # (--loop del: it went after its step, before next())
            t2 = time.perf_counter()
        self.in_next += t2 - t0
        if i >= 4:   # the first batches are built while the loop waits
            self.us.append((t1 - t0) * 1e6)
            self.rel.append((t2 - t1) * 1e6)


class Floor:
    """The machine's floor: next() of an iterator that does nothing
    (itertools.repeat), after a step of its own, as the lanes'."""

    path = "floor"

    def __init__(self):
        self.us, self.rel, self.in_next, self.b = [], [0.0], 0.0, None
        self.it = itertools.repeat({"image": None})

    def step(self, i, args):
        t0 = time.perf_counter()
        nb = next(self.it)
        t1 = time.perf_counter()
        del nb
        if i >= 4:
            self.us.append((t1 - t0) * 1e6)


@contextlib.contextmanager
def native(path):
    """feedclient._fastiter on (path "c") or off ("python") for what runs
    inside: the iterators made and the batches first delivered there."""
    ep, reuse = feedclient._epoch, feedclient._reuse
    saved = ep.NATIVE, reuse.C
    ep.NATIVE, reuse.C = path == "c", ep._native if path == "c" else None
    try:
        yield
    finally:
        ep.NATIVE, reuse.C = saved


def run(sock, args, convert_on, paths):
    """The loop over one Loader per path, their steps alternating (each
    next() after a step of its own), so that both paths see the same
    machine at the same time."""
    kw = dict(socket=sock, device="cpu", mean=MEAN, std=STD, mixup_alpha=0.8,
              cutmix_alpha=1.0, num_classes=1000, credits=4, convert_on=convert_on)
    with contextlib.ExitStack() as stack:
        lanes = [Lane(stack.enter_context(feedclient.Loader("ds", args.batch, **kw)), p)
                 for p in paths if p != "floor"] + [Floor() for p in paths if p == "floor"]
        t_start = time.perf_counter()
        for i in range(args.batches):
            for lane in lanes if i % 2 == 0 else lanes[::-1]:
                lane.step(i, args)
                spin(args.step_ms)
                if args.loop == "del" and lane.path != "floor":   # `b = next(it); step(b); del b`
                    t3 = time.perf_counter()
                    lane.b = None
                    t4 = time.perf_counter()
                    lane.in_next += t4 - t3
                    if i >= 4:
                        lane.rel[-1] = (t4 - t3) * 1e6
        wall = time.perf_counter() - t_start
        # feedd lists streams in the order they opened, as the lanes did
        streams = [s for s in feedclient.status(sock)["streams"]
                   if s["pipeline"] == lanes[0].ld.pipeline]
        out = []
        for k, lane in enumerate(lanes):
            lane.us.sort()
            st = streams[k:k + 1] if lane.path != "floor" and len(streams) == len(lanes) - (
                lanes[-1].path == "floor") else []
            out.append({"convert_on": convert_on, "path": lane.path,
                        "next_us_p50": statistics.median(lane.us),
                        "next_us_p99": lane.us[int(0.99 * (len(lane.us) - 1))],
                        "release_us_p50": statistics.median(lane.rel or [0.0]),
                        "loop_wait_pct": 100 * lane.in_next / wall,
                        "top_wait_pct": 100 * st[0]["reader_wait_share"] if st else None})
        return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bin", default="build/bin")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--size", type=int, default=128)
    p.add_argument("--batches", type=int, default=200)
    p.add_argument("--epoch", type=int, default=16, help="batches per epoch")
    p.add_argument("--loop", choices=("for", "del"), default="for",
                   help="for: the previous batch is alive during next() and goes when it "
                   "returns, as in `for b in loader`; del: the loop drops it after its step, "
                   "before next()")
    p.add_argument("--step-ms", type=float, default=20.0)
    p.add_argument("--workers", type=int, default=2,
                   help="feedd's workers (1 on a 2-core machine leaves the loop a core of its own)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as d:
        proc, sock = serve(args.bin, d, args.size, args.epoch * args.batch, args.workers)
        try:
            paths = (["c"] if feedclient._epoch._native is not None else []) + ["python", "floor"]
            out = run(sock, args, "feedd", paths) + run(sock, args, "loader", ["python"])
        finally:
            proc.terminate()
            proc.wait()
    for r in out:
        if args.json:
            print(json.dumps(r))
        else:
            if r["path"] == "floor":
                print(f"floor (next() of itertools.repeat after the same step): p50 "
                      f"{r['next_us_p50']:.1f} us, p99 {r['next_us_p99']:.1f} us")
                continue
            top = "-" if r["top_wait_pct"] is None else f"{r['top_wait_pct']:.2f}"
            print(f"convert_on={r['convert_on']:6s} {r['path']:6s} next() with a batch ready: p50 "
                  f"{r['next_us_p50']:.1f} us, p99 {r['next_us_p99']:.1f} us; the previous "
                  f"batch's release p50 {r['release_us_p50']:.1f} us; WAIT% loop "
                  f"{r['loop_wait_pct']:.2f}, feedctl top {top}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
