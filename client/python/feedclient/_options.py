"""feedclient._options: a Loader's arguments checked and turned into the
C library's stream options (feed_stream_opts), and what the arguments
change in how fields are described. Every bad argument raises
InvalidArgument naming it, its value and what is allowed, in the order
Loader() checks them. No C call, no state."""

import os
import sys

import numpy as np

from . import _lib
from .errors import FeedError, InvalidArgument


_SHORT = {"u1": "u8", "i1": "i8", "u2": "u16", "i2": "i16", "u4": "u32", "i4": "i32",
          "u8": "u64", "i8": "i64", "f2": "f16", "f4": "f32", "f8": "f64", "b1": "bool"}


_SIZES = {"u8": 1, "i8": 1, "u16": 2, "i16": 2, "u32": 4, "i32": 4, "u64": 8, "i64": 8,
          "f16": 2, "bf16": 2, "f32": 4, "f64": 8, "bool": 1}


def _slots_describe(req, p, dtype, shape):
    """(dtype, shape) of field p in feedd's device slots (Loader(device_slots=))."""
    if p.variable or p.string:
        return dtype, shape
    if p.dtype == np.uint8 and (len(p.trail) == 2 or
                                (len(p.trail) == 3 and 1 <= p.trail[2] <= 4)):
        h, w, c = p.trail if len(p.trail) == 3 else p.trail + (1,)
        name = {_lib.FEED_TO_F32: "f32", _lib.FEED_TO_F16: "f16",
                _lib.FEED_TO_BF16: "bf16"}.get(req.dtype, dtype)
        return name, (c, h, w) if req.layout == _lib.FEED_TO_NCHW else (h, w, c)
    if p.dtype in (np.uint16, np.uint32):
        return "i64", shape
    return dtype, shape


def _label_dtype(v, torch):
    """label_dtype= as a numpy dtype (None: labels keep the stored type)."""
    if v is None:
        return None
    if torch is not None and isinstance(v, torch.dtype):
        try:
            return torch.empty(0, dtype=v).numpy().dtype
        except TypeError:
            pass
    else:
        try:
            d = np.dtype(v)
            if d.kind in "iuf":
                return d
        except TypeError:
            pass
    raise InvalidArgument(f"label_dtype={v!r}: a torch or numpy dtype for integer labels under "
                          f"as_torch or device= (default 'int64', as torch's losses take), or "
                          f"None to keep the stored type")


def _env_int(names, default):
    for name in names:
        v = os.environ.get(name)
        if v is not None and v != "":
            try:
                return int(v), name
            except ValueError:
                raise InvalidArgument(f"${name}={v!r} is not an integer (unset it, or pass "
                                      f"rank= and world_size=)") from None
    return default, None


def _check_int(name, v, lo, hi=None):
    if isinstance(v, bool) or not isinstance(v, int):
        raise InvalidArgument(f"{name}: an int is required, not {type(v).__name__}")
    if v < lo or (hi is not None and v > hi):
        bound = f"{lo}..{hi}" if hi is not None else f">= {lo}"
        raise InvalidArgument(f"{name}: {v} is out of range ({bound})" if not name.startswith("$")
                              else f"{name}={v} is out of range ({bound})")
    return v


_NOT_A_DATASET = (
    "feedclient.Loader is not a Dataset: it already yields whole batches, built by feedd. "
    "Use it where the DataLoader would go (`for batch in loader:`; frameworks such as "
    "Lightning accept any iterable as a dataloader) rather than wrapping it in "
    "torch.utils.data.DataLoader; it needs no worker processes, and shuffling, batching, "
    "ranks and epochs are the Loader's own options (shuffle=, batch_size, rank=, "
    "world_size=, set_epoch()).")


def _u8_layout(pipeline, layout, device, device_slots):
    """The pipeline text with layout= applied to u8 images: without a
    conversion (device=, device_slots=), layout="NCHW" has feedd's workers
    write the image field channels first (to_chw, its last op), contiguous,
    rather than this process making a strided view or a copy."""
    if layout not in (None, "NCHW", "NHWC"):
        raise InvalidArgument(f"layout: 'NCHW' or 'NHWC', not {layout!r}")
    if layout != "NCHW" or device is not None or device_slots is not None:
        return pipeline
    if pipeline and "normalize" in pipeline:
        return pipeline  # floats: normalize(layout=chw|hwc) says where channels go
    return f"{pipeline} | to_chw" if pipeline else "to_chw"


def _in_worker_check():
    """Refuses iteration inside a torch DataLoader worker, naming the fix."""
    data = sys.modules.get("torch.utils.data")
    if data is not None and data.get_worker_info() is not None:
        raise FeedError("feedclient.Loader iterated in a torch DataLoader worker: each "
                        "worker would read the data again. " + _NOT_A_DATASET)


class Args:
    """Loader()'s arguments by name (a.batch_size, ...), for the checks
    below; made from __init__'s locals() before it binds any other."""

    def __init__(self, args):
        self.__dict__.update((k, v) for k, v in args.items() if k != "self")


