#!/usr/bin/python3
"""bench/contenders.py: one contender of bench/run, one run, one JSON line.

Every Python loader bench/run compares runs here, in a process of its own
(so that bench/run can sum the memory of its process tree), through one
consumer, consume(): each batch's every field is read once the same way, a
uint64 view of its bytes summed in numpy (about one memory pass, as a
trainer's copy to the GPU would be; PEERS.md), then dropped.

    python3 bench/contenders.py NAME --workload W --data DIR [--socket S]
        [--workers N] [--batch B] [--epochs E] [--max-s S] [--max-batches N]
        [--step-ms X] [--timeline FILE] [--daemon-pid PID]
    python3 bench/contenders.py --prepare mosaic|litdata --workload W
        --data DIR --out DIR

Workloads (W) and what --data names (a directory bench/run prepared):
  fmnist  DIR/fashion-mnist.npz (images u8 [N,28,28], labels), random
          crop 28 with zero padding 2 + horizontal flip, batch 256
  jpeg    DIR/jpegs (class folders of JPEGs): RandomResizedCrop(224) +
          RandomHorizontalFlip, u8 HWC or CHW as each loader gives it
  recipe  the same files, torchvision's ResNet-50 recipe per sample
  tvrecipe  the same files, bench/tv_recipe.py's Compose (the recipe with
          ToTensor + Normalize, float32 NCHW) and CutMix/MixUp per batch:
          the DataLoader mixes in collate_fn, feedd-py runs the Compose
          through feedclient.from_torchvision (mixed on feedd's workers)
  tokens  DIR/tokens.u16 (sequences of 2048 u16 tokens): a random window
          of 1024 tokens of each sequence
Contenders (NAME): dataloader-0w, dataloader-Nw (N = --workers,
persistent workers), dataloader-batch-0w (fmnist: crop + flip once per
batch in numpy, the fastest DataLoader on it), dali (fmnist), dali-plain,
dali-fused (jpeg), spdl, mosaic, litdata, feedd-py (feedclient.Loader).
A contender that cannot run a workload exits 3 with one line saying why;
a missing package exits 4 with the import error.

The timed window opens when the first batch is done (start-up excluded,
reported as first_batch_ms: from building the loader to the first batch in
hand) and closes at the last batch or once --max-s have passed, whichever
comes first (or after --max-batches timed batches; a partial epoch is
fine: per-epoch figures scale by samples).
cpu_s is the CPU time of this process and all its descendants over the
window (plus feedd's, --daemon-pid, reported apart as daemon_cpu_s);
consumer_cpu_s this process's own threads. With --step-ms X each batch is
followed by a simulated training step: a sleep of X ms (a GPU's step
leaves the CPU free); --timeline FILE keeps when each batch was asked for
and got, for bench/run's stall plot.
"""
import argparse
import gzip
import json
import os
import random
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402

FMNIST_PIPE = "random_crop(size=28, pad=2) | hflip(p=0.5)"
JPEG_PIPE = "decode | random_resized_crop(size=224) | hflip(p=0.5)"
RECIPE_PIPE = ("decode | random_resized_crop(size=176) | hflip(p=0.5) | "
               "trivial_augment_wide | random_erasing(p=0.1)")
TOKENS_PIPE = "random_window(len=1024)"
PIPELINES = {"fmnist": FMNIST_PIPE, "jpeg": JPEG_PIPE, "recipe": RECIPE_PIPE,
             "tokens": TOKENS_PIPE}
SEQ_STORED, SEQ_LEN = 2048, 1024
FMNIST_IDX = "/usr/share/datasets/fashion-mnist"


class Unsupported(Exception):
    """This contender does not run this workload (exit 3)."""


# ---------------------------------------------------------------- the consumer

