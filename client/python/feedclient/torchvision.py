"""from_torchvision: a torchvision transform as Loader keyword arguments.

    T = v2.Compose([v2.RandomResizedCrop(176), v2.RandomHorizontalFlip(),
                    v2.TrivialAugmentWide(), v2.ToImage(),
                    v2.ToDtype(torch.float32, scale=True),
                    v2.Normalize(mean, std), v2.RandomErasing(0.1)])
    mix = v2.RandomChoice([v2.CutMix(num_classes=1000), v2.MixUp(num_classes=1000)])
    loader = feedclient.Loader("imagenet", 256, **from_torchvision(T, mix))

Each per-sample transform becomes an op of feedd's pipeline (run on the
daemon's workers), in order; ToTensor / ToImage / ToDtype / Normalize say
what the batch holds at the end: float32 NCHW normalised on feedd's
workers (the pipeline's last normalize, so the loop receives floats and
does no conversion), or, with device="cuda", u8 batches the Loader
converts on the GPU (device=, dtype, mean, std). CutMix / MixUp (or a
RandomChoice of them) become the pipeline's batch op mix(...) after the
normalize, run on feedd's workers too (the loop does no conversion and no
mixing); with device="cuda" they become the Loader's mixup_alpha,
cutmix_alpha, mix_switch_prob and num_classes, run on the GPU.

Transforms are recognised by their class name and attributes, so the
classes of torchvision.transforms (v1) and torchvision.transforms.v2 both
work, and nothing here imports torchvision. A transform feedd has no op
for, or an argument it cannot honour (an interpolation other than
bilinear for a resize, expand=True, a Lambda), raises InvalidArgument
naming the transform and why; nothing is silently dropped. Where this
process's torch / torchvision compute an op differently from feedd's
default (torch 2.x's linspace, the later adjust_hue cast), the op gets
the key that selects their arithmetic (_tvcompat.py).

Threads: any thread; each call runs two tiny torch / torchvision
computations to learn their arithmetic (_tvcompat.py: one linspace,
adjust_hue of one pixel). Never: imports torch or
torchvision itself (it asks the modules the transform came from), opens a
connection.
"""

import numbers
from typing import Any, Dict, List, Optional

from . import _tvcompat
from .errors import InvalidArgument

__all__ = ["from_torchvision"]


class _Refused(Exception):
    """A transform that cannot be translated, with the reason."""


def _name(t) -> str:
    return type(t).__name__


def _num(x) -> str:
    """A number as the pipeline text writes it (at most 9 decimals)."""
    if isinstance(x, bool):
        raise _Refused(f"{x!r} is not a number")
    if isinstance(x, numbers.Integral):
        return str(int(x))
    if not isinstance(x, numbers.Real):
        x = float(x)  # a 0-d tensor
    s = f"{float(x):.9f}".rstrip("0").rstrip(".")
    return s if s not in ("", "-0") else "0"


def _tuple(xs) -> str:
    return "(" + ", ".join(_num(x) for x in xs) + ")"


def _interp(t, allowed=("nearest", "bilinear")) -> str:
    mode = getattr(t, "interpolation", None)
    if mode is None:
        return allowed[-1]
    name = str(getattr(mode, "value", mode)).lower()
    if name.startswith("interpolationmode."):
        name = name.split(".", 1)[1]
    if isinstance(mode, int) and not isinstance(mode, bool):
        name = {0: "nearest", 2: "bilinear"}.get(mode, str(mode))  # PIL codes
    if name not in allowed:
        raise _Refused(f"interpolation={name}: feedd resamples with {' or '.join(allowed)}")
    return name


def _fill(t, default=0) -> Optional[int]:
    """fill as one u8 level; None when the transform's fill is None (F.rotate's
    no-mask path)."""
    fill = getattr(t, "fill", default)
    if isinstance(fill, dict):  # v2: {type: value}
        vals = [v for v in fill.values()]
        fill = vals[0] if vals else None
        if any(v != fill for v in vals):
            raise _Refused(f"fill={getattr(t, 'fill')!r}: one value for every input type")
    if fill is None:
        return None
    if isinstance(fill, (list, tuple)):
        if not fill or any(v != fill[0] for v in fill):
            raise _Refused(f"fill={list(fill)}: feedd fills every channel with one value")
        fill = fill[0]
    if not 0 <= fill <= 255 or int(fill) != fill:
        raise _Refused(f"fill={fill!r}: a u8 level 0..255")
    return int(fill)


