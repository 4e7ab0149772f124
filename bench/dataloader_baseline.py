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

With --per-batch, the Dataset is indexed by a BatchSampler's lists
(DataLoader(batch_size=None)) and crop_flip runs once per batch, vectorised
in numpy (each sample still gets its own crop and flip): with
--workers 0 --source memory, the fastest DataLoader here.

    /usr/bin/python3 bench/dataloader_baseline.py DIR [--workers 2] [--batch 256]
        [--epochs 2] [--augment crop_flip|torchvision|none] [--size 28 --pad 2]
        [--source blocks|memory] [--per-batch] [--step-ms X] [--json]

The loop is bench/consume_batches.py's: timed from the end of the first
batch (worker start-up excluded) to the end of the last; stall_pct is the
share of that time spent waiting for the next batch (with --step-ms, a
simulated GPU step of X ms per batch).
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import feedformat  # noqa: E402
from consume_batches import consume  # noqa: E402
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


def np_crop_flip_batch(imgs, size, pad, rng):
    """np_crop_flip on every image of an (n, h, w, ...) batch at once, each
    with its own offsets and flip: one zero-padded copy, one gather of the
    windows, one flip of the flipped ones (5x faster here than a gather of
    every pixel by index, 1.7x faster than a loop over the samples)."""
    n, h, w = imgs.shape[:3]
    padded = np.zeros((n, h + 2 * pad, w + 2 * pad) + imgs.shape[3:], imgs.dtype)
    padded[:, pad:pad + h, pad:pad + w] = imgs
    top = rng.integers(0, h + 2 * pad - size + 1, n)
    left = rng.integers(0, w + 2 * pad - size + 1, n)
    windows = np.lib.stride_tricks.sliding_window_view(padded, (size, size), axis=(1, 2))
    out = np.moveaxis(windows[np.arange(n), top, left], (-2, -1), (1, 2))
    flip = rng.random(n) < 0.5
    out[flip] = out[flip, :, ::-1]
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


class BatchDataset(torch.utils.data.Dataset):
    """A FeedDataset read a batch at a time (the index is a list, from a
    BatchSampler) and augmented per batch in numpy: the DataLoader's fastest
    form here, one numpy call per batch instead of one per sample."""

    def __init__(self, samples):
        self.s = samples
        self.rng = None  # made in the process that reads, so workers differ

    def __len__(self):
        return len(self.s)

    def __getitem__(self, indices):
        s = self.s
        if self.rng is None:
            self.rng = np.random.default_rng(torch.initial_seed())
        if s.mem is not None:
            idx = np.asarray(indices)
            rec = {name: col[idx] for name, col in s.mem.items()}
        else:
            recs = [s.ds.get(i, copy=False) for i in indices]
            rec = {name: np.stack([r[name] for r in recs]) for name in s.names}
        if s.augment == "crop_flip":
            rec[s.image] = np_crop_flip_batch(rec[s.image], s.size, s.pad, self.rng)
        elif s.augment != "none":
            raise SystemExit("--per-batch: only --augment crop_flip or none")
        return {name: torch.from_numpy(np.ascontiguousarray(a)) for name, a in rec.items()}


def run(args):
    dset = FeedDataset(args.dir, args.augment, args.size, args.pad, args.source)
    if args.per_batch:
        dset = BatchDataset(dset)
        sampler = torch.utils.data.BatchSampler(torch.utils.data.RandomSampler(dset),
                                                args.batch, drop_last=False)
        loader = torch.utils.data.DataLoader(  # batch_size=None: the sampler's lists
            dset, batch_size=None, sampler=sampler, num_workers=args.workers,
            persistent_workers=args.workers > 0)
    else:
        loader = torch.utils.data.DataLoader(
            dset, batch_size=args.batch, shuffle=True, num_workers=args.workers,
            persistent_workers=args.workers > 0, drop_last=False)
    r = {"loader": "torch.DataLoader", "workers": args.workers, "batch": args.batch,
         "augment": args.augment, "per_batch": args.per_batch, "source": args.source}
    r.update(consume(loader, args.epochs, args.step_ms))
    return r


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
    p.add_argument("--per-batch", action="store_true")
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
