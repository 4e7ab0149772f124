#!/usr/bin/python3
"""bench/tv_recipe.py: issue 31's target, the torchvision recipe through
from_torchvision against a DataLoader with the same transform object.

One Compose, torchvision's ResNet-50 training recipe per sample:

    RandomResizedCrop(176), RandomHorizontalFlip(), TrivialAugmentWide(),
    ToTensor() (v2: ToImage() + ToDtype(float32, scale=True)),
    Normalize(ImageNet mean, std), RandomErasing(0.1)

and one batch transform, RandomChoice([CutMix(alpha=1), MixUp(alpha=0.2)])
(the references' --cutmix-alpha 1.0 --mixup-alpha 0.2). With
torchvision.transforms.v2 importable (torchvision >= 0.16) every class is
v2's; else (Debian's torchvision 0.14) the per-sample classes are v1's and
CutMix / MixUp are this file's, the batch mixing of torchvision's
references in torch (a Beta(alpha, alpha) draw per batch, the batch mixed
with itself rolled by one, one-hot labels mixed alike). The output says
which ran ("transforms").

  feedd       feedclient.Loader("jpegs", B, **from_torchvision(T, mix)),
              device="cpu": float32 NCHW normalised batches and soft
              labels, CutMix / MixUp included, made by feedd's workers
              (feedd --workers W, started here).
  dataloader  torch.utils.data.DataLoader(ImageFolder(DIR, transform=T),
              batch_size=B, shuffle=True, num_workers=W,
              persistent_workers=True, pin_memory=False, default
              prefetch), the batch transform in collate_fn (in the
              workers, as torchvision's references/classification do);
              --mix-in loop applies it on the main thread instead.

The loop of each reads every batch: per-channel sums of the images (one
pass over every float) and the labels' sum. Each contender runs one
untimed epoch, then --runs timed epochs; img/s is the median over those
epochs, CPU s/epoch the median of the CPU time spent in each epoch: for
feedd its process's (/proc/PID/stat) plus this process's; for the
DataLoader this process's plus its workers'. Also printed: each side's
per-channel image means over the timed epochs (a sanity check, not the
test of the statistics target, which is
tests/python/test_feedclient_torchvision.py) and the load average at the
end (the figures are only as quiet as the machine).

    /usr/bin/python3 bench/tv_recipe.py [--set DIR | --count 1000]
        [--workers 2] [--batch 256] [--runs 3] [--bin build/bin]
        [--mix-in collate|loop] [--only feedd|dataloader] [--json]

--set DIR takes an existing ImageFolder (class folders of JPEGs); without
it bench/make_jpeg_set.py makes --count images in a temporary directory.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "client", "python"))

import torch  # noqa: E402

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
CUTMIX_ALPHA, MIXUP_ALPHA = 1.0, 0.2


# ---------------------------------------------------------------- the transforms

class MixUp:
    """MixUp on a batch (images float N x C x H x W, labels int64 N): the
    batch mixed with itself rolled by one, lam ~ Beta(alpha, alpha)."""

    def __init__(self, alpha, num_classes):
        self.alpha, self.num_classes = float(alpha), int(num_classes)

    def _lam(self):
        return float(torch.distributions.Beta(self.alpha, self.alpha).sample())

    def _one_hot(self, labels, dtype):
        return torch.nn.functional.one_hot(labels, self.num_classes).to(dtype)

    def __call__(self, images, labels):
        lam = self._lam()
        labels = self._one_hot(labels, images.dtype)
        images = images.roll(1, 0).mul_(1.0 - lam).add_(images.mul(lam))
        return images, labels.roll(1, 0).mul_(1.0 - lam).add_(labels.mul(lam))


class CutMix(MixUp):
    """CutMix on a batch: a box of area (1 - lam) of the image, centred at
    a uniform point and clipped, from the batch rolled by one; the labels
    mixed by the box's true area."""

    def __call__(self, images, labels):
        lam = self._lam()
        labels = self._one_hot(labels, images.dtype)
        h, w = images.shape[-2:]
        cy, cx = int(torch.randint(h, ())), int(torch.randint(w, ()))
        r = (1.0 - lam) ** 0.5
        bh, bw = int(r * h) // 2, int(r * w) // 2
        y0, y1, x0, x1 = max(cy - bh, 0), min(cy + bh, h), max(cx - bw, 0), min(cx + bw, w)
        images = images.clone()
        images[..., y0:y1, x0:x1] = images.roll(1, 0)[..., y0:y1, x0:x1]
        lam = 1.0 - (y1 - y0) * (x1 - x0) / (h * w)
        return images, labels.roll(1, 0).mul_(1.0 - lam).add_(labels.mul(lam))