def _square(size, what="size") -> int:
    if isinstance(size, numbers.Integral):
        return int(size)
    size = list(size)
    if len(size) == 1:
        return int(size[0])
    if len(size) != 2 or size[0] != size[1]:
        raise _Refused(f"{what}={tuple(size)}: feedd crops squares (h == w)")
    return int(size[0])


def _sym(rng, what) -> Any:
    """A (-a, a) range as a; refused otherwise."""
    lo, hi = (float(v) for v in rng)
    if lo != -hi:
        raise _Refused(f"{what}=({_num(lo)}, {_num(hi)}): feedd draws ranges symmetric "
                       f"about 0")
    return hi


def _jitter(t, key, center):
    """ColorJitter's stored [lo, hi] back to the argument it came from."""
    rng = getattr(t, key, None)
    if rng is None:
        return 0
    lo, hi = (float(v) for v in rng)
    if center == 0:
        return _sym((lo, hi), key)
    if abs((center - lo) - (hi - center)) > 1e-9 and lo != 0:
        raise _Refused(f"{key}=({_num(lo)}, {_num(hi)}): feedd takes the symmetric "
                       f"form {key}=b, [max(0, 1 - b), 1 + b]")
    return hi - center


# ---- per-sample transforms ------------------------------------------------

def _rrc(t):
    scale, ratio = tuple(t.scale), tuple(t.ratio)
    _interp(t, ("bilinear",))
    if getattr(t, "antialias", True) is False:
        raise _Refused("antialias=False: feedd's random_resized_crop resamples with "
                       "antialiasing, as torchvision does on PIL images and v2 by default")
    return [f"random_resized_crop({_square(t.size)}, scale={_tuple(scale)}, "
            f"ratio={_tuple(ratio)})"]


def _resize(t):
    if getattr(t, "max_size", None) is not None:
        raise _Refused("max_size: not supported")
    _interp(t, ("bilinear",))
    size = t.size
    if isinstance(size, numbers.Integral) or len(size) == 1:
        n = size if isinstance(size, numbers.Integral) else size[0]
        return [f"resize({int(n)})"]
    return [f"resize(({int(size[0])}, {int(size[1])}))"]


def _random_crop(t):
    if getattr(t, "pad_if_needed", False):
        raise _Refused("pad_if_needed=True: not supported (give padding=)")
    size, pad = _square(t.size), getattr(t, "padding", None)
    ops = []
    if pad is not None:
        mode = getattr(t, "padding_mode", "constant")
        fill = _fill(t) or 0
        pads = [pad] if isinstance(pad, numbers.Integral) else list(pad)
        if mode == "constant" and fill == 0 and len(set(pads)) == 1:
            return [f"random_crop({size}, pad={int(pads[0])})"]
        ops.append(f"pad({_tuple(pads)}, fill={fill}, padding_mode={mode})")
    return ops + [f"random_crop({size})"]


def _pad(t):
    pad = t.padding
    pads = [pad] if isinstance(pad, numbers.Integral) else list(pad)
    return [f"pad({_tuple(pads)}, fill={_fill(t) or 0}, "
            f"padding_mode={getattr(t, 'padding_mode', 'constant')})"]


def _variant(t, key) -> str:
    """", key=value" when this process's torch / torchvision computes what
    the op's key selects differently from feedd's default (_tvcompat)."""
    v = _tvcompat.variant_keys(t).get(key)
    return f", {key}={v}" if v else ""


def _color_jitter(t):
    b, c, s = (_jitter(t, k, 1.0) for k in ("brightness", "contrast", "saturation"))
    h = _jitter(t, "hue", 0.0)
    return [f"color_jitter(brightness={_num(b)}, contrast={_num(c)}, saturation={_num(s)}, "
            f"hue={_num(h)}{_variant(t, 'hue_cast') if h else ''})"]


def _rotation(t):
    if getattr(t, "expand", False) or getattr(t, "center", None) is not None:
        raise _Refused("expand=True or center=: not supported")
    deg = _sym(t.degrees, "degrees")
    return [f"random_rotation({_num(deg)}, interpolation={_interp(t)}, fill={_fill(t) or 0})"]


