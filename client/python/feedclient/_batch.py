"""feedclient._batch: a delivered batch as a Batch, a dict of numpy
arrays or torch tensors viewing its slot with no copy (_make_batch), the
per-stream plan of how each field becomes arrays (_FieldPlan), and the
device slots' fields (DeviceArray). The arrays hold the batch's _Slot
(feedclient._stream) as their base, which releases the slot when the last
of them goes."""

import ctypes
import sys
from typing import Any, Tuple

import numpy as np

from . import _lib
from . import _reuse
from ._lib import lib
from ._conn import _error


class Batch(dict):
    """One batch: field name -> numpy array (or torch tensor) viewing the slot.

    Attributes: epoch (int), index (int: the batch's number within its
    epoch, from 0, also after a resume), indices (the dataset index of every
    sample, in order: a read-only numpy int64 array, a torch int64 tensor
    under as_torch; made at first use), padded (bool: holds wrap-around
    repeats of samples), replaced (tuple of int: the positions whose sample
    failed and hold the next good sample of the epoch instead,
    Loader(on_error="skip"); indices names what is there), dropped (tuple
    of int: under Loader(eval=True, on_error="skip") the dataset indices of
    the samples that failed and were left out, so the batch is that much
    shorter and the epoch holds every good sample once; None for one past
    the batch's first 64, which feedd counts without naming).

    Lifetime: the arrays view the batch's slot in shared memory with no
    copy. The slot goes back to feedd when this dict and every array or
    tensor viewing it (views of views included) are gone, whichever goes
    last; until then the memory stays valid, also after the Loader is
    closed. Arrays are writable: in-place ops touch only this batch.

    Leaving the slot: copy() (and copy.copy, copy.deepcopy) gives a Batch
    whose arrays and tensors own their memory, with epoch, index, indices
    and padded kept; pickle and torch.save store such a copy, so the
    loaded batch holds no slot either.
    """

    __slots__ = ("epoch", "index", "padded", "replaced", "dropped", "_slot", "_indices",
                 "_torch", "_entry")

    def __del__(self):
        # a batch of reused tensors (feedclient._reuse): its slot may go back now
        e = getattr(self, "_entry", None)
        if e is not None:
            e.drop(e, self)

    @property
    def indices(self) -> Any:
        """The dataset index of each sample (see the class's docstring)."""
        idx = getattr(self, "_indices", None)
        if idx is None:
            slot = getattr(self, "_slot", None)
            if slot is None:
                return None
            idx = _indices(slot, getattr(self, "_torch", None))
            self._indices = idx
        return idx

    @indices.setter
    def indices(self, v: Any) -> None:
        self._indices = v

    def copy(self) -> "Batch":
        """A Batch whose arrays and tensors own their memory (copies), with
        epoch, index, indices, padded, replaced and dropped kept; it holds no
        slot."""
        out = Batch()
        for k, v in self.items():
            out[k] = _own(v)
        out.epoch = getattr(self, "epoch", None)
        out.index = getattr(self, "index", None)
        out.padded = getattr(self, "padded", False)
        out.replaced = getattr(self, "replaced", ())
        out.dropped = getattr(self, "dropped", ())
        out._indices = _own(self.indices)
        return out

    def __copy__(self) -> "Batch":
        return self.copy()

    def __deepcopy__(self, memo: Any) -> "Batch":
        return self.copy()

    def __reduce__(self) -> Tuple[Any, ...]:
        c = self.copy()
        return (_rebuild_batch, (dict(c), c.epoch, c.index, c._indices, c.padded, c.replaced,
                                 c.dropped))

    def __repr__(self) -> str:
        epoch = getattr(self, "epoch", "?")
        index = getattr(self, "index", "?")
        idx = self.indices
        n = len(idx) if idx is not None else 0
        fields = ", ".join(f"{k}: {_describe(v)}" for k, v in self.items())
        return f"<feedclient.Batch epoch {epoch} index {index}, {n} samples, {{{fields}}}>"


def _rebuild_batch(fields, epoch, index, indices, padded, replaced=(), dropped=()):
    """Unpickles a Batch (Batch.__reduce__)."""
    out = Batch(fields)
    out.epoch, out.index, out._indices, out.padded = epoch, index, indices, padded
    out.replaced = replaced
    out.dropped = dropped
    return out


def register_torch_safe(torch) -> None:
    """Lets torch.load's default weights_only=True (torch >= 2.6) load a
    saved Batch: its pickle calls _rebuild_batch with tensors, numbers and
    tuples only, so the function is the one global to allow. A no-op on
    torch without add_safe_globals."""
    add = getattr(getattr(torch, "serialization", None), "add_safe_globals", None)
    if add is not None:
        add([_rebuild_batch])


