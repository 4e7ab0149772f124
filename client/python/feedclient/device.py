"""feedclient.device: batches converted for training, on the GPU or the CPU.

Loader(..., device="cuda" | "cpu", dtype=torch.bfloat16, mean=..., std=...)
delivers each u8 image field as a normalized float tensor, NCHW by
default, and each u16 / u32 token field as int64, through libfeedclient's
feed_batch_to_device(): on "cuda" the u8 bytes cross PCIe (one byte per
pixel) and the embedded kernels convert them into a tensor torch allocated
on its current stream; on "cpu" the kernels' CPU twins convert into a CPU
tensor (the same bits). Other fields become tensors on the same device
(copies). Nothing of the batch views shared memory: its slot goes back to
feedd as soon as the conversion has run (on the GPU: when its event
completes, never earlier).

Normalization is torchvision's Normalize after ToTensor: mean and std in
units of x/255, y = (x/255 - mean) / std, computed as one fused
multiply-add per pixel; fp32 results are within a few ulp of torchvision's
(tests/python/test_feedclient_device.py checks it), and
fp16 / bf16 results are the round-to-nearest-even of the fp32 value.

Mixup and cutmix (Loader(mixup_alpha=..., cutmix_alpha=...,
mix_switch_prob=..., num_classes=..., label_smoothing=...)): after the
conversion each batch's images are mixed in place with the batch rolled by
one (torchvision's x.roll(1, 0)) and its integer "label" field becomes
soft labels, an (n, num_classes) float32 tensor, one-hot with label
smoothing and mixed with the same lambda (kernels/mix.h). Which op, lambda
and cutmix's box come from feed_batch_mix_draw(): the stream's seed, the
epoch and the batch's number (index * world_size + rank), so a resume and
any worker count give the same mix; mix_draw() computes them for any
(seed, epoch, batch). Each product and sum is rounded as torch rounds
torchvision's reference, so the images equal it bit for bit, in every
dtype.

Owns: the capability query (gpu_info), the per-Loader conversion plan and
its mix (MixPlan). Runs on the Loader's thread; never prints.
"""

import ctypes
import errno
from types import SimpleNamespace
from typing import Any

import numpy as np

from . import _lib
from ._lib import lib
from .errors import FeedError, GpuUnavailable, InvalidArgument, class_for


def gpu_info() -> SimpleNamespace:
    """feed_gpu_query(): what the GPU path can do on this machine, as a
    namespace: usable (bool), kernels (bool: the build embeds them),
    driver_version and driver_needed (int, 1000*major + 10*minor; 0: no
    driver), devices (list of (name, (major, minor))), reason (str: why not
    usable, "" when usable), ipc (bool: CUDA IPC too, feedd's device slots)
    and ipc_reason (why not, when usable). The first call loads the
    driver."""
    gi = _lib.GpuInfo()
    lib.feed_gpu_query(ctypes.byref(gi))
    n = min(gi.num_devices, _lib.FEED_GPU_MAX_DEVICES)
    devices = [(gi.devices[i].name.decode("utf-8", "replace"),
                (gi.devices[i].cc_major, gi.devices[i].cc_minor)) for i in range(n)]
    return SimpleNamespace(usable=bool(gi.usable), kernels=bool(gi.kernels),
                           driver_version=gi.driver_version, driver_needed=gi.driver_needed,
                           num_devices=gi.num_devices, devices=devices,
                           reason=gi.reason.decode("utf-8", "replace"), ipc=bool(gi.ipc),
                           ipc_reason=gi.ipc_reason.decode("utf-8", "replace"))


def _floats(name, v):
    if v is None:
        return None
    try:
        out = [float(x) for x in (v if hasattr(v, "__iter__") else [v])]
    except (TypeError, ValueError):
        raise InvalidArgument(f"{name}: a number or a sequence of numbers is required, "
                              f"not {v!r}") from None
    if not 1 <= len(out) <= 4:
        raise InvalidArgument(f"{name}: 1 to 4 values (one per channel), not {len(out)}")
    return out


def _number(name, v, lo, hi, hi_open=False):
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or v < lo or \
            v > hi or (hi_open and v == hi):
        bound = f"[{lo}, {hi})" if hi_open else f"[{lo}, {hi}]"
        raise InvalidArgument(f"{name}: a number in {bound} is required, not {v!r}")
    return float(v)