def touch(a):
    """Reads every byte of array-like a once: a uint64 view summed."""
    if hasattr(a, "numpy"):  # a torch tensor
        a = a.numpy()
    b = np.ascontiguousarray(a).reshape(-1).view(np.uint8)
    n8 = b.size // 8 * 8
    s = int(b[:n8].view(np.uint64).sum(dtype=np.uint64))
    if n8 < b.size:
        s += int(b[n8:].sum())
    return s, b.size


def fields(batch):
    if isinstance(batch, dict):
        return list(batch.values())
    if isinstance(batch, (list, tuple)):
        return list(batch)
    return [batch]


def _proc_cpu_s(pid):
    """utime + stime of one process (all its threads), in seconds."""
    with open("/proc/%d/stat" % pid) as f:
        rest = f.read().rsplit(")", 1)[1].split()
    return (int(rest[11]) + int(rest[12])) / os.sysconf("SC_CLK_TCK")


def _descendants(pid):
    kids = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
        kids.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        for c in kids.get(p, []):
            out.append(c)
            todo.append(c)
    return out


def tree_cpu_s():
    """CPU seconds of this process, its reaped children and its live
    descendants."""
    t = os.times()
    total = t.user + t.system + t.children_user + t.children_system
    for c in _descendants(os.getpid()):
        try:
            total += _proc_cpu_s(c)
        except (OSError, IndexError):
            pass
    return total


def consume(make_loader, epochs, max_s, step_ms=0.0, daemon_pid=None, timeline=False,
            max_batches=None):
    """Reads make_loader()'s batches for up to `epochs` epochs, `max_s`
    seconds of timed window or `max_batches` timed batches; returns the
    figures (see the module doc)."""
    t_open = time.perf_counter()
    loader = make_loader()
    first_ms = None
    samples = nbytes = batches = 0
    checksum = 0
    waits = []
    events = []   # (asked, got, done) per timed batch, seconds from the window start
    touch_s = 0.0
    start = end = cpu0 = own0 = d0 = None
    step_s = step_ms / 1000.0
    done = False
    for _ in range(epochs):
        it = iter(loader)
        while True:
            t0 = time.perf_counter()
            batch = next(it, None)
            t1 = time.perf_counter()
            if batch is None:
                break
            k, n = 0, 0
            for v in fields(batch):
                s, m = touch(v)
                checksum = (checksum + s) & 0xFFFFFFFFFFFFFFFF
                n += m
                k = len(v)
            del batch, v
            end = time.perf_counter()
            if start is None:
                first_ms = (end - t_open) * 1e3
                start = end
                cpu0, own0 = tree_cpu_s(), time.process_time()
                d0 = _proc_cpu_s(daemon_pid) if daemon_pid else 0.0
            else:
                samples, nbytes, batches = samples + k, nbytes + n, batches + 1
                waits.append(t1 - t0)
                touch_s += end - t1
                if timeline:
                    events.append((t0 - start, t1 - start, end - start))
            if step_s:
                time.sleep(max(0.0, step_s - (time.perf_counter() - end)))
                end = time.perf_counter()
            if batches > 0 and (end - start >= max_s or batches == max_batches):
                done = True
                break
        if done:
            break
    cpu = tree_cpu_s() - cpu0
    own = time.process_time() - own0
    dcpu = _proc_cpu_s(daemon_pid) - d0 if daemon_pid else None
    wall = end - start
    if batches == 0:
        raise SystemExit("contenders: one batch only; nothing timed (make the run longer)")
    r = {"samples": samples, "batches": batches, "wall_s": wall,
         "samples_per_s": samples / wall, "mb_per_s": nbytes / wall / 1e6,
         "bytes_per_sample": nbytes / samples,
         "stall_pct": 100.0 * sum(waits) / wall, "first_batch_ms": first_ms,
         "touch_us": touch_s / batches * 1e6, "cpu_s": cpu, "consumer_cpu_s": own,
         "daemon_cpu_s": dcpu, "step_ms": step_ms, "checksum": "%016x" % checksum}
    if timeline:
        r["events"] = events
    close = getattr(loader, "close", None)
    if close:
        close()
    return r


# ---------------------------------------------------------------- the data