def _own(v):
    """v, or what it holds, copied into memory of its own."""
    if isinstance(v, np.ndarray):
        return np.array(v)
    if isinstance(v, list):
        return [_own(x) for x in v]
    if hasattr(v, "__cuda_array_interface__") and hasattr(v, "to_torch"):  # DeviceArray
        return v.to_torch().clone()
    clone = getattr(v, "clone", None)
    if clone is not None and type(v).__module__.startswith("torch"):
        return clone()
    return v


def batch_samples(b):
    """The dataset indices of C batch b (feed_batch_samples), copied."""
    n = lib.feed_batch_size(b)
    idx = np.empty(n, np.int64)
    if n:
        ctypes.memmove(idx.ctypes.data, lib.feed_batch_samples(b), 8 * n)
    return idx


def _indices(slot, torch):
    """The dataset indices of the batch of slot (a _Slot), copied: numpy
    (read-only) or torch; those kept when it was detached, if it was."""
    idx = slot.samples if slot.samples is not None else batch_samples(slot.b)
    if torch is not None:
        return torch.from_numpy(idx)
    idx.flags.writeable = False
    return idx


def _describe(v):
    if isinstance(v, list):
        return f"list of {len(v)}"
    return f"{getattr(v, 'dtype', type(v).__name__)}{list(getattr(v, 'shape', ()))}"


class _FieldPlan:
    """How to turn field i of a batch into arrays; fixed per stream."""

    __slots__ = ("name", "i", "dtype", "trail", "row_bytes", "variable", "string", "bf16",
                 "torch_ok", "label", "flat")

    def __init__(self, i, f, torch, label_dtype=None, packed=False):
        self.name = f.name.decode()
        self.i = i
        self.variable = bool(f.variable)
        self.string = f.dtype == _lib.DTYPE_STRING
        self.bf16 = f.dtype == _lib.DTYPE_BFLOAT16
        self.dtype = np.dtype(_lib.DTYPES.get(f.dtype, "u1"))
        # info.fields: shape without the sample axis; variable fields: one
        # element's shape along the varying axis
        self.trail = tuple(f.shape[:f.rank])
        row = self.dtype.itemsize
        for d in self.trail:
            row *= d
        self.row_bytes = row
        self.torch_ok = False
        if torch is not None and not self.string:
            try:
                # bf16: the bits go to torch as int16, which every torch takes
                torch.from_numpy(np.empty(0, np.int16 if self.bf16 else self.dtype))
                self.torch_ok = True
            except TypeError:  # e.g. uint16 before torch 2.3: stays numpy
                pass
        # a label (one integer per sample) under as_torch: the numpy dtype
        # it is copied into (int64 unless label_dtype= says otherwise)
        self.label = None
        if torch is not None and label_dtype is not None and not self.variable and \
                not self.trail and self.dtype.kind in "iu" and self.dtype != label_dtype:
            self.label = label_dtype
        # packed rows: token ids reach torch as int64 on every torch (1.13
        # has no uint16), as embeddings and losses take them
        if torch is not None and packed and self.name == "input_ids" and \
                self.dtype != np.int64:
            self.label = np.dtype(np.int64)
        # packed rows: cu_seqlens is one int32 array over the whole batch
        # (0, every segment start, rows * L), as flash_attn_varlen_func takes it
        self.flat = packed and self.name == "cu_seqlens" and self.variable


