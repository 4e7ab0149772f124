#!/usr/bin/python3
"""PyTorch DataLoader baseline on a feedd dataset, read through feedformat.

The loader a user of today's tools would write for the same job: a map-style
Dataset over the same records (bench/feedformat.py, the same shards feedd
serves), DataLoader(num_workers=W, shuffle=True, persistent_workers), and the
same augmentation as feedd's `random_crop(size, pad) | hflip(p=0.5)`:
  crop_flip    numpy: zero pad, random crop, flip by slicing (the fast way)
  torchvision  torchvision's RandomCrop(size, padding) + RandomHorizontalFlip
               on uint8 tensors (the common way; needs python3-torchvision,
               which scripts/ do not install; with --source memory it ran
               at 43k samples/s against crop_flip's 82k here)
The consumer touches every byte of every batch (a sum), as feedbench does.
Where the records come from (--source):
  blocks   feedformat's random access: each worker keeps its last decoded
           block, so a shuffled epoch decodes a block for nearly every sample
  memory   every record decoded up front into numpy arrays in the main
           process, before the workers fork and share them (as torchvision's
           FashionMNIST holds its tensors): the DataLoader's best case, at
           the cost of the whole decoded dataset in memory

    /usr/bin/python3 bench/dataloader_baseline.py DIR [--workers 2] [--batch 256]
        [--epochs 2] [--augment crop_flip|torchvision|none] [--size 28 --pad 2]
        [--source blocks|memory] [--step-ms X] [--json]

Timing starts when the first batch arrives (worker start-up excluded) and
ends after the last; stall_pct is the share of that time spent waiting for
the next batch (with --step-ms, a simulated GPU step of X ms per batch).
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import feedformat  # noqa: E402
import random  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.utils.data  # noqa: E402


def np_crop_flip(img, size, pad):
    """RandomCrop(size, padding=pad) then RandomHorizontalFlip, on HWC uint8.
    Python's random is reseeded per DataLoader worker by torch."""
    h, w = img.shape[:2]
    padded = np.zeros((h + 2 * pad, w + 2 * pad) + img.shape[2:], img.dtype)
    padded[pad:pad + h, pad:pad + w] = img
    top = random.randint(0, h + 2 * pad - size)
    left = random.randint(0, w + 2 * pad - size)
    out = padded[top:top + size, left:left + size]
    if random.random() < 0.5:
        out = out[:, ::-1]
    return np.ascontiguousarray(out)


def load_all(ds):
    """Every fixed-size field of ds as one numpy array (n,) + shape."""
    cols = {f.name: [] for f in ds.schema}
    for f in ds.schema:
        if f.variable:
            raise SystemExit("--source memory: field '%s' is variable-length" % f.name)
    for b in range(ds.num_blocks):
        for name, col in ds.read_block(b).items():
            cols[name].append(np.array(col))
    return {name: np.concatenate(parts) for name, parts in cols.items()}


class FeedDataset(torch.utils.data.Dataset):
    def __init__(self, path, augment, size, pad, source="blocks"):
        self.ds = feedformat.Dataset(path)
        self.names = [f.name for f in self.ds.schema]
        self.image = next(f.name for f in self.ds.schema
                          if not f.variable and len(f.shape) in (2, 3))
        self.mem = load_all(self.ds) if source == "memory" else None
        self.tf = None
        self.augment, self.size, self.pad = augment, size, pad
        if augment == "torchvision":
            try:
                import torchvision.transforms as T
            except ImportError:
                raise SystemExit("--augment torchvision: torchvision is not installed "
                                 "(apt-get install python3-torchvision)")
            self.tf = T.Compose([T.RandomCrop(size, padding=pad),
                                 T.RandomHorizontalFlip(0.5)])

    def __len__(self):
        return len(self.ds)

    def __getitem__(self, i):
        if self.mem is not None:
            rec = {name: col[i:i + 1].reshape(col.shape[1:]) for name, col in self.mem.items()}
        else:
            rec = self.ds.get(i, copy=False)
        if self.augment == "crop_flip":
            img = torch.from_numpy(np_crop_flip(rec[self.image], self.size, self.pad))
        else:
            img = torch.from_numpy(rec[self.image].copy())
        if img.dim() == 3 and self.tf is not None:
            img = img.permute(2, 0, 1)  # HWC -> CHW, as torchvision wants
        if self.tf is not None:
            img = self.tf(img)
        out = {self.image: img}
        for n in self.names:
            if n != self.image:
                out[n] = torch.from_numpy(rec[n].copy())
        return out


def spin(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def run(args):
    dset = FeedDataset(args.dir, args.augment, args.size, args.pad, args.source)
    loader = torch.utils.data.DataLoader(
        dset, batch_size=args.batch, shuffle=True, num_workers=args.workers,
        persistent_workers=args.workers > 0, drop_last=False)
    samples = nbytes = 0
    waits = []
    start = None
    checksum = 0
    for _ in range(args.epochs):
        it = iter(loader)
        while True:
            t0 = time.perf_counter()
            try:
                batch = next(it)
            except StopIteration:
                break
            t1 = time.perf_counter()
            if start is None:
                start = t1
            else:
                waits.append(t1 - t0)
            for v in batch.values():
                checksum += int(v.sum())  # touch every byte
                nbytes += v.numel() * v.element_size()
            samples += len(batch[dset.image])
            if args.step_ms:
                spin(args.step_ms / 1000.0)
    wall = time.perf_counter() - start
    waits.sort()
    pct = lambda q: waits[min(len(waits) - 1, int(q * len(waits)))] * 1e6 if waits else 0.0
    return {
        "loader": "torch.DataLoader", "workers": args.workers, "batch": args.batch,
        "augment": args.augment, "source": args.source, "epochs": args.epochs,
        "samples": samples,
        "samples_per_s": samples / wall, "mb_per_s": nbytes / wall / 1e6,
        "stall_pct": 100.0 * sum(waits) / wall, "p50_us": pct(0.5), "p99_us": pct(0.99),
        "checksum": checksum,
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dir")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--augment", choices=["crop_flip", "torchvision", "none"], default="crop_flip")
    p.add_argument("--size", type=int, default=28)
    p.add_argument("--pad", type=int, default=2)
    p.add_argument("--source", choices=["blocks", "memory"], default="blocks")
    p.add_argument("--step-ms", type=float, default=0.0)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    torch.set_num_threads(1)
    r = run(args)
    if args.json:
        print(json.dumps(r))
    else:
        print("%s: %.0f samples/s, %.1f MB/s, stall %.1f%%" % (
            r["loader"], r["samples_per_s"], r["mb_per_s"], r["stall_pct"]))


if __name__ == "__main__":
    main()