def load_fmnist(data):
    """Fashion-MNIST's training split as numpy arrays (bench/run writes the
    .npz from Debian's IDX files; the same records feedpack packs)."""
    path = os.path.join(data, "fashion-mnist.npz")
    if not os.path.exists(path):
        def idx(name, off):
            with gzip.open(os.path.join(FMNIST_IDX, name)) as f:
                return np.frombuffer(f.read(), np.uint8, offset=off)
        img = idx("train-images-idx3-ubyte.gz", 16).reshape(-1, 28, 28)
        lab = idx("train-labels-idx1-ubyte.gz", 8)
        np.savez(path, images=img, labels=lab)
    z = np.load(path)
    return z["images"], z["labels"]


def load_tokens(data):
    t = np.memmap(os.path.join(data, "tokens.u16"), np.uint16, "r")
    return t[: len(t) // SEQ_STORED * SEQ_STORED].reshape(-1, SEQ_STORED)


def jpeg_root(data):
    return os.path.join(data, "jpegs")


def jpeg_files(data):
    """(path, label) of every JPEG of the set, in ImageFolder's order."""
    root = jpeg_root(data)
    out = []
    classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
    for k, c in enumerate(classes):
        for f in sorted(os.listdir(os.path.join(root, c))):
            out.append((os.path.join(root, c, f), k))
    return out


def crop_flip(img):
    """RandomCrop(28, padding=2) + RandomHorizontalFlip on one HW image."""
    from dataloader_baseline import np_crop_flip
    return np_crop_flip(img, 28, 2)


def tv_transform(workload):
    import torchvision.transforms as T
    if workload == "recipe":
        return T.Compose([T.RandomResizedCrop(176), T.RandomHorizontalFlip(),
                          T.TrivialAugmentWide(), T.PILToTensor(), T.RandomErasing(p=0.1)])
    return T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.PILToTensor()])


def tvrecipe_parts(data):
    """bench/tv_recipe.py's Compose and CutMix/MixUp for the JPEG set."""
    import tv_recipe
    _, comp, mix = tv_recipe.transforms(len(tv_recipe.classes(jpeg_root(data))))
    return comp, mix


def decode_transform(workload, jpeg_bytes_or_path):
    import io
    from PIL import Image
    src = jpeg_bytes_or_path
    if isinstance(src, (bytes, bytearray, memoryview)):
        src = io.BytesIO(src)
    with Image.open(src) as im:
        return tv_transform(workload)(im.convert("RGB"))


def window(seq):
    off = random.randint(0, SEQ_STORED - SEQ_LEN)
    return np.ascontiguousarray(seq[off:off + SEQ_LEN])


# ---------------------------------------------------------------- the loaders