def _replaced(lib_, b, n):
    """The positions of batch b (n samples) that hold replacements."""
    bits = ctypes.POINTER(ctypes.c_uint64)()
    if not lib_.feed_batch_replaced(b, ctypes.byref(bits)):
        return ()
    words = [bits[k] for k in range((n + 63) // 64)]
    return tuple(i for i in range(n) if words[i // 64] >> (i % 64) & 1)


def _failed(b, positions):
    """The dataset indices of the samples that failed at these replaced
    positions of batch b (feed_batch_failed); None for one feedd did not name."""
    out = []
    idx = ctypes.c_uint64()
    for p in positions:
        out.append(idx.value if lib.feed_batch_failed(b, p, ctypes.byref(idx)) == 0 else None)
    return out


def _dropped(lib_, b):
    """The dataset indices of the samples left out of batch b (eval skip,
    feed_batch_dropped); None for one feedd did not name."""
    n = lib_.feed_batch_dropped(b)
    if not n:
        return ()
    idx = ctypes.c_uint64()
    return tuple(idx.value if lib_.feed_batch_dropped_sample(b, k, ctypes.byref(idx)) == 0
                 else None for k in range(n))


def _field_views(s, slot, n):
    """(views, lo, span): each field's (plan, address, bytes, row ends) in
    batch slot.b of n samples, and one numpy array over all their bytes
    from address lo, whose base is slot (so the slot lives while it does)."""
    view = s.view
    views = []
    lo = hi = None
    for p in s.plan:
        lib.feed_batch_field(slot.b, p.i, s.view_ref)
        data, nbytes = view.data or 0, view.bytes
        ends = ctypes.string_at(view.ends, 8 * (n + 1)) if p.variable else None
        views.append((p, data, nbytes, ends))
        if nbytes:
            lo = data if lo is None or data < lo else lo
            end = data + nbytes
            hi = end if hi is None or end > hi else hi
    if lo is None:  # no bytes at all (eval skip dropped every sample): no view
        return views, 0, np.empty(0, np.uint8)
    slot.__array_interface__ = {"data": (lo, False), "shape": (hi - lo,),
                                "typestr": "|u1", "version": 3}
    return views, lo, np.asarray(slot)


def _make_batch(s, slot, as_torch):
    """A Batch over the batch slot owns, of stream s (just delivered)."""
    lib_ = lib
    b = slot.b
    n = lib_.feed_batch_size(b)
    batch = Batch()
    batch._slot = slot
    batch.epoch = lib_.feed_batch_epoch(b)
    batch.index = lib_.feed_batch_index(b)
    batch.padded = bool(lib_.feed_batch_padded(b))
    batch.replaced = _replaced(lib_, b, n)
    batch.dropped = _dropped(lib_, b)
    batch._indices = None   # made at first use (Batch.indices)
    torch = sys.modules["torch"] if as_torch else None
    batch._torch = torch
    views, lo, span = _field_views(s, slot, n)
    for p, data, nbytes, ends in views:
        off = data - lo
        if not p.variable:
            arr = np.ndarray((n,) + p.trail, p.dtype, span, off) if nbytes else \
                np.empty((n,) + p.trail, p.dtype)
            if torch is not None:
                batch[p.name] = torch.from_numpy(arr.astype(p.label)) if p.label is not None \
                    else _to_torch(torch, p, arr)
            else:
                batch[p.name] = arr
            continue
        e = np.frombuffer(ends, "<u8").tolist()
        if p.flat:
            a = np.ndarray(((e[n] - e[0]) // 4,), p.dtype, span, off + e[0]) if nbytes \
                else np.empty(0, p.dtype)   # every sample dropped (eval skip)
            batch["max_seqlen"] = int(np.diff(a).max()) if len(a) > 1 else 0
            batch[p.name] = _to_torch(torch, p, a) if torch is not None else a
            continue
        if p.string:
            base = span[off:off + nbytes].tobytes() if nbytes else b""
            batch[p.name] = [base[e[i]:e[i + 1]].decode("utf-8", "surrogateescape")
                             for i in range(n)]
            continue
        row = p.row_bytes or 1
        out = []
        for i in range(n):
            a = np.ndarray(((e[i + 1] - e[i]) // row,) + p.trail, p.dtype, span, off + e[i]) \
                if e[i + 1] > e[i] else np.empty((0,) + p.trail, p.dtype)
            out.append(_to_torch(torch, p, a) if torch is not None else a)
        batch[p.name] = out
    return batch


def _cuda_device():
    """The CUDA device torch uses now (0 without a CUDA torch)."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        return torch.cuda.current_device()
    return 0


def _cuda_stream(device):
    """The CUstream batches are tied to: torch's current stream on device,
    or the legacy default stream (0) without a CUDA torch."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        return torch.cuda.current_stream(device).cuda_stream
    return 0


def _device_fields(s, slot, batch, device):
    """Replaces batch's fixed fields with DeviceArrays of their device slot
    (feed_batch_device: the current stream waits for feedd's conversion)."""
    from .device import DeviceArray
    stream = _cuda_stream(device)
    view = _lib.View()
    for p in s.plan:
        if p.variable:
            continue   # on the host only
        r = lib.feed_batch_device(slot.b, p.i, stream, ctypes.byref(view))
        if r < 0:
            raise _error(s.conn, r)
        batch[p.name] = DeviceArray(slot, view, device)


def _to_torch(torch, p, arr):
    if not p.torch_ok:
        return arr
    if p.bf16:
        return torch.from_numpy(arr.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(arr)