def _affine(t):
    if getattr(t, "center", None) is not None:
        raise _Refused("center=: not supported")
    parts = [_num(_sym(t.degrees, "degrees"))]
    tr = getattr(t, "translate", None)
    if tr is not None:
        if tr[0] != tr[1]:
            raise _Refused(f"translate={tuple(tr)}: one fraction for both axes")
        parts.append(f"translate={_num(tr[0])}")
    sc = getattr(t, "scale", None)
    if sc is not None:
        parts.append(f"scale={_tuple(sc)}")
    sh = getattr(t, "shear", None)
    if sh is not None:
        sh = list(sh)
        if len(sh) == 4 and (sh[2] or sh[3]):
            raise _Refused("shear along y: feedd shears along x only")
        parts.append(f"shear={_num(_sym(sh[:2], 'shear'))}")
    parts += [f"interpolation={_interp(t)}", f"fill={_fill(t) or 0}"]
    return [f"random_affine({', '.join(parts)})"]


def _blur(t):
    k = _square(t.kernel_size, "kernel_size")
    lo, hi = (float(v) for v in t.sigma)
    return [f"gaussian_blur({k}, sigma=({_num(lo)}, {_num(hi)}))"]


def _auto_fill_nearest(t):
    """The auto-augment ops run with nearest and no fill, their defaults."""
    if _interp(t) != "nearest" or _fill(t, None) not in (None, 0):
        raise _Refused("feedd's auto-augment ops use interpolation=nearest, fill=None")


def _trivial(t):
    _auto_fill_nearest(t)
    return [f"trivial_augment_wide(num_magnitude_bins={int(t.num_magnitude_bins)}"
            f"{_variant(t, 'linspace')})"]


def _aug_mix(t):
    fill = _fill(t, None)
    depth = int(t.chain_depth)
    return [f"aug_mix(severity={int(t.severity)}, mixture_width={int(t.mixture_width)}, "
            f"chain_depth={depth if depth > 0 else -1}, alpha={_num(t.alpha)}, "
            f"all_ops={'true' if t.all_ops else 'false'}, interpolation={_interp(t)}"
            + ("" if fill is None else f", fill={fill}") + _variant(t, "linspace") + ")"]


def _rand_augment(t):
    _auto_fill_nearest(t)
    return [f"rand_augment(num_ops={int(t.num_ops)}, magnitude={int(t.magnitude)}, "
            f"num_magnitude_bins={int(t.num_magnitude_bins)}{_variant(t, 'linspace')})"]


def _auto_augment(t):
    _auto_fill_nearest(t)
    policy = str(getattr(t.policy, "value", t.policy)).lower().split(".")[-1]
    return [f"auto_augment(policy={policy}{_variant(t, 'linspace')})"]


def _erasing(t):
    v = t.value
    if isinstance(v, str):
        if v != "random":
            raise _Refused(f"value={v!r}: a number, one per channel, or 'random'")
        val = "random"
    elif isinstance(v, (list, tuple)):
        val = _tuple(v) if len(v) > 1 else _num(v[0])
    else:
        val = _num(v)
    return [f"random_erasing({_num(t.p)}, scale={_tuple(t.scale)}, ratio={_tuple(t.ratio)}, "
            f"value={val})"]


def _perspective(t):
    return [f"random_perspective({_num(t.distortion_scale)}, p={_num(t.p)}, "
            f"interpolation={_interp(t)}, fill={_fill(t) or 0})"]


def _noise(t):
    return [f"gaussian_noise(mean={_num(t.mean)}, sigma={_num(t.sigma)}, "
            f"clip={'true' if getattr(t, 'clip', True) else 'false'})"]


def _grayscale(t):
    return [f"rgb_to_grayscale({int(getattr(t, 'num_output_channels', 1))})"]


def _simple(fmt, *attrs):
    return lambda t: [fmt.format(*(_num(getattr(t, a)) for a in attrs))]