def _exact_floats(vals, kind):
    """vals as the pipeline text writes numbers (at most 9 decimals, one
    value or a tuple), or None when that text would not give back the
    same value of numpy type kind (float32 for mean/std: what the
    conversion computes with)."""
    out = []
    for v in vals:
        t = f"{float(v):.9f}".rstrip("0").rstrip(".")
        t = "0" if t in ("", "-0") else t
        if kind(float(t)) != kind(v) or abs(float(t)) > 1000:
            return None
        out.append(t)
    return out[0] if len(out) == 1 else "(" + ", ".join(out) + ")"


LABEL_FIELD = "label"
_LABEL_DTYPES = ("u8", "i8", "u16", "i16", "u32", "i32", "u64", "i64")


class MixPlan:
    """A Loader's mixup / cutmix and soft labels: the C struct
    feed_mix_spec, checked. mixup_alpha, cutmix_alpha: > 0 turns each op
    on (None or 0: off); switch_prob: with both on, the probability of
    cutmix for a batch; num_classes: the soft labels' width (required);
    label_smoothing: timm's, in [0, 1)."""

    def __init__(self, mixup_alpha, cutmix_alpha, switch_prob, num_classes, label_smoothing):
        spec = _lib.MixSpec()
        spec.mixup_alpha = _number("mixup_alpha", mixup_alpha or 0.0, 0.0, float("inf"), True)
        spec.cutmix_alpha = _number("cutmix_alpha", cutmix_alpha or 0.0, 0.0, float("inf"),
                                    True)
        spec.switch_prob = _number("mix_switch_prob", switch_prob, 0.0, 1.0)
        spec.label_smoothing = _number("label_smoothing", label_smoothing or 0.0, 0.0, 1.0,
                                       True)
        if num_classes is None:
            raise InvalidArgument("num_classes: required with mixup_alpha, cutmix_alpha or "
                                  "label_smoothing (the soft labels' width)")
        if isinstance(num_classes, bool) or not isinstance(num_classes, int) or \
                not 1 <= num_classes <= 2**31 - 1:
            raise InvalidArgument(f"num_classes: an int >= 1 is required, not {num_classes!r}")
        spec.num_classes = num_classes
        self.spec = spec
        self.mixing = spec.mixup_alpha > 0 or spec.cutmix_alpha > 0

    def check_fields(self, fields):
        """Refuses a stream whose batches have no integer 'label' field of
        one value per sample (fields: its FieldInfo tuple)."""
        for f in fields:
            if f.name == LABEL_FIELD:
                if f.variable or f.dtype not in _LABEL_DTYPES or f.shape not in ((), (1,)):
                    raise InvalidArgument(f"num_classes: soft labels are made from the field "
                                          f"'{LABEL_FIELD}', which is {f.dtype}{list(f.shape)}"
                                          f"{' (variable)' if f.variable else ''}, not one "
                                          f"integer per sample")
                return
        names = ", ".join(repr(f.name) for f in fields) or "none"
        raise InvalidArgument(f"num_classes: soft labels are made from the field "
                              f"'{LABEL_FIELD}', which these batches lack (fields: {names})")


def mix_draw(seed, epoch, batch, h, w, *, mixup_alpha=0.0, cutmix_alpha=0.0,
             switch_prob=0.5):
    """The mix feedd's Loader gives batch number `batch` (index * world_size
    + rank) of `epoch` with `seed`, for images of h x w (feed_mix_draw): a
    namespace op ("none", "mixup" or "cutmix"), lam (float: a sample's own
    weight, its partner's is 1 - lam; cutmix's corrected by the box area)
    and box (x1, y1, x2, y2: cutmix's columns [x1, x2) and rows [y1, y2)
    taken from the partner, else None)."""
    spec = _lib.MixSpec(mixup_alpha, cutmix_alpha, switch_prob, 0, 0.0)
    m = _lib.Mix()
    r = lib.feed_mix_draw(ctypes.byref(spec), seed, epoch, batch, h, w, ctypes.byref(m))
    if r < 0:
        raise InvalidArgument(f"mix_draw: alphas >= 0, switch_prob in [0, 1] and a size of "
                              f"at least 1x1 are required ({_lib.strerror(r)})")
    ops = {_lib.FEED_MIX_NONE: "none", _lib.FEED_MIX_MIXUP: "mixup", _lib.FEED_MIX_CUTMIX: "cutmix"}
    box = (m.x1, m.y1, m.x2, m.y2) if m.op == _lib.FEED_MIX_CUTMIX else None
    return SimpleNamespace(op=ops[m.op], lam=m.lam, box=box)