def dataloader(a, per_batch=False):
    import torch
    import torch.utils.data as tud

    w = a.workers_of_name
    if a.workload == "fmnist":
        images, labels = load_fmnist(a.data)

        class DS(tud.Dataset):
            def __len__(self):
                return len(images)

            def __getitem__(self, i):
                if per_batch:
                    from dataloader_baseline import np_crop_flip_batch
                    if not hasattr(self, "rng"):
                        self.rng = np.random.default_rng(torch.initial_seed())
                    idx = np.asarray(i)
                    return {"image": torch.from_numpy(np_crop_flip_batch(
                        images[idx], 28, 2, self.rng)),
                        "label": torch.from_numpy(labels[idx].copy())}
                return {"image": torch.from_numpy(crop_flip(images[i])),
                        "label": int(labels[i])}
        ds = DS()
    elif a.workload == "tvrecipe":
        if per_batch:
            raise Unsupported("per-batch augmentation is the Fashion-MNIST form only")
        import torchvision.datasets
        comp, mix = tvrecipe_parts(a.data)
        ds = torchvision.datasets.ImageFolder(jpeg_root(a.data), transform=comp)

        def collate(samples):
            return mix(*tud.default_collate(samples))
        return lambda: tud.DataLoader(ds, batch_size=a.batch, shuffle=True, num_workers=w,
                                      persistent_workers=w > 0, drop_last=False,
                                      collate_fn=collate), len(ds)
    elif a.workload in ("jpeg", "recipe"):
        if per_batch:
            raise Unsupported("per-batch augmentation is the Fashion-MNIST form only")
        import torchvision.datasets
        ds = torchvision.datasets.ImageFolder(jpeg_root(a.data), transform=tv_transform(a.workload))
    elif a.workload == "tokens":
        if per_batch:
            raise Unsupported("per-batch form is the Fashion-MNIST one only")
        seqs = load_tokens(a.data)

        class DS(tud.Dataset):
            def __len__(self):
                return len(seqs)

            def __getitem__(self, i):
                return torch.from_numpy(window(seqs[i]).view(np.int16))
        ds = DS()
    else:
        raise Unsupported(a.workload)
    if per_batch:
        sampler = tud.BatchSampler(tud.RandomSampler(ds), a.batch, drop_last=False)
        return lambda: tud.DataLoader(ds, batch_size=None, sampler=sampler, num_workers=w,
                                      persistent_workers=w > 0), len(ds)
    return lambda: tud.DataLoader(ds, batch_size=a.batch, shuffle=True, num_workers=w,
                                  persistent_workers=w > 0, drop_last=False), len(ds)


def dali_fmnist(a):
    from nvidia.dali import fn, pipeline_def
    images, labels = load_fmnist(a.data)
    n = len(images)
    hwc = images.reshape(n, 28, 28, 1)

    class Source:
        """One epoch of shuffled batches, then StopIteration (DALI resets)."""

        def __init__(self):
            self.rng = np.random.default_rng(1)

        def __iter__(self):
            self.perm, self.pos = self.rng.permutation(n), 0
            return self

        def __next__(self):
            if self.pos >= n:
                raise StopIteration
            idx = self.perm[self.pos:self.pos + a.batch]
            self.pos += a.batch
            return [hwc[i] for i in idx], [labels[i:i + 1] for i in idx]

    @pipeline_def(batch_size=a.batch, num_threads=a.workers, device_id=None, seed=1)
    def pipe():
        img, lab = fn.external_source(source=Source(), num_outputs=2, layout=["HWC", ""],
                                      batch=True, cycle="raise")
        anchor = fn.random.uniform(values=[-2.0, -1.0, 0.0, 1.0, 2.0], shape=[2])
        img = fn.slice(img, anchor, [28.0, 28.0], axis_names="HW", normalized_anchor=False,
                       normalized_shape=False, out_of_bounds_policy="pad",
                       fill_values=0)
        img = fn.flip(img, horizontal=fn.random.coin_flip(probability=0.5))
        return img, lab

    p = pipe()
    p.build()

    class Loader:
        def __iter__(self):
            while True:
                try:
                    img, lab = p.run()
                except StopIteration:
                    p.reset()
                    return
                yield {"image": img.as_array(), "label": lab.as_array()}
    return (lambda: Loader()), n


def dali_jpeg(a, fused):
    if a.workload != "jpeg":
        raise Unsupported("DALI has no TrivialAugmentWide; the recipe is torchvision's")
    from images_peers import dali
    loader, n = dali(jpeg_root(a.data), "train", fused, a.workers, a.batch)
    return (lambda: loader), n


