"""Which arithmetic the torch and torchvision in this process use, where
their versions differ, as the pipeline keys that select it in feedd.

feedd's ops reproduce torchvision's uint8 arithmetic; two places changed
between Debian's torch 1.13 / torchvision 0.14 and the newest ones, and
feedd has both, chosen per op (docs/augmentations.md):

- linspace=fused (trivial_augment_wide, rand_augment, auto_augment,
  aug_mix): torch 2.x's vectorised linspace (AVX2, AVX-512) computes each
  magnitude bin with one rounding (a fused multiply-add) where feedd's
  default (plain) rounds twice, as torch 1.13's bins come out, so a bin
  can differ in its last bit: TrivialAugmentWide's translate bin 15 is
  16.0 under torch 1.13 and 15.999999 under torch 2.15, and int() makes
  it 16 or 15 pixels.
- hue_cast=scaled (adjust_hue, color_jitter): torchvision 0.14's
  adjust_hue goes back to uint8 as (x * 255).to(uint8); later ones use
  convert_image_dtype, (x * 255.999).to(uint8), one level higher where
  x * 255 falls just below a whole number.

Each is found by asking the code itself, not its version number (torch
2.x without AVX2 computes linspace as 1.x does): linspace(0, 32, 31)[15],
and adjust_hue on one pixel whose result differs by one level. Only
modules the process already imported are asked: nothing here imports
torch or torchvision; without them the defaults (torch 1.x, torchvision
0.14) stand.

Threads: any thread (the probes run torch on two tiny tensors).
"""

import sys
from typing import Dict, Optional

# adjust_hue(RGB (250, 5, 128), 0.0655): green is p = v * (1 - s) = 5/255
# give or take a bit; x * 255 truncates it to 4, x * 255.999 to 5.
_HUE_PIXEL = (250, 5, 128)
_HUE_FACTOR = 0.0655


def linspace_variant() -> Optional[str]:
    """'fused' when this process's torch computes linspace with one
    rounding per bin; None (feedd's default, plain) otherwise."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    return "fused" if float(torch.linspace(0.0, 32.0, 31)[15]) != 16.0 else None


def hue_cast_variant(v2: bool = False) -> Optional[str]:
    """'scaled' when torchvision's adjust_hue (v2's with v2=True) casts
    back to uint8 as convert_image_dtype does; None (feedd's default,
    mul255: torchvision 0.14) otherwise."""
    torch = sys.modules.get("torch")
    name = "torchvision.transforms.v2.functional" if v2 else "torchvision.transforms.functional"
    functional = sys.modules.get(name)
    if torch is None or functional is None:
        return None
    px = torch.tensor(_HUE_PIXEL, dtype=torch.uint8).reshape(3, 1, 1)
    green = int(functional.adjust_hue(px, _HUE_FACTOR)[1, 0, 0])
    return "scaled" if green == _HUE_PIXEL[1] else None


def variant_keys(transform=None) -> Dict[str, str]:
    """The keys (linspace, hue_cast) this process's torch / torchvision
    need, for the ops of `transform` (a torchvision transform: its module
    says v1 or v2) or of v1 when None; only those that differ from
    feedd's defaults."""
    v2 = type(transform).__module__.startswith("torchvision.transforms.v2")
    out = {}
    lin = linspace_variant()
    if lin:
        out["linspace"] = lin
    hue = hue_cast_variant(v2)
    if hue:
        out["hue_cast"] = hue
    return out