class Conversion:
    """How a Loader's batches are converted (its device, dtype, mean/std,
    and mix: a MixPlan or None)."""

    def __init__(self, device, dtype, mean, std, layout, mix=None):
        self.mix = mix
        import torch
        self.torch = torch
        try:
            self.device = torch.device(device)
        except (RuntimeError, TypeError):
            raise InvalidArgument(f"device: 'cuda', 'cuda:N' or 'cpu', not {device!r}") from None
        if self.device.type not in ("cuda", "cpu"):
            raise InvalidArgument(f"device: 'cuda', 'cuda:N' or 'cpu', not {device!r}")
        dtypes = {torch.float32: _lib.FEED_TO_F32, torch.float16: _lib.FEED_TO_F16,
                  torch.bfloat16: _lib.FEED_TO_BF16}
        self.dtype = torch.float32 if dtype is None else dtype
        if self.dtype not in dtypes:
            raise InvalidArgument(f"dtype: torch.float32, torch.float16 or torch.bfloat16, "
                                  f"not {dtype!r}")
        if layout not in ("NCHW", "NHWC"):
            raise InvalidArgument(f"layout: 'NCHW' or 'NHWC', not {layout!r}")
        self.layout = layout
        self.mean = _floats("mean", mean)
        self.std = _floats("std", std)
        self.to = _lib.ToDevice()
        self.to.dtype = dtypes[self.dtype]
        self.to.layout = _lib.FEED_TO_NCHW if layout == "NCHW" else _lib.FEED_TO_NHWC
        self.channels = {}  # c -> (mean, std) arrays kept alive for the C call
        if self.device.type == "cuda":
            info = gpu_info()
            if not info.usable:
                # the driver loader's words may add "converting on the CPU",
                # which this Loader does not do: it raises
                reason = info.reason.replace("; converting on the CPU", "")
                raise GpuUnavailable(f"device={device!r}: libfeedclient's GPU path is not "
                                     f"usable: {reason}; pass device='cpu' to convert the "
                                     f"same way on the CPU", -errno.ENODEV, "no usable GPU")
            if not torch.cuda.is_available():
                raise GpuUnavailable(f"device={device!r}: libfeedclient can reach the GPU but "
                                     f"this torch cannot (built without CUDA, or "
                                     f"CUDA_VISIBLE_DEVICES hides it)", -errno.ENODEV,
                                     "no usable GPU")
            self.index = self.device.index if self.device.index is not None else \
                torch.cuda.current_device()
            self.to.device = self.index
        else:
            self.to.device = _lib.FEED_DEVICE_CPU

    def worker_ops(self, plan, fields):
        """The pipeline ops that make feedd's workers do this conversion
        (device="cpu"): " | normalize(...)" and, with a mix, " | mix(...)",
        appended to the stream's pipeline; None when these batches need the
        Loader's own conversion (no u8 image field or more than one, token
        fields it widens to int64, values the pipeline text cannot write
        exactly, another device). The workers run the same CPU twins on the
        same float32 mean and std, so the batches are the same bits."""
        if self.device.type != "cpu":
            return None
        images = [p for p in plan if self._image(p) is not None]
        if len(images) != 1 or any(not p.variable and p.dtype in (np.uint16, np.uint32)
                                   for p in plan):
            return None
        img = images[0]
        dt = {self.torch.float32: "f32", self.torch.float16: "f16",
              self.torch.bfloat16: "bf16"}[self.dtype]
        mean = _exact_floats(self.mean or [0.0], np.float32)
        std = _exact_floats(self.std or [1.0], np.float32)
        if mean is None or std is None:
            return None
        ops = (f" | normalize(mean={mean}, std={std}, dtype={dt}, "
               f"layout={'chw' if self.layout == 'NCHW' else 'hwc'}, field={img.name})")
        if self.mix is not None:
            sp = self.mix.spec
            vals = [_exact_floats([v], np.float64) for v in
                    (sp.mixup_alpha, sp.cutmix_alpha, sp.switch_prob, sp.label_smoothing)]
            if None in vals:
                return None
            ops += (f" | mix(num_classes={sp.num_classes}, mixup_alpha={vals[0]}, "
                    f"cutmix_alpha={vals[1]}, switch_prob={vals[2]}, "
                    f"label_smoothing={vals[3]})")
        return ops

    def check_channels(self, plan):
        """Refuses mean= or std= whose count fits no image field of the
        stream (1 value, or one per channel), naming the field."""
        for p in plan:
            img = self._image(p)
            if img is None:
                continue
            c = img[2]
            for what, v in (("mean", self.mean), ("std", self.std)):
                if v is not None and len(v) not in (1, c):
                    raise InvalidArgument(
                        f"{what}={v!r}: {len(v)} values, but field '{p.name}' has {c} "
                        f"channel{'s' if c != 1 else ''} (shape {p.trail}); give one value "
                        f"for all channels or {c}", -errno.EINVAL, "invalid argument")

    def describe(self, p, dtype, shape):
        """(dtype, shape) of field p's tensors after the conversion."""
        if self.mix is not None and p.name == LABEL_FIELD:  # soft labels
            return "f32", (self.mix.spec.num_classes,)
        img = self._image(p)
        if img is not None:
            h, w, c = img
            names = {self.torch.float32: "f32", self.torch.float16: "f16",
                     self.torch.bfloat16: "bf16"}
            return names[self.dtype], (c, h, w) if self.layout == "NCHW" else (h, w, c)
        if not p.variable and p.dtype in (np.uint16, np.uint32):
            return "i64", shape
        return dtype, shape

    def _norm(self, name, c):
        """(mean, std) as C float arrays for images of c channels."""
        got = self.channels.get(c)
        if got is None:
            arrs = []
            for what, v in (("mean", self.mean), ("std", self.std)):
                if v is None:
                    arrs.append(None)
                    continue
                if len(v) not in (1, c):
                    raise InvalidArgument(f"{what}: {len(v)} values for field '{name}' of "
                                          f"{c} channels (give 1 or {c})")
                arrs.append((ctypes.c_float * c)(*(v * c if len(v) == 1 else v)))
            got = self.channels[c] = tuple(arrs)
        return got

    def _image(self, p):
        """(h, w, c) when plan p is a u8 image field, else None."""
        if p.variable or p.string or p.dtype != np.uint8:
            return None
        if len(p.trail) == 2:
            return p.trail[0], p.trail[1], 1
        if len(p.trail) == 3 and 1 <= p.trail[2] <= 4:
            return p.trail
        return None

    def _mix_draw(self, s, b):
        """This batch's mix (a ctypes Mix), drawn for its image fields' size."""
        sizes = {self._image(p)[:2] for p in s.plan if self._image(p) is not None}
        if len(sizes) != 1:
            what = "none" if not sizes else f"images of {len(sizes)} sizes"
            raise InvalidArgument(f"mixup_alpha / cutmix_alpha: the batches' u8 images are "
                                  f"mixed, all of one size; these have {what}")
        (h, w), = sizes
        m = _lib.Mix()
        r = lib.feed_batch_mix_draw(b, ctypes.byref(self.mix.spec), h, w, ctypes.byref(m))
        if r < 0:
            raise InvalidArgument(f"mix: {_lib.errmsg(s.conn) or _lib.strerror(r)}", r,
                                  _lib.strerror(r))
        return m

    def _labels(self, s, b, p, n, dev, stream, mix):
        """The soft labels of field p: (n, num_classes) float32 on dev."""
        t = self.torch.empty((n, mix.num_classes), dtype=self.torch.float32, device=dev)
        to = _lib.ToDevice()
        to.device, to.dtype = self.to.device, _lib.FEED_TO_F32
        to.dst_bytes = t.numel() * t.element_size()
        to.mix = ctypes.pointer(mix)
        r = lib.feed_batch_to_device(b, p.i, t.data_ptr() if t.numel() else 1,
                                     ctypes.byref(to), stream)
        if r < 0:
            detail = _lib.errmsg(s.conn)
            if r == -errno.ERANGE:
                raise InvalidArgument(f"num_classes={mix.num_classes}: field '{p.name}': "
                                      f"{detail}", r, _lib.strerror(r))
            cls = GpuUnavailable if r == -errno.ENODEV else class_for(r, detail)
            raise cls(f"field '{p.name}': {detail}", r, _lib.strerror(r))
        return t

    def _mix_of(self, s, b):
        """The batch's mix (_lib.Mix) when mixing or soft labels were asked for, else None."""
        if self.mix is None:
            return None
        if self.mix.mixing:
            mix = self._mix_draw(s, b)
        else:  # soft labels only: one-hot, smoothed
            mix = _lib.Mix(op=_lib.FEED_MIX_NONE, lam=1.0)
        mix.num_classes = self.mix.spec.num_classes
        mix.label_smoothing = self.mix.spec.label_smoothing
        return mix

    def convert(self, s, b, batch):
        """A new Batch of tensors on self.device from batch (numpy views of
        the delivered slot b of stream s), which the caller then drops."""
        torch = self.torch
        dev = self.device if self.device.type == "cpu" else torch.device("cuda", self.index)
        stream = torch.cuda.current_stream(dev).cuda_stream if dev.type == "cuda" else None
        out = type(batch)()
        out.epoch, out.index, out.padded, out.replaced, out.dropped = \
            batch.epoch, batch.index, batch.padded, batch.replaced, batch.dropped
        out._indices = batch.indices   # made (a copy) before the slot goes
        n = len(out._indices)
        mix = self._mix_of(s, b)
        mix_ptr = ctypes.pointer(mix) if mix is not None and self.mix.mixing else None
        for p in s.plan:
            v = batch[p.name]
            if p.flat:   # packed rows' cu_seqlens: one int32 array, copied to dev
                out[p.name] = torch.from_numpy(np.array(v)).to(dev)
                out["max_seqlen"] = batch["max_seqlen"]
                continue
            img = self._image(p)
            if mix is not None and p.name == LABEL_FIELD:
                out[p.name] = self._labels(s, b, p, n, dev, stream, mix)
                continue
            if img is not None or (not p.variable and p.dtype in (np.uint16, np.uint32)):
                if img is not None:
                    h, w, c = img
                    shape = (n, c, h, w) if self.layout == "NCHW" else (n, h, w, c)
                    dtype = self.dtype
                    mean, std = self._norm(p.name, c)
                    self.to.mean = ctypes.cast(mean, ctypes.POINTER(ctypes.c_float)) \
                        if mean is not None else None
                    self.to.std = ctypes.cast(std, ctypes.POINTER(ctypes.c_float)) \
                        if std is not None else None
                else:
                    shape, dtype = (n,) + p.trail, torch.int64
                t = torch.empty(shape, dtype=dtype, device=dev)
                self.to.dst_bytes = t.numel() * t.element_size()
                self.to.mix = mix_ptr if img is not None else None
                r = lib.feed_batch_to_device(b, p.i, t.data_ptr() if t.numel() else 1,
                                             ctypes.byref(self.to), stream)
                if r < 0:
                    detail = _lib.errmsg(s.conn)
                    cls = GpuUnavailable if r == -errno.ENODEV else class_for(r, detail)
                    raise cls(f"field '{p.name}': {detail}", r, _lib.strerror(r))
                out[p.name] = t
            elif isinstance(v, list):
                out[p.name] = [x if isinstance(x, str) else
                               torch.from_numpy(np.array(x)).to(dev) for x in v]
            else:
                t = self._same(s, b, p, v, dev, stream)
                if p.label is not None and not isinstance(t, np.ndarray):
                    t = t.to(torch.from_numpy(np.empty(0, p.label)).dtype)
                out[p.name] = t
        return out

    def _same(self, s, b, p, v, dev, stream):
        """A fixed field as it is (labels, say), in a tensor of torch's on
        dev: FEED_TO_SAME copies it there (on the GPU from the registered
        slot, on torch's stream), nothing views the slot afterwards."""
        torch = self.torch
        try:
            dtype = torch.from_numpy(np.empty(0, dtype=v.dtype)).dtype
        except TypeError:  # a dtype this torch lacks: a numpy copy, on the CPU
            return np.array(v)
        t = torch.empty(v.shape, dtype=dtype, device=dev)
        same = _lib.ToDevice()
        same.device, same.dtype = self.to.device, _lib.FEED_TO_SAME
        same.dst_bytes = t.numel() * t.element_size()
        r = lib.feed_batch_to_device(b, p.i, t.data_ptr() if t.numel() else 1,
                                     ctypes.byref(same), stream)
        if r < 0:
            detail = _lib.errmsg(s.conn)
            cls = GpuUnavailable if r == -errno.ENODEV else class_for(r, detail)
            raise cls(f"field '{p.name}': {detail}", r, _lib.strerror(r))
        return t