def spdl_loader(a):
    from spdl.pipeline import PipelineBuilder
    w = a.workers
    if a.workload == "fmnist":
        from dataloader_baseline import np_crop_flip_batch
        images, labels = load_fmnist(a.data)
        n = len(images)
        rng = np.random.default_rng(1)

        def op(idx):  # one batch, augmented at once in numpy (SPDL's own advice)
            r = np.random.default_rng(int(idx[0]))
            return {"image": np_crop_flip_batch(images[idx], 28, 2, r), "label": labels[idx]}

        def source():
            perm = rng.permutation(n)
            return (perm[i:i + a.batch] for i in range(0, n, a.batch))

        def build():
            return (PipelineBuilder().add_source(source()).pipe(op, concurrency=w)
                    .add_sink(4).build(num_threads=w))
    elif a.workload in ("jpeg", "recipe"):
        files = jpeg_files(a.data)
        n = len(files)

        def op(item):  # PIL decode + torchvision's ops, in SPDL's threads
            path, label = item
            return decode_transform(a.workload, path), label

        def collate(items):
            import torch
            return {"image": torch.stack([t for t, _ in items]),
                    "label": np.array([k for _, k in items])}

        def source():
            return iter(random.sample(files, n))

        def build():
            return (PipelineBuilder().add_source(source()).pipe(op, concurrency=w)
                    .aggregate(a.batch).pipe(collate).add_sink(4).build(num_threads=w))
    else:
        raise Unsupported("not set up for %s" % a.workload)

    class Loader:
        def __iter__(self):
            pl = build()
            with pl.auto_stop():
                for b in pl.get_iterator(timeout=300):
                    yield b
    return (lambda: Loader()), n


def peer_dataset_dir(a, name):
    return os.path.join(a.data, "%s-%s" % (name, a.workload))


def prepare(a):
    """Writes the records of a.workload in Mosaic's MDS or LitData's chunks."""
    out = peer_dataset_dir(a, a.prepare)
    if a.workload == "fmnist":
        images, labels = load_fmnist(a.data)
        items = ((images[i], int(labels[i])) for i in range(len(images)))
    elif a.workload in ("jpeg", "recipe"):
        items = ((open(p, "rb").read(), k) for p, k in jpeg_files(a.data))
    else:
        raise Unsupported("not set up for %s" % a.workload)
    if a.prepare == "mosaic":
        from streaming import MDSWriter
        cols = {"image": "ndarray:uint8:28,28" if a.workload == "fmnist" else "bytes",
                "label": "int"}
        with MDSWriter(out=out, columns=cols, compression="zstd") as w:
            for img, lab in items:
                w.write({"image": img, "label": lab})
    else:
        litdata = import_litdata()
        litdata.optimize(fn=litdata_record, inputs=list(items), output_dir=out,
                         # small chunks: LitData gives each worker whole chunks,
                         # so one 64 MB chunk leaves one of two workers idle
                         chunk_bytes="4MB", num_workers=1, mode="overwrite",
                         start_method="fork")  # a spawned worker lacks the shim


def litdata_record(item):
    """One record as litdata.optimize() stores it (module level: pickled)."""
    return {"image": item[0], "label": item[1]}


def import_litdata():
    """litdata, whose import builds a table of torch >= 2.3's unsigned
    dtypes: on Debian's torch 1.13 they are aliased to the signed ones of
    the same width first (our records are uint8 arrays, bytes and ints,
    which never reach that table's unsigned entries)."""
    import torch
    for bits in (16, 32, 64):
        if not hasattr(torch, "uint%d" % bits):
            setattr(torch, "uint%d" % bits, getattr(torch, "int%d" % bits))
    import litdata
    return litdata


def streaming_loader(a, kind):
    import torch
    import torch.utils.data as tud
    path = peer_dataset_dir(a, kind)
    if not os.path.isdir(path):
        raise SystemExit("contenders: %s missing (bench/run --prepare)" % path)
    wl = a.workload

    def aug(s):
        if wl == "fmnist":
            return {"image": torch.from_numpy(crop_flip(np.asarray(s["image"]))),
                    "label": int(s["label"])}
        return {"image": decode_transform(wl, s["image"]), "label": int(s["label"])}

    if kind == "mosaic":
        from streaming import StreamingDataset
        from streaming.base.util import clean_stale_shared_memory
        clean_stale_shared_memory()

        class DS(StreamingDataset):
            def __getitem__(self, i):
                return aug(super().__getitem__(i))
        ds = DS(local=path, shuffle=True, batch_size=a.batch)
        n = ds.num_samples
        mk = lambda: tud.DataLoader(ds, batch_size=a.batch, num_workers=a.workers,  # noqa: E731
                                    persistent_workers=a.workers > 0)
    else:
        litdata = import_litdata()

        class DS(litdata.StreamingDataset):
            def __getitem__(self, i):
                return aug(super().__getitem__(i))
        ds = DS(path, shuffle=True)
        n = len(ds)
        mk = lambda: litdata.StreamingDataLoader(ds, batch_size=a.batch,  # noqa: E731
                                                 num_workers=a.workers,
                                                 persistent_workers=a.workers > 0)
    if wl not in ("fmnist", "jpeg", "recipe"):
        raise Unsupported("not set up for %s" % wl)
    return mk, n