def mixture(dataset, samples_per_epoch):
    """(Mixture or None, the dataset's name): dataset={name: weight} is a
    mixture (feedclient.mixture), named by its label."""
    from collections.abc import Mapping
    if isinstance(dataset, Mapping):
        from .mixture import Mixture
        mix = Mixture(dataset, samples_per_epoch)
        return mix, mix.label
    if samples_per_epoch is not None:
        raise InvalidArgument("samples_per_epoch: a mixture's (dataset={name: weight})")
    return None, dataset


def conversion(a):
    """(Conversion or None, DeviceRequest or None): device= converts in
    this process (feedclient.device), device_slots= has feedd convert."""
    if a.device is not None and a.device_slots is not None:
        raise InvalidArgument("device and device_slots: choose one (device= converts in "
                              "this process, device_slots= has feedd convert on the GPU)")
    mix_args = {"mixup_alpha": a.mixup_alpha, "cutmix_alpha": a.cutmix_alpha,
                "num_classes": a.num_classes, "label_smoothing": a.label_smoothing}
    given = [k for k, v in mix_args.items() if v is not None] + \
        (["mix_switch_prob"] if a.mix_switch_prob != 0.5 else [])
    if given and a.device is None:
        raise InvalidArgument(f"{given[0]}: mixup, cutmix and soft labels work on converted "
                              f"batches: give device='cuda' or device='cpu' too")
    if a.convert_on not in ("feedd", "loader"):
        raise InvalidArgument(f"convert_on={a.convert_on!r}: 'feedd' (its workers convert "
                              f"for device='cpu') or 'loader' (this thread converts)")
    if a.device is not None:
        from .device import Conversion, MixPlan
        mix = MixPlan(a.mixup_alpha, a.cutmix_alpha, a.mix_switch_prob, a.num_classes,
                      a.label_smoothing) if given else None
        return Conversion(a.device, a.dtype, a.mean, a.std, a.layout or "NCHW", mix), None
    if a.device_slots is not None:
        from .device import slots_request
        return None, slots_request(a.device_slots, a.dtype, a.mean, a.std, a.layout or "NCHW")
    if a.dtype is not None or a.mean is not None or a.std is not None:
        raise InvalidArgument("dtype, mean and std convert batches for a device: give "
                              "device='cuda' or device='cpu' too")
    return None, None


