#!/usr/bin/python3
"""The Python loop over feedclient.Loader that bench/vs_dataloader_python.sh times.

    /usr/bin/python3 bench/feedclient_loop.py --socket SOCK [--dataset NAME]
        [--pipeline P] [--batch 256] [--epochs 20] [--seed 1] [--credits 4]
        [--no-touch] [--step-ms X] [--first-batch N] [--json]

By default, reads --epochs epochs of a running feedd through
feedclient.Loader(as_torch=True) in bench/consume_batches.py's loop (every
byte of every batch touched as a torch tensor, timed from the first batch;
the same loop bench/dataloader_baseline.py runs). --pipeline "" or
"identity" reads the records as stored. --no-touch leaves out the sums
(the loop then costs what the Python layer costs, to compare with
feedbench --no-touch); --step-ms X spins X ms after each batch, as a
training step would, so that batches wait for the reader.

With --first-batch N, instead: N times, the time from Loader(...) to the
first batch in hand (the stream opened, its regions mapped, one batch
built), then the Loader closed; prints the median and each run (ms).
The package (client/python) must be importable: PYTHONPATH=client/python.
"""
import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from consume_batches import consume  # noqa: E402

import torch  # noqa: E402

import feedclient  # noqa: E402


def loader(args):
    pipeline = args.pipeline if args.pipeline not in ("", "identity") else None
    return feedclient.Loader(args.dataset, args.batch, pipeline=pipeline, seed=args.seed,
                             credits=args.credits, socket=args.socket, as_torch=True)


def first_batch(args):
    ms = []
    for _ in range(args.first_batch):
        t0 = time.perf_counter()
        ld = loader(args)
        batch = next(iter(ld))
        ms.append((time.perf_counter() - t0) * 1e3)
        del batch
        ld.close()
    return {"loader": "feedclient", "first_batch_ms": statistics.median(ms), "runs_ms": ms}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--socket", required=True)
    p.add_argument("--dataset", default="fashion-mnist")
    p.add_argument("--pipeline", default="random_crop(size=28, pad=2) | hflip(p=0.5)")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--credits", type=int, default=4)
    p.add_argument("--no-touch", action="store_true")
    p.add_argument("--step-ms", type=float, default=0.0)
    p.add_argument("--first-batch", type=int, default=0, metavar="N")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    torch.set_num_threads(1)  # the consumer's sums, on this thread, as in the baseline
    if args.first_batch:
        r = first_batch(args)
    else:
        with loader(args) as ld:
            r = {"loader": "feedclient", "pipeline": ld.pipeline, "batch": args.batch,
                 "credits": args.credits, "touch": not args.no_touch, "step_ms": args.step_ms}
            r.update(consume(ld, args.epochs, args.step_ms, touch=not args.no_touch))
    if args.json:
        print(json.dumps(r))
    elif args.first_batch:
        print("first batch: median %.1f ms (runs: %s)"
              % (r["first_batch_ms"], ", ".join("%.1f" % m for m in r["runs_ms"])))
    else:
        print("feedclient: %.0f samples/s, %.1f us/batch, stall %.1f%%"
              % (r["samples_per_s"], r["us_per_batch"], r["stall_pct"]))


if __name__ == "__main__":
    main()
