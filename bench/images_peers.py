#!/usr/bin/python3
"""The loaders feedd's image pipelines are measured against (bench/vs_images.sh).

On a folder of class subfolders of JPEGs (bench/make_jpeg_set.py), batches of
u8 images, shuffled for --mode train (RandomResizedCrop(224) and a random
horizontal flip) or --mode eval (shorter side to 256, centre 224x224 crop; in file order):

  dataloader  PyTorch DataLoader(num_workers=W, persistent_workers) over
              torchvision's ImageFolder (PIL decode) with RandomResizedCrop(224)
              + RandomHorizontalFlip (eval: Resize(256) + CenterCrop(224)),
              then PILToTensor: the standard ImageNet recipe, u8 CHW.
  dali-plain  NVIDIA DALI on the CPU only (device_id=None, num_threads=W):
              fn.readers.file + fn.decoders.image + fn.random_resized_crop
              + fn.flip (eval: fn.resize(resize_shorter=256) + fn.crop).
              --mode recipe: torchvision's ResNet-50 recipe per sample,
              RandomResizedCrop(176) + RandomHorizontalFlip +
              TrivialAugmentWide (on the PIL image) + PILToTensor +
              RandomErasing(p=0.1) (on the u8 tensor; value 0).
  dali-fused  DALI's fused form: fn.decoders.image_random_crop (decodes only
              the crop's region) + fn.resize to 224x224 + fn.flip. Train only.

DALI needs the nvidia-dali-cuda130 wheel (bench/vs_images.sh makes a venv for
it); run this file with that venv's python for the dali loaders.

The loop is bench/consume_batches.py's (every byte of every batch read as a
torch tensor; timed from the end of the first batch). cpu_s_per_epoch is the
CPU time (user + system) of this process and all its children (the
DataLoader's workers) over the whole consume call, divided by the epochs.

    python3 bench/images_peers.py DIR --loader dataloader|dali-plain|dali-fused
        [--mode train|eval|recipe] [--workers 2] [--batch 256] [--epochs 2] [--json]
"""
import argparse
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from consume_batches import consume  # noqa: E402

import torch  # noqa: E402


def tree_cpu_s():
    """CPU seconds of this process and its live descendants, plus the
    descendants already reaped."""
    import psutil
    me = psutil.Process()
    t = me.cpu_times()
    total = t.user + t.system + t.children_user + t.children_system
    for c in me.children(recursive=True):
        try:
            ct = c.cpu_times()
            total += ct.user + ct.system
        except psutil.NoSuchProcess:
            pass
    return total


def dataloader(root, mode, workers, batch):
    import torch.utils.data
    import torchvision.datasets
    import torchvision.transforms as T
    if mode == "train":
        tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.PILToTensor()])
    elif mode == "recipe":
        tf = T.Compose([T.RandomResizedCrop(176), T.RandomHorizontalFlip(),
                        T.TrivialAugmentWide(), T.PILToTensor(), T.RandomErasing(p=0.1)])
    else:
        tf = T.Compose([T.Resize(256), T.CenterCrop(224), T.PILToTensor()])
    ds = torchvision.datasets.ImageFolder(root, transform=tf)
    dl = torch.utils.data.DataLoader(ds, batch_size=batch, shuffle=mode != "eval",
                                     num_workers=workers,
                                     persistent_workers=workers > 0, drop_last=False)

    class Loader:
        def __iter__(self):
            for img, label in dl:
                yield {"image": img, "label": label}
    return Loader(), len(ds)


def dali(root, mode, fused, workers, batch):
    from nvidia.dali import fn, pipeline_def, types

    @pipeline_def(batch_size=batch, num_threads=workers, device_id=None, seed=1)
    def pipe():
        jpegs, labels = fn.readers.file(file_root=root, random_shuffle=mode == "train",
                                        name="reader")
        if mode == "eval":
            images = fn.decoders.image(jpegs, device="cpu", output_type=types.RGB)
            images = fn.resize(images, resize_shorter=256)
            return fn.crop(images, crop=(224, 224)), labels
        if fused:
            images = fn.decoders.image_random_crop(jpegs, device="cpu", output_type=types.RGB,
                                                   random_area=[0.08, 1.0],
                                                   random_aspect_ratio=[3 / 4, 4 / 3])
            images = fn.resize(images, resize_x=224, resize_y=224)
        else:
            images = fn.decoders.image(jpegs, device="cpu", output_type=types.RGB)
            images = fn.random_resized_crop(images, size=(224, 224))
        return fn.flip(images, horizontal=fn.random.coin_flip(probability=0.5)), labels

    p = pipe()
    p.build()
    n = p.epoch_size("reader")
    steps = math.ceil(n / batch)

    class Loader:
        def __iter__(self):
            for _ in range(steps):
                images, labels = p.run()
                yield {"image": torch.from_numpy(images.as_array()),
                       "label": torch.from_numpy(labels.as_array())}
    return Loader(), n


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("root")
    ap.add_argument("--loader", required=True, choices=["dataloader", "dali-plain", "dali-fused"])
    ap.add_argument("--mode", default="train", choices=["train", "eval", "recipe"])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if a.loader == "dali-fused" and a.mode == "eval":
        ap.error("dali-fused is a training pipeline")
    if a.loader != "dataloader" and a.mode == "recipe":
        ap.error("--mode recipe is the DataLoader's only")
    torch.set_num_threads(1)
    if a.loader == "dataloader":
        loader, n = dataloader(a.root, a.mode, a.workers, a.batch)
    else:
        loader, n = dali(a.root, a.mode, a.loader == "dali-fused", a.workers, a.batch)
    cpu0 = tree_cpu_s()
    r = consume(loader, a.epochs)
    r["cpu_s_per_epoch"] = (tree_cpu_s() - cpu0) / a.epochs
    r.update(loader=a.loader, mode=a.mode, workers=a.workers, images=n)
    if a.json:
        print(json.dumps(r))
    else:
        print("%s %s: %.0f img/s, %.1f CPU s/epoch (%d images, %d workers)"
              % (a.loader, a.mode, r["samples_per_s"], r["cpu_s_per_epoch"], n, a.workers))


if __name__ == "__main__":
    main()
