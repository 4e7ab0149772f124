"""e2e_torch.py: feedd end to end on a real GPU, for scripts/gpu-check's run.

    python3 e2e_torch.py --feedd BIN --libdir DIR --data DIR --out FILE.json

Starts feedd (BIN, its libraries in DIR) on a private socket serving the
packed datasets under --data (fmnist: Fashion-MNIST's test split; jpeg: a
JPEG set cut from real photographs), then for each:

- reads the same batches three ways: u8 on the host, converted by this
  process on the GPU (Loader(device="cuda", dtype=torch.bfloat16)), and
  converted by feedd into its device slots (Loader(device_slots=N)), and
  checks both GPU results against torchvision's to_dtype + normalize of
  the u8 batch on the GPU: every element within 1 bf16 ulp, same indices;
- mixes Fashion-MNIST batches (Loader(mixup_alpha=..., cutmix_alpha=...,
  num_classes=10, label_smoothing=...)) on the GPU and on the CPU: the
  embedded mix kernels' images and soft labels equal their CPU twins',
  bit for bit;
- trains a small CNN for a few hundred steps through
  Loader(device="cuda"), timing how long the loop waited for data (stall
  %) while NVML samples the GPU's utilisation.

Prints one JSON object (and writes it to --out): per check, ok and the
figures. Exit 0 when every check passed, 1 otherwise. Needs torch with
CUDA; torchvision and NVML (pynvml) are used when present.
"""
import argparse
import ctypes
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
import torch

MEAN = {"fmnist": [0.2860], "jpeg": [0.485, 0.456, 0.406]}
STD = {"fmnist": [0.3530], "jpeg": [0.229, 0.224, 0.225]}
PIPE = {"fmnist": "random_crop(size=28, pad=2) | hflip(p=0.5)",
        "jpeg": "decode | random_resized_crop(size=224) | hflip(p=0.5)"}
BATCH = {"fmnist": 256, "jpeg": 64}
# FEED_E2E_DEVICE=cpu: a dry run of the plumbing on a machine without a GPU
# (device slots, which need the driver, are left out then).
DEV = os.environ.get("FEED_E2E_DEVICE", "cuda")


def start_feedd(args, sock, workers):
    env = dict(os.environ, LD_LIBRARY_PATH=args.libdir)
    cmd = [args.feedd, "--socket", sock, "--workers", str(workers)]
    for name in ("fmnist", "jpeg"):
        d = os.path.join(args.data, name)
        if os.path.isdir(d):
            cmd += ["--dataset", f"{name}={d}"]
    log = open(sock + ".log", "w")
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while not os.path.exists(sock):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"feedd did not start: {open(sock + '.log').read()[-2000:]}")
        time.sleep(0.05)
    return proc


def reference(u8, name):
    """torchvision's conversion of a u8 NHWC host batch on the GPU, as bf16."""
    x = u8.to(DEV).permute(0, 3, 1, 2) if u8.dim() == 4 else u8.to(DEV).unsqueeze(1)
    try:
        import torchvision.transforms.v2.functional as F
        x = F.to_dtype(x, torch.float32, scale=True)
        x = F.normalize(x, MEAN[name], STD[name])
    except ImportError:  # the same arithmetic by hand
        m = torch.tensor(MEAN[name], device=DEV).view(1, -1, 1, 1)
        s = torch.tensor(STD[name], device=DEV).view(1, -1, 1, 1)
        x = (x.float() / 255 - m) / s
    return x.to(torch.bfloat16)


def ulps(a, b):
    """Largest distance in bf16 steps between two bf16 tensors of one shape."""
    def ordered(t):
        i = t.contiguous().view(torch.int16).to(torch.int32)
        return torch.where(i < 0, -32768 - i, i)
    return int((ordered(a) - ordered(b)).abs().max().item())


def image_of(batch):
    for key in ("image", "pixels"):
        if key in batch.keys():
            return batch[key]
    return batch[list(batch.keys())[0]]


