"""feedclient.Loader(device=..., dtype=..., mean=..., std=...) through a real feedd.

device="cpu" converts with the kernels' CPU twins (feed_batch_to_device with
FEED_DEVICE_CPU): u8 images become normalized NCHW (or NHWC) tensors equal,
within a few fp32 ulp, to torchvision's ToTensor then Normalize of the
same records, and fp16 / bf16 outputs are exactly the round-to-nearest-even
of the fp32 ones; u16 tokens become int64; other fields are copied. Such
batches hold no slot. device="cuda" cannot run on a machine without a
usable GPU path: there Loader raises GpuUnavailable naming the reason the
capability query gives (no driver library, a driver too old).
"""

import os
import subprocess
import sys

import numpy as np
import pytest

import feedclient
from conftest import LIB, PYPKG

torch = pytest.importorskip("torch")
tv = pytest.importorskip("torchvision.transforms")

IMAGENET = ([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])


def torchvision_reference(images, mean, std):
    """ToTensor then Normalize, sample by sample, as a DataLoader would."""
    t = tv.Compose([tv.ToTensor(), tv.Normalize(mean, std)])
    return torch.stack([t(img) for img in images])


def ulps(a, b, images, mean, std):
    """Largest distance of float32 tensors a and b (NCHW, from u8 HWC images)
    in units of the last place of the computation's terms, x/(255 std) and
    mean/std: where the two cancel, both torchvision's two float operations
    and our one fused one are exact only to that scale, not to the result's."""
    m = torch.tensor(mean or [0.0] * 3, dtype=torch.float64).view(1, -1, 1, 1)
    sd = torch.tensor(std or [1.0] * 3, dtype=torch.float64).view(1, -1, 1, 1)
    x = torch.from_numpy(images).permute(0, 3, 1, 2).double()
    scale = (x / 255 / sd).abs() + (m / sd).abs()
    spacing = torch.from_numpy(np.spacing(scale.float().numpy()).astype(np.float64))
    return float(((a.double() - b.double()).abs() / spacing).max())


@pytest.mark.parametrize("mean,std", [IMAGENET, ([0.5] * 3, [0.5] * 3), (None, None)])
def test_cpu_fp32_matches_torchvision(fc, mean, std):
    src = fc.src["kinds"]["img"]  # (37, 5, 4, 3) u8
    seen = 0
    with feedclient.Loader("kinds", 8, socket=fc.sock, shuffle=True, seed=4, device="cpu",
                           mean=mean, std=std) as loader:
        for batch in loader:
            x = batch["img"]
            assert x.device.type == "cpu" and x.dtype == torch.float32
            assert tuple(x.shape) == (len(batch.indices), 3, 5, 4)
            ref = torchvision_reference(src[batch.indices], mean or [0.0] * 3, std or [1.0] * 3)
            assert ulps(x, ref, src[batch.indices], mean, std) <= 2, \
                "more than 2 ulp of the terms from torchvision"
            seen += len(batch.indices)
    assert seen == len(src)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_cpu_half_types_round_the_fp32_result(fc, dtype):
    mean, std = IMAGENET
    kw = dict(socket=fc.sock, shuffle=False, device="cpu", mean=mean, std=std)
    with feedclient.Loader("kinds", 37, **kw) as l32, \
            feedclient.Loader("kinds", 37, dtype=dtype, **kw) as lh:
        b32, bh = next(iter(l32)), next(iter(lh))
    assert bh["img"].dtype == dtype
    assert torch.equal(bh["img"].view(torch.int16), b32["img"].to(dtype).view(torch.int16))
    ref = torchvision_reference(fc.src["kinds"]["img"], mean, std).to(dtype)
    torch.testing.assert_close(bh["img"], ref, rtol=0, atol=float(ref.abs().max()) * 2**-7)


def test_cpu_nhwc_and_other_fields(fc):
    src = fc.src["kinds"]
    with feedclient.Loader("kinds", 37, socket=fc.sock, shuffle=False, device="cpu",
                           layout="NHWC") as loader:
        b = next(iter(loader))
    assert tuple(b["img"].shape) == (37, 5, 4, 3)
    want = torch.from_numpy(src["img"]).float() / 255
    torch.testing.assert_close(b["img"], want, rtol=2**-23, atol=0)  # 1/255 rounded once
    assert b["u32"].dtype == torch.int64           # tokens widen
    assert torch.equal(b["u32"], torch.from_numpy(src["u32"].astype(np.int64)))
    assert b["f32"].dtype == torch.float32         # others are copied
    assert torch.equal(b["f32"], torch.from_numpy(src["f32"]))