_SAMPLE = {
    "RandomResizedCrop": _rrc,
    "Resize": _resize,
    "CenterCrop": lambda t: [f"center_crop({_square(t.size)})"],
    "RandomCrop": _random_crop,
    "Pad": _pad,
    "RandomHorizontalFlip": _simple("hflip({})", "p"),
    "RandomVerticalFlip": _simple("vflip({})", "p"),
    "ColorJitter": _color_jitter,
    "RandomGrayscale": _simple("random_grayscale({})", "p"),
    "Grayscale": _grayscale,
    "RandomRotation": _rotation,
    "RandomAffine": _affine,
    "GaussianBlur": _blur,
    "RandomInvert": _simple("random_invert({})", "p"),
    "RandomPosterize": _simple("random_posterize({}, p={})", "bits", "p"),
    "RandomSolarize": _simple("random_solarize({}, p={})", "threshold", "p"),
    "RandomAdjustSharpness": _simple("random_adjust_sharpness({}, p={})", "sharpness_factor",
                                     "p"),
    "RandomAutocontrast": _simple("random_autocontrast({})", "p"),
    "RandomEqualize": _simple("random_equalize({})", "p"),
    "TrivialAugmentWide": _trivial,
    "AugMix": _aug_mix,
    "RandAugment": _rand_augment,
    "AutoAugment": _auto_augment,
    "RandomErasing": _erasing,
    "RandomPerspective": _perspective,
    "GaussianNoise": _noise,
}

# Transforms that change what the sample is, not its pixels.
_TO_TENSOR = {"ToTensor"}                      # float32 in [0, 1], CHW
_TO_IMAGE = {"PILToTensor", "ToImage", "ToImageTensor"}  # uint8 CHW
_DTYPE = {"ConvertImageDtype", "ToDtype"}
_PASS = {"ToPureTensor", "Identity"}

# Transforms feedd runs outside the pixel stage: not inside containers.
_NOT_INSIDE = {"RandomResizedCrop", "Resize", "CenterCrop", "RandomCrop", "Pad",
               "RandomHorizontalFlip", "Grayscale"}

_NORM_AT = "@normalize"  # where Normalize stood, until _loader_args() decides

_CONTAINERS = {"RandomApply": "random_apply", "RandomChoice": "random_choice",
               "RandomOrder": "random_order"}


def _container(t, state):
    """RandomApply / RandomChoice / RandomOrder over per-sample transforms."""
    subs = []
    for child in t.transforms:
        if _name(child) in _NOT_INSIDE:
            raise _Refused(f"{_name(child)} inside it: feedd's containers take pixel ops that "
                           f"keep the image's size (not crops, resizes, pads or hflip)")
        ops = _sample_ops(child, state, inner=True)
        if len(ops) != 1:
            raise _Refused(f"{_name(child)} inside it: not one feedd op")
        subs.append(ops[0])
    op = _CONTAINERS[_name(t)]
    text = f"{op}([{', '.join(subs)}]"
    p = getattr(t, "p", None)
    if op == "random_apply":
        text += f", p={_num(p)}"
    elif op == "random_choice" and p is not None:
        text += f", p={_tuple(p)}"
    return [text + ")"]


def _dtype_name(dt) -> str:
    if isinstance(dt, dict):  # v2 ToDtype({Image: float32, "others": None})
        vals = [v for k, v in dt.items() if v is not None and
                ("Image" in str(k) or k == "others")]
        if not vals:
            raise _Refused(f"dtype={dt!r}: no dtype for images")
        dt = vals[0]
    name = str(dt).replace("torch.", "")
    return {"float": "float32", "half": "float16"}.get(name, name)


def _mark(t, state):
    """The conversion transforms: what the sample is after them."""
    n = _name(t)
    if n in _TO_TENSOR:
        state["kind"] = "float32"
    elif n in _TO_IMAGE:
        state["kind"] = "uint8"
    elif n in _DTYPE:
        dt = _dtype_name(getattr(t, "dtype"))
        if dt == "uint8":
            state["kind"] = "uint8"
            return
        if dt not in ("float32", "float16", "bfloat16"):
            raise _Refused(f"dtype={dt}: feedd makes float32, float16 or bfloat16")
        if n == "ToDtype" and not getattr(t, "scale", False):
            raise _Refused("scale=False: feedd's floats are x / 255 (scale=True)")
        state["kind"] = dt
    elif n == "Normalize":
        if state["kind"] == "uint8":
            raise _Refused("Normalize on uint8: convert to floats first (ToDtype)")
        state["mean"] = [float(v) for v in t.mean]
        state["std"] = [float(v) for v in t.std]
        state["kind"] = state["kind"] or "float32"
        state["normalized"] = True


