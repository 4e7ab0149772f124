"""kernels/convert_cpu.c (the CPU twins) against torch's own conversions.

The twin rounds fp32 to fp16 and bf16 on the float's bits (convert.h); here
torch's .half() and .to(torch.bfloat16) of the twin's own fp32 output must
give the same bits, over all 256 pixel values x several mean/std, which
checks the rounding independently of the C test's references. The fp32
output itself must be x * scale + bias rounded once (exact in float64 for
these parameters) and within a few ulp of torchvision's (x/255 - mean)/std
computed by torch in fp32.

The C side runs through `check_convert --probe` (tests/unit/check_convert.c).
Skipped when torch is not importable.
"""

import subprocess

import numpy as np
import pytest

torch = pytest.importorskip("torch")

# (mean, std) per channel: ImageNet's, plain x/255, [-1, 1], sets that
# overflow fp16 and reach its subnormals, and one that makes exact ties.
PARAMS = [
    ([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
    ([0.0, 0.0, 0.0], [1.0, 1.0, 1.0]),
    ([0.5, 0.5, 0.5], [0.5, 0.5, 0.5]),
    ([0.5, -3.0, 100.0], [1e-3, 7.0, 0.01]),
    ([0.0, 1.0, 0.25], [1e-6, 3e-5, 1e4]),
    ([0.3], [0.7]),
    ([0.1, 0.2, 0.3, 0.4], [0.9, 0.8, 0.7, 0.6]),
    # scale exactly 1 + 2^-8 and 1 + 2^-11: exact bf16 and fp16 ties (x = 1, ...)
    ([0.0, 0.0], [0.003906309604644775, 0.003919654525816441]),
]
MODERATE = 3  # the first sets: float64 holds x * scale + bias exactly


def run_probe(convert_probe, mean, std):
    """The twin's NHWC fp32, fp16 and bf16 outputs for a 1 x 256 x C image
    whose pixel x is x in every channel, each as a (256, C) array."""
    c = len(mean)
    res = subprocess.run([convert_probe, "--probe", str(c), ",".join(map(repr, mean)),
                          ",".join(map(repr, std))], capture_output=True, check=False)
    assert res.returncode == 0, res.stderr.decode()
    n = 256 * c
    assert len(res.stdout) == n * 8
    f32 = np.frombuffer(res.stdout, dtype=np.float32, count=n).reshape(256, c)
    f16 = np.frombuffer(res.stdout, dtype=np.uint16, count=n, offset=n * 4).reshape(256, c)
    bf16 = np.frombuffer(res.stdout, dtype=np.uint16, count=n, offset=n * 6).reshape(256, c)
    return f32, f16, bf16


def bits16(t):
    return t.contiguous().view(torch.int16).numpy().view(np.uint16)


@pytest.mark.parametrize("mean,std", PARAMS)
def test_convert_fp16_bf16_bits_match_torch(convert_probe, mean, std):
    f32, f16, bf16 = run_probe(convert_probe, mean, std)
    assert not np.isnan(f32).any()
    t = torch.from_numpy(f32.copy())
    want16 = bits16(t.half())
    wantbf = bits16(t.to(torch.bfloat16))
    bad = np.argwhere(f16 != want16)
    assert bad.size == 0, f"fp16: {len(bad)} differ, first x={bad[0][0]} ch={bad[0][1]}: " \
        f"{f16[tuple(bad[0])]:#06x} vs torch {want16[tuple(bad[0])]:#06x}"
    bad = np.argwhere(bf16 != wantbf)
    assert bad.size == 0, f"bf16: {len(bad)} differ, first x={bad[0][0]} ch={bad[0][1]}: " \
        f"{bf16[tuple(bad[0])]:#06x} vs torch {wantbf[tuple(bad[0])]:#06x}"


@pytest.mark.parametrize("mean,std", PARAMS[:MODERATE])
def test_convert_fp32_is_one_fma(convert_probe, mean, std):
    f32, _, _ = run_probe(convert_probe, mean, std)
    m = np.array(mean, dtype=np.float32).astype(np.float64)
    s = np.array(std, dtype=np.float32).astype(np.float64)
    scale = (1.0 / (255.0 * s)).astype(np.float32).astype(np.float64)
    bias = (-m / s).astype(np.float32).astype(np.float64)
    x = np.arange(256, dtype=np.float64)[:, None]
    want = (x * scale + bias).astype(np.float32)
    assert np.array_equal(f32.view(np.uint32), want.view(np.uint32))
    # torchvision's ToTensor + Normalize, in torch's fp32.
    tv = ((torch.arange(256, dtype=torch.float32)[:, None] / 255.0
           - torch.tensor(mean, dtype=torch.float32)) / torch.tensor(std, dtype=torch.float32))
    ulp = np.spacing(np.abs(tv.numpy())).clip(min=np.spacing(np.float32(1.0)))
    assert (np.abs(f32 - tv.numpy()) <= 8 * ulp).all()