def slots_request(device, dtype, mean, std, layout):
    """The C struct feed_stream_device for Loader(device_slots=device, ...):
    the device ordinal and how feedd converts there, checked."""
    import torch
    if isinstance(device, bool) or not isinstance(device, int) or device < 0:
        raise InvalidArgument(f"device_slots: a CUDA device ordinal (int >= 0), not {device!r}")
    dtypes = {torch.float32: _lib.FEED_TO_F32, torch.float16: _lib.FEED_TO_F16,
              torch.bfloat16: _lib.FEED_TO_BF16}
    dtype = torch.float32 if dtype is None else dtype
    if dtype not in dtypes:
        raise InvalidArgument(f"dtype: torch.float32, torch.float16 or torch.bfloat16, "
                              f"not {dtype!r}")
    if layout not in ("NCHW", "NHWC"):
        raise InvalidArgument(f"layout: 'NCHW' or 'NHWC', not {layout!r}")
    mean, std = _floats("mean", mean), _floats("std", std)
    n = max(len(mean or ()), len(std or ()))
    if mean and std and len(mean) != len(std) and 1 not in (len(mean), len(std)):
        raise InvalidArgument(f"mean and std: {len(mean)} and {len(std)} values (give one "
                              f"for all channels, or one per channel in both)")
    mean = (mean * n if mean and len(mean) == 1 else mean) or [0.0] * n
    std = (std * n if std and len(std) == 1 else std) or [1.0] * n
    r = _lib.StreamDevice()
    r.enable, r.device, r.dtype = True, device, dtypes[dtype]
    r.layout = _lib.FEED_TO_NCHW if layout == "NCHW" else _lib.FEED_TO_NHWC
    r.nmean = n
    for i in range(n):
        r.mean[i], r.std[i] = mean[i], std[i]
    return r