def _sample_ops(t, state, inner=False) -> List[str]:
    n = _name(t)
    if n == "Compose":
        out = []
        for child in t.transforms:
            out += _sample_ops(child, state, inner)
        return out
    if n in _TO_TENSOR | _TO_IMAGE | _DTYPE | {"Normalize"} | _PASS:
        if inner:
            raise _Refused("a conversion inside a container")
        _mark(t, state)
        return [_NORM_AT] if n == "Normalize" else []
    if n in _CONTAINERS:
        return _container(t, state)
    fn = _SAMPLE.get(n)
    if fn is None:
        why = {"Lambda": "arbitrary Python cannot run on feedd's workers (give it to "
                         "Loader(transform=) as a batch function)",
               "CutMix": "a batch transform: pass it as from_torchvision's second argument",
               "MixUp": "a batch transform: pass it as from_torchvision's second argument"}
        raise _Refused(why.get(n, "feedd has no op for it (feedclient.ops() lists them)"))
    if state.get("normalized") and n != "RandomErasing":
        raise _Refused("after Normalize: only RandomErasing may follow it in feedd")
    if n == "RandomErasing" and not state.get("normalized") and state["kind"] not in (None,
                                                                                     "uint8"):
        # on x / 255 floats: the same erase on u8 levels (value * 255)
        return [_erase_u8(op, {"mean": None, "std": None}) for op in fn(t)]
    if n == "GaussianNoise" and state["kind"] in (None, "uint8"):
        raise _Refused("GaussianNoise on uint8 images: v2 adds noise to floats (ToDtype "
                       "first)")
    try:
        return fn(t)
    except AttributeError as e:
        raise _Refused(f"attribute {e.name if hasattr(e, 'name') else e} missing") from None


# ---- batch transforms -------------------------------------------------------

def _mix(t) -> Dict[str, Any]:
    n = _name(t)
    if n in ("CutMix", "MixUp"):
        key = "cutmix_alpha" if n == "CutMix" else "mixup_alpha"
        out = {key: float(t.alpha)}
        if getattr(t, "num_classes", None) is not None:
            out["num_classes"] = int(t.num_classes)
        if getattr(t, "labels_getter", "default") not in ("default", None) and \
                not callable(getattr(t, "labels_getter")):
            raise _Refused("labels_getter: feedd mixes the field 'label'")
        return out
    if n == "RandomChoice":
        kids = list(t.transforms)
        names = [_name(k) for k in kids]
        if sorted(names) != ["CutMix", "MixUp"]:
            raise _Refused("a RandomChoice of one CutMix and one MixUp")
        out = {}
        for k in kids:
            out.update(_mix(k))
        p = getattr(t, "p", None)
        pc = 0.5 if p is None else float(p[names.index("CutMix")]) / float(sum(p))
        out["mix_switch_prob"] = pc
        return out
    raise _Refused("not a batch transform feedd has (CutMix, MixUp, RandomChoice of them)")


def from_torchvision(transform: Any, batch_transform: Any = None, *,
                     device: Optional[str] = None,
                     decode: bool = True, exact: bool = False) -> Dict[str, Any]:
    """Loader keyword arguments that make feedd's batches what `transform`
    (a Compose of torchvision v1 or v2 transforms, or one transform) makes
    of each sample, and `batch_transform` (CutMix, MixUp or a RandomChoice
    of them) of each batch.

    Returns a dict with "pipeline" (decode first unless decode=False: for
    datasets of fixed u8 images rather than encoded files; exact=True
    decodes at full scale, decode(exact=true), for an eval path within 1
    level of torchvision's) and "as_torch",
    plus, as the transform ends: with Normalize (or ToTensor / ToDtype) and
    no device (or device="cpu"), the pipeline's normalize (float32 NCHW from
    feedd's workers), and a batch transform the pipeline's last op,
    mix(...), so the workers mix and make soft labels too; with
    device="cuda", device, dtype, mean, std and layout for the Loader's
    conversion instead, and a batch transform adds mixup_alpha,
    cutmix_alpha, mix_switch_prob and num_classes.

    Raises InvalidArgument naming the transform (its class and place in
    the Compose) and why feedd cannot do it.
    """
    state: Dict[str, Any] = {"kind": None, "mean": None, "std": None, "normalized": False}
    ops: List[str] = (["decode(exact=true)" if exact else "decode"] if decode else [])
    items = list(transform.transforms) if _name(transform) == "Compose" else [transform]
    for k, t in enumerate(items):
        try:
            ops += _sample_ops(t, state)
        except _Refused as e:
            raise InvalidArgument(f"from_torchvision: transform {k + 1} {_name(t)}: {e}") \
                from None
    mix = {}
    if batch_transform is not None:
        try:
            mix = _mix(batch_transform)
        except _Refused as e:
            raise InvalidArgument(f"from_torchvision: batch transform "
                                  f"{_name(batch_transform)}: {e}") from None
    return _loader_args(ops, state, mix, device)