def test_cpu_tokens_become_int64(fc):
    src = fc.src["tokens"]
    with feedclient.Loader("tokens", 5, socket=fc.sock, shuffle=False, device="cpu") as loader:
        for b in loader:
            (name,) = b.keys()
            assert b[name].dtype == torch.int64
            assert torch.equal(b[name], torch.from_numpy(src[name][b.indices].astype(np.int64)))


def test_converted_batches_hold_no_slot(fc):
    """More batches alive than credits: each one's slot went back already."""
    with feedclient.Loader("small", 4, socket=fc.sock, shuffle=False, credits=2,
                           device="cpu") as loader:
        kept = [b for _, b in zip(range(6), loader)]
    assert len(kept) == 6 and all(b["image"].shape[1] == 1 for b in kept)


def test_bad_arguments(fc):
    with pytest.raises(feedclient.InvalidArgument, match="give device="):
        feedclient.Loader("small", 4, socket=fc.sock, dtype=torch.float16)
    with pytest.raises(feedclient.InvalidArgument, match="dtype: "):
        feedclient.Loader("small", 4, socket=fc.sock, device="cpu", dtype=torch.int32)
    with pytest.raises(feedclient.InvalidArgument, match="device: "):
        feedclient.Loader("small", 4, socket=fc.sock, device="tpu")
    # refused when the Loader is made, not at the first batch
    with pytest.raises(feedclient.InvalidArgument,
                       match=r"mean=\[0.1, 0.2\]: 2 values, but field 'image' has 1 channel"):
        feedclient.Loader("small", 4, socket=fc.sock, device="cpu", mean=[0.1, 0.2])


def run_cuda_loader(fc, env):
    """Loader(device='cuda') in a fresh process (the driver is loaded once
    per process): its exception's class and message."""
    code = (
        "import feedclient\n"
        "try:\n"
        f"    feedclient.Loader('small', 4, socket={str(fc.sock)!r}, device='cuda')\n"
        "    print('OPENED')\n"
        "except feedclient.FeedError as e:\n"
        "    print(type(e).__name__, str(e))\n"
        "print('usable', feedclient.gpu_info().usable)\n")
    pypath = os.pathsep.join(p for p in (str(PYPKG), os.environ.get("PYTHONPATH")) if p)
    out = subprocess.run([sys.executable, "-c", code],
                         env={**os.environ, "PYTHONPATH": pypath, **env},
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_cuda_without_driver_names_the_reason(fc):
    out = run_cuda_loader(fc, {"FEED_CUDA_DRIVER": "/nonexistent/libcuda.so.1"})
    assert out.startswith("GpuUnavailable ")
    assert "/nonexistent/libcuda.so.1 not found" in out
    assert "usable False" in out


def test_cuda_on_this_machine(fc):
    info = feedclient.gpu_info()
    if info.usable:
        pytest.skip("a usable GPU: tests/gpu covers it")
    out = run_cuda_loader(fc, {})
    reason = info.reason.replace("; converting on the CPU", "")   # it raises instead
    assert out.startswith("GpuUnavailable ") and reason in out, out


def test_cuda_with_old_driver_names_it(fc):
    fake = str(LIB / "libfake_cuda.so")
    if not os.path.exists(fake):
        pytest.skip("the driver's test double is not built")
    out = run_cuda_loader(fc, {"FEED_CUDA_DRIVER": fake, "FAKE_CUDA_VERSION": "12080"})
    assert out.startswith("GpuUnavailable ")
    assert "driver 12.8 too old: the kernels need CUDA 13.0" in out


def test_cuda_when_torch_has_none(fc):
    """libfeedclient reaches a (fake) GPU, torch reaches none: said so."""
    fake = str(LIB / "libfake_cuda.so")
    if not os.path.exists(fake) or torch.cuda.is_available():
        pytest.skip("needs the driver's test double and a torch without CUDA")
    out = run_cuda_loader(fc, {"FEED_CUDA_DRIVER": fake, "FAKE_CUDA_VERSION": "13000"})
    if "built without CUDA kernels" in out:
        pytest.skip("this build has no kernels")
    assert out.startswith("GpuUnavailable ") and "this torch cannot" in out, out