def compare(feedclient, sock, name, batches):
    """The three ways of reading name agree; returns the figures."""
    kw = dict(socket=sock, pipeline=PIPE[name], seed=7, shuffle=True, credits=4)
    mean, std = MEAN[name], STD[name]
    out = {"batches": 0, "max_ulp_device": 0, "max_ulp_slots": 0, "indices_same": True}
    host = feedclient.Loader(name, BATCH[name], as_torch=True, **kw)
    dev = feedclient.Loader(name, BATCH[name], device=DEV, dtype=torch.bfloat16,
                            mean=mean, std=std, **kw)
    if DEV == "cuda":
        slots = feedclient.Loader(name, BATCH[name], device_slots=0, dtype=torch.bfloat16,
                                  mean=mean, std=std, **kw)
    else:
        slots = feedclient.Loader(name, BATCH[name], device="cpu", dtype=torch.bfloat16,
                                  mean=mean, std=std, **kw)
    out["device_slots_granted"] = bool(getattr(slots, "device_slots", False))
    out["device_slots_reason"] = getattr(slots, "device_reason", "")
    with host, dev, slots:
        for i, (h, d, s) in enumerate(zip(host, dev, slots)):
            if i == batches:
                break
            ref = reference(image_of(h), name)
            got_d = image_of(d)
            out["max_ulp_device"] = max(out["max_ulp_device"], ulps(got_d, ref))
            x = image_of(s)
            got_s = x.to_torch() if hasattr(x, "to_torch") else x
            if got_s.device.type != DEV:
                out["slots_on"] = str(got_s.device)
                got_s = got_s.to(DEV)
            out["max_ulp_slots"] = max(out["max_ulp_slots"], ulps(got_s, ref))
            out["indices_same"] &= (list(np.asarray(h.indices)) == list(np.asarray(d.indices))
                                    == list(np.asarray(s.indices)))
            out["batches"] += 1
            del h, d, s, x, got_s, got_d, ref
    if DEV == "cuda":
        torch.cuda.synchronize()
    out["ok"] = (out["batches"] >= 1 and out["max_ulp_device"] <= 1 and
                 out["max_ulp_slots"] <= 1 and out["indices_same"])
    return out


def mix_check(feedclient, sock, batches):
    """Mixed batches on DEV equal the CPU twins' bit for bit (images, soft labels)."""
    kw = dict(socket=sock, pipeline=PIPE["fmnist"], seed=3, shuffle=True, credits=4,
              dtype=torch.bfloat16, mean=MEAN["fmnist"], std=STD["fmnist"], mixup_alpha=0.2,
              cutmix_alpha=1.0, num_classes=10, label_smoothing=0.1)
    out = {"batches": 0, "images_equal": True, "labels_equal": True}
    dev = feedclient.Loader("fmnist", BATCH["fmnist"], device=DEV, **kw)
    cpu = feedclient.Loader("fmnist", BATCH["fmnist"], device="cpu", **kw)
    with dev, cpu:
        for i, (d, c) in enumerate(zip(dev, cpu)):
            if i == batches:
                break
            out["images_equal"] &= torch.equal(image_of(d).cpu().view(torch.int16),
                                               image_of(c).view(torch.int16))
            out["labels_equal"] &= torch.equal(d["label"].cpu().view(torch.int32),
                                               c["label"].view(torch.int32))
            out["batches"] += 1
    out["ok"] = out["batches"] >= 1 and out["images_equal"] and out["labels_equal"]
    return out


class GpuSampler:
    """NVML utilisation of device 0, sampled every 50 ms in a thread."""

    def __init__(self):
        self.samples, self.error, self.stop = [], None, threading.Event()
        try:
            import pynvml
            pynvml.nvmlInit()
            self.nvml, self.h = pynvml, pynvml.nvmlDeviceGetHandleByIndex(0)
        except Exception as e:  # no pynvml: say so in the report
            self.nvml, self.error = None, f"NVML: {e}"
        self.t = threading.Thread(target=self.run, daemon=True)

    def run(self):
        while self.nvml and not self.stop.is_set():
            self.samples.append(self.nvml.nvmlDeviceGetUtilizationRates(self.h).gpu)
            time.sleep(0.05)

    def __enter__(self):
        self.t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.t.join()

    def mean(self):
        return round(sum(self.samples) / len(self.samples), 1) if self.samples else None