class DeviceArray:
    """A fixed field of a batch in feedd's device slot (Loader(device_slots=N)).

    __cuda_array_interface__ (version 3) describes the device memory: shape
    (batch axis first; images (n, c, h, w) for NCHW, (n, h, w, c) for NHWC),
    typestr (bf16 as "<i2": the array interface has no bfloat16) and the
    pointer; torch.as_tensor(x, device="cuda"), CuPy or Numba take it with
    no copy, and torch's current stream was made to wait for feedd's
    conversion when the batch was taken (so "stream" is None). to_torch()
    does it with the bfloat16 view. Keeps the batch's slot: the slot goes
    back once this, every other view of the batch and whatever holds this
    (a tensor from as_tensor keeps it) are gone, after the work queued on
    that stream by then. Attributes: device (ordinal), dtype (feedd's short
    name, e.g. "bf16"), shape, nbytes."""

    __slots__ = ("__cuda_array_interface__", "device", "dtype", "shape", "nbytes", "_slot")

    _NAMES = {1: "u8", 2: "i8", 3: "u16", 4: "i16", 5: "u32", 6: "i32", 7: "u64", 8: "i64",
              9: "f16", 10: "bf16", 11: "f32", 12: "f64", 13: "bool"}

    def __init__(self, slot: Any, view: Any, device: int) -> None:
        self._slot = slot
        self.device = device
        self.dtype = self._NAMES.get(view.dtype, "u8")
        self.shape = tuple(view.shape[i] for i in range(view.rank))
        self.nbytes = view.bytes
        typestr = "<i2" if view.dtype == _lib.DTYPE_BFLOAT16 else \
            np.dtype(_lib.DTYPES.get(view.dtype, "u1")).str
        self.__cuda_array_interface__ = {"shape": self.shape, "typestr": typestr,
                                         "data": (view.data or 0, False), "strides": None,
                                         "version": 3, "stream": None}

    def to_torch(self) -> Any:
        """A torch tensor on this device viewing the same memory (no copy)."""
        import torch
        t = torch.as_tensor(self, device=torch.device("cuda", self.device))
        return t.view(torch.bfloat16) if self.dtype == "bf16" else t

    def __repr__(self) -> str:
        return f"<feedclient.DeviceArray cuda:{self.device} {self.dtype}{list(self.shape)}>"


__all__ = ["gpu_info", "Conversion", "FeedError", "DeviceArray", "MixPlan", "mix_draw"]