def check_args(a, mix):
    """The arguments that need no other: dataset, the numbers, the modes."""
    dataset = mix.label if mix is not None else a.dataset
    if not isinstance(dataset, str) or not dataset:
        raise InvalidArgument("dataset: a non-empty name (str) is required")
    if "/" in dataset and mix is None:
        raise InvalidArgument(f"dataset={dataset!r}: a name feedd serves, not a path; have "
                              f"feedd serve the packed directory (feedd --dataset "
                              f"NAME={dataset}, or a datasets: entry in its config) and "
                              f"pass NAME (feedclient.datasets() lists the names served)")
    _check_int("batch_size", a.batch_size, 1, 2**32 - 1)
    _check_int("seed", a.seed, 0, 2**64 - 1)
    _check_int("credits", a.credits, 1, 65535)
    _check_int("transform_threads", a.transform_threads, 1, 256)
    if a.transform is not None and not callable(a.transform):
        raise InvalidArgument(f"transform={a.transform!r}: a callable fn(batch) -> batch, "
                              f"or None")
    timeout = a.timeout
    if timeout is not None and (isinstance(timeout, bool) or
                                not isinstance(timeout, (int, float)) or
                                not 0 < timeout <= 2**31 // 1000):
        raise InvalidArgument(f"timeout={timeout!r}: seconds (a number above 0, at most "
                              f"{2**31 // 1000}) that one batch may take, or None to wait "
                              f"as long as it takes")
    if a.pipeline is not None and not isinstance(a.pipeline, str):
        raise InvalidArgument("pipeline: a str or None is required")
    wait = a.wait_for_daemon
    if isinstance(wait, bool) or not isinstance(wait, (int, float)) or not 0 <= wait <= 86400:
        raise InvalidArgument(f"wait_for_daemon={wait!r}: seconds (0 to 86400) "
                              f"to wait for feedd's socket at construction")
    _check_modes(a)


def _check_modes(a):
    """window=, group=, drop_last/pad_last, on_error=, max_bad=."""
    if a.window is not None:
        _check_int("window", a.window, 1, 2**32 - 1)
        if not a.shuffle or a.eval:
            raise InvalidArgument("window: block-window order shuffles; it needs "
                                  "shuffle=True and eval=False")
    if a.group is not None and (not isinstance(a.group, str) or not 1 <= len(a.group) <= 63):
        raise InvalidArgument("group: a name (str) of 1 to 63 characters, or None")
    if a.drop_last and a.pad_last:
        raise InvalidArgument("drop_last and pad_last: choose one (pad_last fills the "
                              "last batch that drop_last drops)")
    if a.on_error not in ("fail", "skip"):
        raise InvalidArgument(f"on_error: {a.on_error!r} is not 'fail' or 'skip'")
    if a.max_bad is not None:
        _check_int("max_bad", a.max_bad, 1, 2**64 - 1)
        if a.on_error != "skip":
            raise InvalidArgument("max_bad: only with on_error='skip'")


def placement(a):
    """(rank, world_size, nodes, node): order='node''s placement
    (feedclient.nodes), else rank= and world_size=, else $RANK /
    $SLURM_PROCID and $WORLD_SIZE / $SLURM_NTASKS."""
    rank, world_size, nodes, node = a.rank, a.world_size, a.nodes, a.node
    if a.order not in (None, "node") or a.node_deal not in ("rotate", "fixed") or \
            (a.order is None and (nodes, node) != (None, None)):
        raise InvalidArgument(f"order={a.order!r}, node_deal={a.node_deal!r}: order is None "
                              f"(see shuffle, window) or 'node' (with nodes, node), "
                              f"node_deal 'rotate' or 'fixed'")
    if a.order == "node":
        if a.eval or not a.shuffle:
            raise InvalidArgument("order='node' shuffles: it needs shuffle=True and "
                                  "eval=False")
        from .nodes import placement as node_placement
        rank, world_size, nodes, node = node_placement(rank, world_size, nodes, node)
    rank_from = world_from = None
    if rank is None:
        rank, rank_from = _env_int(("RANK", "SLURM_PROCID"), 0)
    if world_size is None:
        world_size, world_from = _env_int(("WORLD_SIZE", "SLURM_NTASKS"), 1)
    _check_int(f"${world_from}" if world_from else "world_size", world_size, 1, 2**32 - 1)
    _check_int(f"${rank_from}" if rank_from else "rank", rank, 0, 2**32 - 1)
    if rank >= world_size:
        _rank_past_world(rank, rank_from, world_size, world_from)
    return rank, world_size, nodes, node


def _rank_past_world(rank, rank_from, world_size, world_from):
    """Raises InvalidArgument for rank >= world_size, naming where each came from."""
    r_txt = f"${rank_from}={rank}" if rank_from else f"rank={rank}"
    if world_from:
        w_txt = f"${world_from}={world_size}"
    elif world_size == 1 and rank_from:
        w_txt = ("world_size=1 (the default: neither $WORLD_SIZE nor $SLURM_NTASKS "
                 "is set)")
    else:
        w_txt = f"world_size={world_size}"
    fix = ("set $WORLD_SIZE too (torchrun sets both), or pass rank= and world_size="
           if rank_from else "pass a rank in 0..world_size-1")
    raise InvalidArgument(f"{r_txt} must be below {w_txt}: ranks count from 0 to "
                          f"world_size-1; {fix}")


def check_reconnect(reconnect_s):
    if not isinstance(reconnect_s, (int, float)) or reconnect_s < 0 \
            or reconnect_s * 1000 > 2**31 - 1:
        raise InvalidArgument(f"reconnect_s: {reconnect_s!r} is not a number of seconds "
                              f"in 0..{(2**31 - 1) // 1000}")


def stream_opts(a, place, spare, names):
    """The C options (feed_stream_opts) of a Loader's stream: place is
    placement()'s (rank, world_size, nodes, node), spare the slots the
    Loader asks for beyond credits, names the (dataset, pipeline, group)
    bytes, which the caller keeps alive. Without a mixture's sources or
    device slots (the caller sets those)."""
    o = _lib.StreamOpts()
    o.dataset, o.pipeline, o.group = names
    o.batch = a.batch_size
    o.credits = a.credits + spare
    o.epochs = 0   # endless: epochs are cut at FEED_END_OF_EPOCH
    o.drop_last = bool(a.drop_last)
    o.pad_last = bool(a.pad_last)
    o.seed = a.seed
    _order(o, a, place[2:])
    o.rank, o.world = place[:2]
    o.eval = bool(a.eval)
    o.on_error = _lib.FEED_ON_ERROR_SKIP if a.on_error == "skip" else _lib.FEED_ON_ERROR_FAIL
    o.max_bad = a.max_bad or 0
    o.reconnect_ms = int(a.reconnect_s * 1000) if a.reconnect_s > 0 else -1
    if o.reconnect_ms == 0:
        o.reconnect_ms = 1
    return o


def _order(o, a, nodes_node):
    """o's order (and window, node placement) from shuffle=, eval=, order=, window=."""
    if a.eval or not a.shuffle:
        o.order = _lib.FEED_ORDER_SEQUENTIAL
    elif a.order == "node":
        o.order = _lib.FEED_ORDER_NODE
        o.window = a.window or 0
        o.nodes, o.node = nodes_node
        o.node_deal = (_lib.FEED_NODE_DEAL_FIXED if a.node_deal == "fixed" else
                       _lib.FEED_NODE_DEAL_ROTATE)
    elif a.window is not None:
        o.order = _lib.FEED_ORDER_BLOCK_WINDOW
        o.window = a.window
    else:
        o.order = _lib.FEED_ORDER_FULL
