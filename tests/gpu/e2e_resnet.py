"""e2e_resnet.py: the headline measured, for scripts/gpu-check's run.

    python3 e2e_resnet.py --feedd BIN --libdir DIR --data DIR --out FILE.json
                          [--steps N] [--batch B] [--workers W]

Trains a ResNet-50 (torchvision's when present, else the same network
written below; random init, bf16 autocast, channels_last, SGD) on a JPEG
set with RandomResizedCrop(224) + horizontal flip, two ways, on the same
images and the same CPU cores:

- feedd: feedd decodes and augments on W workers (default: every core),
  Loader(device="cuda", dtype=bfloat16, layout="NHWC") converts on the GPU;
- DataLoader: torchvision's ImageFolder with PIL, RandomResizedCrop(224),
  RandomHorizontalFlip, num_workers=W, pin_memory, the conversion and
  normalisation on the GPU (as a tuned recipe does).

For each: images/s over the timed steps, the GPU's utilisation (NVML,
sampled every 50 ms), the share of the loop spent waiting for a batch
(stall %), and the CPU cores the data path used (CPU seconds of feedd, or
of the DataLoader's worker processes, over the wall time; the training
loop's own thread is counted in neither). Hybrid nvJPEG decode
is reported as not built where feedd lacks it.

data/jpeg is the packed set; data/jpeg_files the same JPEGs as an
ImageFolder tree for the DataLoader. Exit 0 when both ran, 77 without a
GPU (unless FEED_E2E_DEVICE=cpu: a dry run of the plumbing with a small
network), 1 on an error.
"""
import argparse
import ctypes
import json
import os
import sys
import tempfile
import time

import torch

import e2e_torch  # start_feedd, GpuSampler (beside this file in the pack)

DEV = os.environ.get("FEED_E2E_DEVICE", "cuda")
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def resnet50(classes):
    """torchvision's ResNet-50, or the same layers (bottlenecks 3-4-6-3)."""
    try:
        import torchvision
        return torchvision.models.resnet50(num_classes=classes)
    except ImportError:
        pass
    nn = torch.nn

    class Bottleneck(nn.Module):
        def __init__(self, cin, width, stride):
            super().__init__()
            cout = width * 4
            self.body = nn.Sequential(
                nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(True),
                nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width),
                nn.ReLU(True), nn.Conv2d(width, cout, 1, bias=False), nn.BatchNorm2d(cout))
            self.skip = nn.Identity() if stride == 1 and cin == cout else nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            return torch.relu(self.body(x) + self.skip(x))

    layers, cin = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(True),
                   nn.MaxPool2d(3, 2, 1)], 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for i in range(blocks):
            layers.append(Bottleneck(cin, width, stride if i == 0 else 1))
            cin = width * 4
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes)]
    return nn.Sequential(*layers)