def transforms(num_classes):
    """(name, per-sample Compose, batch transform)."""
    try:
        from torchvision.transforms import v2
        comp = v2.Compose([v2.RandomResizedCrop(176, antialias=True), v2.RandomHorizontalFlip(),
                           v2.TrivialAugmentWide(), v2.ToImage(),
                           v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD),
                           v2.RandomErasing(0.1)])
        mix = v2.RandomChoice([v2.CutMix(alpha=CUTMIX_ALPHA, num_classes=num_classes),
                               v2.MixUp(alpha=MIXUP_ALPHA, num_classes=num_classes)])
        return "torchvision.transforms.v2", comp, mix
    except ImportError:
        import torchvision.transforms as T
        comp = T.Compose([T.RandomResizedCrop(176), T.RandomHorizontalFlip(),
                          T.TrivialAugmentWide(), T.ToTensor(), T.Normalize(MEAN, STD),
                          T.RandomErasing(0.1)])
        mix = T.RandomChoice([CutMix(CUTMIX_ALPHA, num_classes),
                              MixUp(MIXUP_ALPHA, num_classes)])
        return "torchvision.transforms (v1) + bench CutMix/MixUp", comp, mix


# ---------------------------------------------------------------- CPU time

def proc_cpu_s(pid):
    """utime + stime of one process (all its threads), in seconds."""
    with open("/proc/%d/stat" % pid) as f:
        rest = f.read().rsplit(")", 1)[1].split()
    return (int(rest[11]) + int(rest[12])) / os.sysconf("SC_CLK_TCK")


def descendants(pid):
    kids = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/stat" % d) as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        for c in kids.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def cpu_s(daemon_pid):
    """This process and its descendants, feedd excluded; feedd apart."""
    total = proc_cpu_s(os.getpid())
    for c in descendants(os.getpid()):
        if c != daemon_pid:
            try:
                total += proc_cpu_s(c)
            except (OSError, IndexError):
                pass
    return total, proc_cpu_s(daemon_pid) if daemon_pid else 0.0


# ---------------------------------------------------------------- the runs

def epoch(loader, mix_in_loop, sums):
    """One pass over loader's batches, reading each; returns the samples."""
    n = 0
    for b in loader:
        if isinstance(b, dict):
            x, y = b["image"], b["label"]
        else:
            x, y = b
        if mix_in_loop is not None:
            x, y = mix_in_loop(x, y)
        if x.dtype != torch.float32 or x.dim() != 4 or x.shape[1] != 3:
            raise SystemExit("tv_recipe: batch images %s %s, not float32 N x 3 x H x W"
                             % (x.dtype, tuple(x.shape)))
        sums["x"] += x.sum(dim=(0, 2, 3)).double()
        sums["px"] += x.shape[0] * x.shape[2] * x.shape[3]
        sums["y"] += float(y.sum())
        n += x.shape[0]
    return n


def measure(name, loader, runs, daemon_pid, mix_in_loop=None):
    sums = {"x": torch.zeros(3, dtype=torch.float64), "px": 0, "y": 0.0}
    epoch(loader, mix_in_loop, sums)  # untimed: workers start, caches fill
    sums = {"x": torch.zeros(3, dtype=torch.float64), "px": 0, "y": 0.0}
    rates, cpus, own = [], [], []
    for _ in range(runs):
        c0, d0 = cpu_s(daemon_pid)
        t0 = time.perf_counter()
        n = epoch(loader, mix_in_loop, sums)
        wall = time.perf_counter() - t0
        c1, d1 = cpu_s(daemon_pid)
        rates.append(n / wall)
        cpus.append(c1 - c0 + d1 - d0)
        own.append(c1 - c0)
    return {"name": name, "img_per_s": statistics.median(rates), "img_per_s_runs": rates,
            "cpu_s_per_epoch": statistics.median(cpus), "cpu_s_runs": cpus,
            "client_cpu_s_per_epoch": statistics.median(own), "images_per_epoch": n,
            "channel_means": [round(v, 4) for v in (sums["x"] / sums["px"]).tolist()],
            "label_sum": sums["y"]}


def run_feedd(a, comp, mix, sock, daemon_pid):
    import feedclient
    from feedclient.torchvision import from_torchvision
    args = from_torchvision(comp, mix)
    with feedclient.Loader("jpegs", a.batch, socket=sock, seed=1, **args) as ld:
        r = measure("feedd", ld, a.runs, daemon_pid)
    r["pipeline"] = args["pipeline"]
    return r


