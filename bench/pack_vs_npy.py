#!/usr/bin/python3
"""bench/pack_vs_npy.py: feedclient.pack against `feedpack npy` on the same
arrays (issue 30: writing from Python should reach 80% of feedpack npy).

    bench/pack_vs_npy.py [--samples N] [--runs R] [--bin DIR]

Packs N samples of a Fashion-MNIST-shaped pair (uint8 28x28x1, int64
label; random bytes, so zstd works as hard as on real images) with
`feedpack npy`, Writer.write_batch (one C call per batch of columns),
Writer.write (one sample at a time), and from_iterable (2 workers), best
of R runs each, and prints MB/s and the share of feedpack npy's rate.
Needs the build (build/bin, build/lib); writes under a temporary
directory removed at the end.
"""
import argparse
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "client" / "python"))


def best(runs, fn, out):
    t = float("inf")
    for _ in range(runs):
        shutil.rmtree(out, ignore_errors=True)
        t0 = time.perf_counter()
        fn()
        t = min(t, time.perf_counter() - t0)
    return t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=60000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--bin", default=str(ROOT / "build" / "bin"))
    a = ap.parse_args()
    os.environ.setdefault("FEEDCLIENT_LIB", str(pathlib.Path(a.bin).parent / "lib"))
    from feedclient import pack

    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (a.samples, 28, 28, 1), dtype=np.uint8)
    y = rng.integers(0, 10, a.samples).astype(np.int64)
    fields = {"image": ("uint8", (28, 28, 1)), "label": ("int64", ())}
    mb = (x.nbytes + y.nbytes) / 1e6
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        np.save(tmp / "x.npy", x)
        np.save(tmp / "y.npy", y)
        out = tmp / "out"
        npy = [os.path.join(a.bin, "feedpack"), "npy", f"image={tmp / 'x.npy'}",
               f"label={tmp / 'y.npy'}", "-o", str(out)]

        def write_batch():
            with pack.Writer(out, fields, progress=False) as w:
                w.write_batch({"image": x, "label": y})

        def write():
            with pack.Writer(out, fields, progress=False) as w:
                for i in range(len(y)):
                    w.write({"image": x[i], "label": y[i]})

        rows = [("feedpack npy", lambda: subprocess.run(npy, check=True, capture_output=True)),
                ("Writer.write_batch", write_batch), ("Writer.write", write),
                ("from_iterable(workers=2)", lambda: pack.from_iterable(
                    ({"image": x[i], "label": y[i]} for i in range(len(y))), out, fields,
                    workers=2, progress=False))]
        times = [(name, best(a.runs, fn, out)) for name, fn in rows]
    base = times[0][1]
    print(f"{a.samples} samples, {mb:.1f} MB, best of {a.runs}")
    for name, t in times:
        print(f"{name:26s} {t:7.3f} s {mb / t:8.1f} MB/s {100 * base / t:5.0f}% of feedpack npy")


if __name__ == "__main__":
    main()