def _loader_args(ops, state, mix, device) -> Dict[str, Any]:
    """Where the conversion runs: on feedd's workers (the pipeline's
    normalize) unless the Loader must convert (device="cuda" keeps u8 on
    the wire; CutMix / MixUp mix u8 images in the Loader's conversion)."""
    out: Dict[str, Any] = {"as_torch": True}
    kind = state["kind"]
    floats = kind not in (None, "uint8")
    at = ops.index(_NORM_AT) if _NORM_AT in ops else len(ops)
    body, tail = [op for op in ops[:at] if op != _NORM_AT], ops[at + 1:]
    if mix and not floats:
        raise InvalidArgument("from_torchvision: CutMix / MixUp mix float images: end the "
                              "transform with ToDtype(float32, scale=True) (and Normalize)")
    if not floats:
        if device is not None:
            raise InvalidArgument(f"from_torchvision: device={device!r}: the transform ends "
                                  f"with uint8 images (add ToDtype(float32, scale=True))")
        ops = body + tail
        if kind == "uint8":
            out["layout"] = "NCHW"  # ToImage / PILToTensor: channels first
    elif not mix and (device is None or tail):
        dt = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}[kind]
        ops = body + [_norm_text(state, dt)] + tail
        if device is not None:
            out["device"] = device  # float fields: copied to the device
    elif device in (None, "cpu"):
        # CutMix / MixUp on feedd's workers too: the pipeline's batch op
        # after normalize, so the loop receives mixed floats and soft labels
        dt = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}[kind]
        ops = body + [_norm_text(state, dt)] + tail + [_mix_text(mix)]
        mix = {}
    else:
        # the Loader converts (and mixes) u8 images; erasing after Normalize
        # erases the u8 levels nearest its normalised values
        ops = body + [_erase_u8(op, state) for op in tail]
        out.update(device=device or "cpu", dtype=_torch_dtype(kind), mean=state["mean"],
                   std=state["std"], layout="NCHW")
    out["pipeline"] = " | ".join(ops) if ops else "identity"
    out.update(mix)
    return out


def _erase_u8(op, state):
    """random_erasing(..., value=V) after Normalize as erasing before it: V
    in normalised units becomes round((mean + V * std) * 255) per channel."""
    head, _, value = op.rpartition("value=")
    value = value[:-1]  # the closing parenthesis
    if value == "random":
        raise InvalidArgument("from_torchvision: RandomErasing(value='random') after Normalize "
                              "with CutMix / MixUp: the Loader mixes u8 images, where "
                              "normal draws in normalised units cannot be written")
    vals = [float(v) for v in value.strip("()").split(",")]
    mean = state["mean"] or [0.0]
    std = state["std"] or [1.0]
    c = max(len(vals), len(mean), len(std))
    pick = (lambda xs, k: xs[k if len(xs) > 1 else 0])
    levels = [min(255, max(0, round((pick(mean, k) + pick(vals, k) * pick(std, k)) * 255)))
              for k in range(c)]
    return f"{head}value={_tuple(levels)})"


def _mix_text(mix) -> str:
    """The pipeline's mix op for _mix()'s Loader arguments."""
    if "num_classes" not in mix:
        raise InvalidArgument("from_torchvision: CutMix / MixUp without num_classes: give "
                              "num_classes= (the soft labels' width)")
    return (f"mix(num_classes={mix['num_classes']}, "
            f"mixup_alpha={_num(mix.get('mixup_alpha', 0.0))}, "
            f"cutmix_alpha={_num(mix.get('cutmix_alpha', 0.0))}, "
            f"switch_prob={_num(mix.get('mix_switch_prob', 0.5))})")


def _norm_text(state, dt) -> str:
    mean = state["mean"] if state["mean"] is not None else [0.0]
    std = state["std"] if state["std"] is not None else [1.0]
    return f"normalize(mean={_tuple(mean)}, std={_tuple(std)}, dtype={dt})"


def _torch_dtype(name):
    import torch
    return getattr(torch, name)