def tiny(classes):
    """The dry run's network (FEED_E2E_DEVICE=cpu): the same loop, cheap."""
    nn = torch.nn
    return nn.Sequential(nn.Conv2d(3, 8, 7, 4, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                         nn.Flatten(), nn.Linear(8, classes))


def tree_cpu_seconds(pid):
    """CPU seconds (user + system) of pid and every process below it."""
    tick = os.sysconf("SC_CLK_TCK")
    kids, cpu = {}, {}
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        kids.setdefault(int(fields[1]), []).append(int(p))
        cpu[int(p)] = (int(fields[11]) + int(fields[12])) / tick
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        total += cpu.get(p, 0.0)
        todo += kids.get(p, [])
    return total


def train(batches, model, steps, warm, normalize):
    """Runs warm + steps steps on batches() (x on the device, y); figures."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    it = batches()
    waited, t0 = 0.0, None
    for step in range(warm + steps):
        if step == warm:
            if DEV == "cuda":
                torch.cuda.synchronize()
            t0, waited = time.perf_counter(), 0.0
        w = time.perf_counter()
        x, y = next(it)
        waited += time.perf_counter() - w
        x = normalize(x).contiguous(memory_format=torch.channels_last)
        with torch.autocast(DEV, dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    if DEV == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t0, waited


def run_feedd(args, sock, feedd_pid, net, classes):
    import feedclient
    loader = feedclient.Loader(
        "jpeg", args.batch, socket=sock, seed=1, credits=6, device=DEV,
        pipeline="decode | random_resized_crop(size=224) | hflip(p=0.5)",
        dtype=torch.bfloat16, mean=MEAN, std=STD, layout="NHWC")

    def batches():
        while True:
            for b in loader:
                # NHWC in memory, NCHW to torch: a channels_last view
                yield b["image"].permute(0, 3, 1, 2), b["label"].to(DEV, non_blocking=True).long()

    model = net(classes).to(DEV).to(memory_format=torch.channels_last)
    with loader, e2e_torch.GpuSampler() as gpu:
        cpu0, t = tree_cpu_seconds(feedd_pid), time.perf_counter()
        secs, waited = train(batches, model, args.steps, args.warm, lambda x: x)
        cpu = tree_cpu_seconds(feedd_pid) - cpu0
        wall = time.perf_counter() - t
    return figures(args, secs, waited, gpu, cpu, wall)


def run_dataloader(args, net, classes):
    from torchvision import datasets, transforms
    tf = transforms.Compose([transforms.RandomResizedCrop(224), transforms.RandomHorizontalFlip(),
                             transforms.PILToTensor()])
    ds = datasets.ImageFolder(os.path.join(args.data, "jpeg_files"), transform=tf)
    dl = torch.utils.data.DataLoader(ds, batch_size=args.batch, shuffle=True,
                                     num_workers=args.workers, pin_memory=DEV == "cuda",
                                     persistent_workers=True, drop_last=True, prefetch_factor=4)
    mean = torch.tensor(MEAN, device=DEV).view(1, 3, 1, 1) * 255
    std = torch.tensor(STD, device=DEV).view(1, 3, 1, 1) * 255

    def batches():
        while True:
            for x, y in dl:
                yield x.to(DEV, non_blocking=True), y.to(DEV, non_blocking=True)

    def workers_cpu():  # the worker processes' CPU: the tree less this process
        own = os.times()
        return tree_cpu_seconds(os.getpid()) - (own.user + own.system)

    model = net(classes).to(DEV).to(memory_format=torch.channels_last)
    with e2e_torch.GpuSampler() as gpu:
        cpu0, t = workers_cpu(), time.perf_counter()
        secs, waited = train(batches, model, args.steps, args.warm,
                             lambda x: ((x.float() - mean) / std).to(torch.bfloat16))
        cpu = workers_cpu() - cpu0
        wall = time.perf_counter() - t
    del dl
    return figures(args, secs, waited, gpu, cpu, wall)


def figures(args, secs, waited, gpu, cpu, wall):
    return {"steps": args.steps, "batch": args.batch, "images_per_s": round(args.steps * args.batch / secs),
            "stall_pct": round(100 * waited / secs, 2), "gpu_util_mean_pct": gpu.mean(),
            "gpu_util_note": gpu.error or "", "cpu_cores_used": round(cpu / wall, 2), "ok": True}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--feedd", required=True)
    ap.add_argument("--libdir", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--warm", type=int, default=20)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--workers", type=int, default=min(16, os.cpu_count() or 2))
    args = ap.parse_args()
    report = {"torch": torch.__version__, "workers": args.workers}
    if DEV == "cuda" and not torch.cuda.is_available():
        print(json.dumps(report))
        return 77
    report["device"] = torch.cuda.get_device_name(0) if DEV == "cuda" else DEV
    if DEV == "cuda":
        torch.backends.cudnn.benchmark = True
    net = resnet50 if DEV == "cuda" else tiny
    classes = len(os.listdir(os.path.join(args.data, "jpeg_files")))
    ctypes.CDLL(os.path.join(args.libdir, "libprotobuf-c.so.1"), mode=ctypes.RTLD_GLOBAL)
    tmp = tempfile.mkdtemp(prefix="feed-resnet-")
    sock = os.path.join(tmp, "feedd.sock")
    proc = e2e_torch.start_feedd(args, sock, args.workers)
    try:
        for name, fn in (("feedd", lambda: run_feedd(args, sock, proc.pid, net, classes)),
                         ("dataloader", lambda: run_dataloader(args, net, classes))):
            try:
                report[name] = fn()
            except Exception as e:
                report[name] = {"ok": False, "error": f"{type(e).__name__}: {e}"}
            print(name, json.dumps(report[name]), flush=True)
    finally:
        proc.terminate()
        report["feedd_exit"] = proc.wait(timeout=30)
    report["hybrid"] = {"ok": True, "note": "nvJPEG hybrid decode is not built into this feedd"}
    if report["feedd"].get("ok") and report["dataloader"].get("ok"):
        report["feedd_over_dataloader"] = round(
            report["feedd"]["images_per_s"] / max(1, report["dataloader"]["images_per_s"]), 2)
    report["ok"] = report["feedd"].get("ok", False) and report["dataloader"].get("ok", False) \
        and report["feedd_exit"] == 0
    with open(args.out, "w") as f:
        json.dump(report, f, indent=1)
    print(json.dumps(report, indent=1))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