def feedd_loader(a):
    import feedclient
    ds = {"fmnist": "fashion-mnist", "jpeg": "jpegs", "recipe": "jpegs", "tvrecipe": "jpegs",
          "tokens": "tokens"}[a.workload]
    if a.workload == "tvrecipe":
        from feedclient.torchvision import from_torchvision
        args = from_torchvision(*tvrecipe_parts(a.data))
    else:
        args = {"pipeline": PIPELINES[a.workload]}

    def mk():
        return feedclient.Loader(ds, a.batch, seed=1, socket=a.socket, credits=4, **args)
    n = next(d.samples for d in feedclient.datasets(a.socket) if d.name == ds)
    return mk, n


def make(a):
    name = a.name
    if name.startswith("dataloader-batch-"):
        a.workers_of_name = int(name.rsplit("-", 1)[1].rstrip("w"))
        if a.workload != "fmnist":
            raise Unsupported("per-batch augmentation is the Fashion-MNIST form only")
        return dataloader(a, per_batch=True)
    if name.startswith("dataloader-"):
        a.workers_of_name = int(name.rsplit("-", 1)[1].rstrip("w"))
        return dataloader(a)
    if name == "dali":
        if a.workload != "fmnist":
            raise Unsupported("the dali contender is Fashion-MNIST's; images use dali-plain "
                              "and dali-fused")
        return dali_fmnist(a)
    if name in ("dali-plain", "dali-fused"):
        return dali_jpeg(a, name == "dali-fused")
    if name == "spdl":
        return spdl_loader(a)
    if name in ("mosaic", "litdata"):
        return streaming_loader(a, name)
    if name == "feedd-py":
        return feedd_loader(a)
    raise SystemExit("contenders: unknown contender '%s'" % name)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("name", nargs="?")
    p.add_argument("--workload", required=True, choices=sorted(list(PIPELINES) + ["tvrecipe"]))
    p.add_argument("--data", required=True)
    p.add_argument("--socket")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--max-s", type=float, default=1e9)
    p.add_argument("--max-batches", type=int)
    p.add_argument("--step-ms", type=float, default=0.0)
    p.add_argument("--timeline")
    p.add_argument("--daemon-pid", type=int)
    p.add_argument("--prepare", choices=["mosaic", "litdata"])
    a = p.parse_args()
    try:
        import torch
        torch.set_num_threads(1)
        if a.prepare:
            prepare(a)
            return 0
        if not a.name:
            p.error("a contender NAME is required")
        mk, n = make(a)
        r = consume(mk, a.epochs, a.max_s, a.step_ms, a.daemon_pid, bool(a.timeline),
                    a.max_batches)
    except Unsupported as e:
        print("unsupported: %s" % e, file=sys.stderr)
        return 3
    except ImportError as e:
        print("not installed: %s" % e, file=sys.stderr)
        return 4
    if a.timeline:
        with open(a.timeline, "w") as f:
            json.dump({"step_ms": a.step_ms, "events": r.pop("events")}, f)
    r.update(name=a.name, workload=a.workload, workers=a.workers, batch=a.batch,
             epoch_samples=n)
    if n:
        r["epochs_timed"] = r["samples"] / n
    print(json.dumps(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