def run_dataloader(a, comp, mix, daemon_pid):
    import torch.utils.data as tud
    import torchvision.datasets
    from torch.utils.data import default_collate
    ds = torchvision.datasets.ImageFolder(a.set, transform=comp)

    def collate(samples):
        return mix(*default_collate(samples))
    dl = tud.DataLoader(ds, batch_size=a.batch, shuffle=True, num_workers=a.workers,
                        persistent_workers=a.workers > 0, pin_memory=False,
                        collate_fn=collate if a.mix_in == "collate" else None)
    r = measure("dataloader", dl, a.runs, daemon_pid,
                mix_in_loop=mix if a.mix_in == "loop" else None)
    r["mix_in"] = a.mix_in
    return r


# ---------------------------------------------------------------- feedd

def start_feedd(a, work):
    feed = os.path.join(work, "jpegs.feed")
    subprocess.run([os.path.join(a.bin, "feedpack"), "imagefolder", a.set, "-o", feed,
                    "--name", "jpegs"], check=True, stdout=subprocess.DEVNULL)
    sock = os.path.join(work, "feedd.sock")
    log = open(os.path.join(work, "feedd.log"), "w")
    p = subprocess.Popen([os.path.join(a.bin, "feedd"), "--socket", sock, "--dataset",
                          "jpegs=" + feed, "--workers", str(a.workers)], stderr=log)
    import feedclient
    deadline = time.monotonic() + 30
    while True:
        try:
            feedclient.datasets(sock)
            return p, sock
        except Exception:
            if p.poll() is not None or time.monotonic() > deadline:
                p.kill()
                raise SystemExit("tv_recipe: feedd did not start (log: %s)" % log.name)
            time.sleep(0.05)


def classes(root):
    return sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", help="an ImageFolder of JPEGs (default: make --count of them)")
    ap.add_argument("--count", type=int, default=1000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--mix-in", choices=["collate", "loop"], default="collate")
    ap.add_argument("--only", choices=["feedd", "dataloader"])
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if a.runs < 1 or a.workers < 1 or a.batch < 1:
        ap.error("--runs, --workers and --batch must be at least 1")
    torch.set_num_threads(1)
    work = tempfile.mkdtemp(prefix="feedd-tv_recipe.")
    daemon = None
    try:
        if not a.set:
            a.set = os.path.join(work, "jpegs")
            subprocess.run([sys.executable, os.path.join(HERE, "make_jpeg_set.py"), "--out",
                            a.set, "--count", str(a.count)], check=True,
                           stdout=subprocess.DEVNULL)
        name, comp, mix = transforms(len(classes(a.set)))
        daemon, sock = start_feedd(a, work)
        out = {"transforms": name, "workers": a.workers, "batch": a.batch, "runs": a.runs}
        if a.only != "dataloader":
            out["feedd"] = run_feedd(a, comp, mix, sock, daemon.pid)
        if a.only != "feedd":
            out["dataloader"] = run_dataloader(a, comp, mix, daemon.pid)
        if "feedd" in out and "dataloader" in out:
            f, d = out["feedd"], out["dataloader"]
            out["speedup"] = f["img_per_s"] / d["img_per_s"]
            # /proc counts CPU time in clock ticks (10 ms): a tiny set can
            # leave feedd's side at 0, and then there is no ratio to give
            out["cpu_ratio"] = (d["cpu_s_per_epoch"] / f["cpu_s_per_epoch"]
                                if f["cpu_s_per_epoch"] > 0 else None)
        out["loadavg"] = os.getloadavg()
    finally:
        if daemon is not None:
            daemon.terminate()
            daemon.wait()
        shutil.rmtree(work, ignore_errors=True)
    report(out, a.json)


def report(out, as_json):
    if as_json:
        print(json.dumps(out))
        return
    print("transforms: %s; %d workers, batch %d, median of %d epochs"
          % (out["transforms"], out["workers"], out["batch"], out["runs"]))
    for k in ("feedd", "dataloader"):
        if k in out:
            r = out[k]
            print("%-10s %7.0f img/s  %6.2f CPU s/epoch  channel means %s"
                  % (k, r["img_per_s"], r["cpu_s_per_epoch"], r["channel_means"]))
    if "speedup" in out:
        cpu = ("%.2fx less CPU per epoch" % out["cpu_ratio"] if out["cpu_ratio"] is not None
               else "CPU ratio not measurable (feedd's CPU time below one clock tick)")
        print("feedd / dataloader: %.2fx img/s, %s" % (out["speedup"], cpu))
    print("load average: %.2f %.2f %.2f" % tuple(out["loadavg"]))


if __name__ == "__main__":
    main()
