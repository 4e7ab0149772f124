#!/usr/bin/python3
"""Train a small CNN on Fashion-MNIST with batches from feedd.

Pack both splits, serve them, train (feedd does the augmentation, the
trainer runs no data workers):

    feedpack idx train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz \\
        -o /data/fm-train --name fashion-mnist
    feedpack idx t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz \\
        -o /data/fm-test --name fashion-mnist-test
    feedd --socket /tmp/feedd.sock --dataset fashion-mnist=/data/fm-train \\
        --dataset fashion-mnist-test=/data/fm-test &
    python3 train_fashion_mnist.py --socket /tmp/feedd.sock

`--loader dataloader` trains the same model from the same initial weights
with the same augmentation, through torch.utils.data.DataLoader
(num_workers=2) reading the IDX files in --idx, for comparison.

Prints, per epoch, the training samples/s and the share of the loop spent
waiting for data (time blocked in next() over loop time), then the test
accuracy.
"""
import argparse
import gzip
import os
import random
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

AUGMENT = "random_crop(size=28, pad=2) | hflip(p=0.5)"


def make_model():
    return nn.Sequential(
        nn.Conv2d(1, 16, 3), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),   # 16x13x13
        nn.Conv2d(16, 32, 3), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),  # 32x5x5
        nn.Flatten(), nn.Linear(32 * 5 * 5, 128), nn.ReLU(), nn.Linear(128, 10))


def to_input(batch):
    """u8 images [n, 28, 28, 1] -> float [n, 1, 28, 28], about mean 0 and std 1
    (Fashion-MNIST's pixels: mean 73, std 90); labels -> int64."""
    x = batch["image"].permute(0, 3, 1, 2).float().sub_(73).div_(90)
    return x, batch["label"].long()


# ---- feedd --------------------------------------------------------------

def feedd_loaders(args):
    import feedclient

    train = feedclient.Loader(args.train, args.batch, pipeline=AUGMENT, seed=args.seed,
                              socket=args.socket, as_torch=True)
    test = feedclient.Loader(args.test, 1000, shuffle=False, eval=True,
                             socket=args.socket, as_torch=True)
    return train, test


# ---- torch DataLoader, for comparison -----------------------------------

def read_idx(path, offset):
    with gzip.open(path, "rb") as f:
        return np.frombuffer(f.read(), np.uint8, offset=offset)


class FashionMNIST(torch.utils.data.Dataset):
    """The IDX files in memory; random crop (zero padding 2) and flip per sample."""

    def __init__(self, root, split, augment):
        self.images = read_idx(os.path.join(root, split + "-images-idx3-ubyte.gz"), 16)
        self.images = self.images.reshape(-1, 28, 28, 1)
        self.labels = read_idx(os.path.join(root, split + "-labels-idx1-ubyte.gz"), 8)
        self.augment = augment

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        img = self.images[i]
        if self.augment:  # torch seeds `random` in each worker
            img = np.pad(img, ((2, 2), (2, 2), (0, 0)))
            top, left = random.randint(0, 4), random.randint(0, 4)
            img = img[top:top + 28, left:left + 28]
            if random.random() < 0.5:
                img = img[:, ::-1]
        return {"image": torch.from_numpy(img.copy()), "label": int(self.labels[i])}


def dataloader_loaders(args):
    g = torch.Generator().manual_seed(args.seed)
    train = torch.utils.data.DataLoader(
        FashionMNIST(args.idx, "train", augment=True), batch_size=args.batch, shuffle=True,
        num_workers=2, persistent_workers=True, generator=g)
    test = torch.utils.data.DataLoader(FashionMNIST(args.idx, "t10k", augment=False),
                                       batch_size=1000)
    return train, test


# ---- training -----------------------------------------------------------

def train_epoch(model, opt, sched, loader):
    """One epoch; returns (samples, loop seconds, seconds blocked in next())."""
    model.train()
    samples, wait = 0, 0.0
    it = iter(loader)
    start = time.perf_counter()
    while True:
        t0 = time.perf_counter()
        batch = next(it, None)
        wait += time.perf_counter() - t0
        if batch is None:
            break
        x, y = to_input(batch)
        del batch  # x and y are copies: the batch (with feedd, its slot) can go now
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
        sched.step()
        samples += len(y)
    return samples, time.perf_counter() - start, wait


@torch.no_grad()
def accuracy(model, loader):
    model.eval()
    right = total = 0
    for batch in loader:
        x, y = to_input(batch)
        right += (model(x).argmax(1) == y).sum().item()
        total += len(y)
    return 100.0 * right / total, total


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--loader", choices=["feedd", "dataloader"], default="feedd")
    p.add_argument("--socket", help="feedd's socket (default $FEEDD_SOCKET, then "
                   "/run/feedd/feedd.sock)")
    p.add_argument("--train", default="fashion-mnist", help="feedd's training dataset")
    p.add_argument("--test", default="fashion-mnist-test", help="feedd's test dataset")
    p.add_argument("--idx", default="/usr/share/datasets/fashion-mnist",
                   help="--loader dataloader: the folder of the IDX .gz files")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)),
                   help="torch's compute threads (default: the CPUs this process may use)")
    args = p.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)  # the same initial weights for either loader
    model = make_model()
    train, test = (feedd_loaders if args.loader == "feedd" else dataloader_loaders)(args)
    opt = torch.optim.Adam(model.parameters())
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.01,
                                                total_steps=args.epochs * len(train))

    total = (0, 0.0, 0.0)
    for epoch in range(args.epochs):
        n, loop, wait = train_epoch(model, opt, sched, train)
        total = (total[0] + n, total[1] + loop, total[2] + wait)
        print("epoch %d: %d samples, %.0f samples/s, waiting for data %.1f%% of the loop"
              % (epoch, n, n / loop, 100.0 * wait / loop), flush=True)
    acc, n = accuracy(model, test)
    print("%s: test accuracy %.2f%% (%d images); training %.0f samples/s, "
          "waiting for data %.1f%% of the loop"
          % (args.loader, acc, n, total[0] / total[1], 100.0 * total[2] / total[1]))


if __name__ == "__main__":
    main()