def train(feedclient, sock, steps):
    """A small CNN on Fashion-MNIST through Loader(device="cuda"): stall % and GPU use."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(1, 64, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(64, 128, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(128 * 7 * 7, 256), torch.nn.ReLU(),
        torch.nn.Linear(256, 10)).to(DEV)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loader = feedclient.Loader("fmnist", 256, socket=sock, pipeline=PIPE["fmnist"], seed=1,
                               device=DEV, dtype=torch.float32, mean=MEAN["fmnist"],
                               std=STD["fmnist"], credits=8)
    waited, done, losses = 0.0, 0, []
    def batches():  # epoch after epoch
        while True:
            yield from loader

    with loader, GpuSampler() as gpu:
        it = batches()
        t0 = time.perf_counter()
        while done < steps:
            w = time.perf_counter()
            b = next(it)   # the conversion is queued on torch's stream: no wait for it here
            waited += time.perf_counter() - w
            x, y = image_of(b), b["label"].to(DEV, non_blocking=True).long()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if done % 20 == 0:
                losses.append(round(float(loss), 4))
            done += 1
            del b, x, y
        if DEV == "cuda":
            torch.cuda.synchronize()
        total = time.perf_counter() - t0
    return {"steps": done, "samples_per_s": round(done * 256 / total),
            "stall_pct": round(100 * waited / total, 2), "gpu_util_mean_pct": gpu.mean(),
            "gpu_util_note": gpu.error or "", "loss_first_last": [losses[0], losses[-1]],
            "ok": len(losses) > 1 and losses[-1] < losses[0]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--feedd", required=True)
    ap.add_argument("--libdir", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--steps", type=int, default=300)
    args = ap.parse_args()
    report = {"torch": torch.__version__, "cuda": torch.cuda.is_available()}
    if DEV == "cuda" and not torch.cuda.is_available():
        print(json.dumps(report))
        return 77
    report["device"] = torch.cuda.get_device_name(0) if DEV == "cuda" else DEV
    # libfeedclient's one dependency beyond glibc comes from the pack
    ctypes.CDLL(os.path.join(args.libdir, "libprotobuf-c.so.1"), mode=ctypes.RTLD_GLOBAL)
    import feedclient
    tmp = tempfile.mkdtemp(prefix="feed-e2e-")
    sock = os.path.join(tmp, "feedd.sock")
    proc = start_feedd(args, sock, min(8, os.cpu_count() or 2))
    try:
        report["gpu_info"] = str(feedclient.gpu_info())
        for name in ("fmnist", "jpeg"):
            try:
                report[name] = compare(feedclient, sock, name, args.batches)
            except Exception as e:
                report[name] = {"ok": False, "error": f"{type(e).__name__}: {e}"}
        try:
            report["mix"] = mix_check(feedclient, sock, args.batches)
        except Exception as e:
            report["mix"] = {"ok": False, "error": f"{type(e).__name__}: {e}"}
        try:
            report["train"] = train(feedclient, sock, args.steps)
        except Exception as e:
            report["train"] = {"ok": False, "error": f"{type(e).__name__}: {e}"}
    finally:
        proc.terminate()
        report["feedd_exit"] = proc.wait(timeout=30)
        report["feedd_log_tail"] = open(sock + ".log").read()[-3000:]
    report["ok"] = all(report[k].get("ok") for k in ("fmnist", "jpeg", "mix", "train")) and \
        report["feedd_exit"] == 0
    with open(args.out, "w") as f:
        json.dump(report, f, indent=1)
    print(json.dumps({k: v for k, v in report.items() if k != "feedd_log_tail"}, indent=1))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
