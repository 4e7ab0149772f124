"""feedclient.loader: batches from feedd as numpy arrays or torch tensors.

Owns the Python side of every C connection and stream the package opens.
A Loader opens one stream at a time, each on a connection of its own; a
stream (class _Stream) lives while its Loader uses it or any batch of it
is alive, and is closed by whoever drops the last of them: the Loader's
thread, or whichever thread the garbage collector runs a batch's
finalizer on. feed_stream_close() unmaps the regions and releases every
batch, so it must never run while an array still views a slot: that is why
a stream outlives its Loader when batches outlive it.

Threads: one thread at a time uses a Loader (its lock is taken without
waiting; a second thread gets ConcurrentUse). Batches may be dropped on
any thread: feed_release() may run concurrently with feed_next(). With
transform=, the Loader's own pool runs the user's function on batches
already taken; those threads never call into the stream, only drop
batches.

Must never: release a slot that an array still views, close a stream with
batches alive, or touch C objects in a process forked from the one that
opened them (a forked child shares the parent's release ring).
"""

import collections
import concurrent.futures
import ctypes
import errno
import gc
import os
import re
import sys
import threading
import time
import weakref
from typing import (Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple,
                    Union)

import numpy as np

from . import _lib
from ._lib import lib
from .errors import (ConcurrentUse, CreditsExhausted, DaemonNotRunning, FeedError,
                     InvalidArgument, LimitReached, LoaderClosed, ResumeRefused,
                     SkippedSamplesWarning, StreamStopped, Timeout, TransformError,
                     UnknownDataset, class_for)

_NEXT_SLICE_MS = 250   # feed_next() waits this long at most, so Ctrl-C gets through

# Bumped in every forked child: C objects opened before the fork belong to
# the parent (their shared memory and socket are shared with it).
_fork_gen = 0


def _after_fork_in_child():
    global _fork_gen
    _fork_gen += 1


os.register_at_fork(after_in_child=_after_fork_in_child)

class FieldInfo(NamedTuple):
    """One field of a dataset or of a stream's batches.

    name: str; dtype: the short name feedd gives it ("u8", "i64", "f32",
    "bf16", "bool", "str", ...); shape: tuple, a record's shape (fixed
    fields, batches add the sample axis in front), or for variable fields
    one element's shape along the varying first axis; variable: bool;
    max_bytes: the largest record of the field."""
    name: str
    dtype: str
    shape: Tuple[int, ...]
    variable: bool
    max_bytes: int


class DatasetInfo(NamedTuple):
    """A dataset feedd serves: name, samples (count), version (content
    hash: same version, same records), fields (tuple of FieldInfo), classes
    (tuple of str: label i is classes[i], as torchvision's
    ImageFolder.classes, for datasets packed by feedpack imagefolder; ()
    for others)."""
    name: str
    samples: int
    version: str
    fields: Tuple[FieldInfo, ...]
    classes: Tuple[str, ...]


def _fields(ptr, count):
    out = []
    for i in range(count):
        f = ptr[i]
        out.append(FieldInfo(f.name.decode(), f.dtype_name.decode(),
                             tuple(f.shape[:f.rank]), bool(f.variable), f.max_bytes))
    return tuple(out)


def _error(conn, code, hint=""):
    """The exception for a failed C call on conn (call before conn's next call)."""
    detail = _lib.errmsg(conn) or _lib.strerror(code)
    cls = class_for(code, detail)
    if hint:
        detail = f"{detail}; {hint}"
    return cls(detail, code, _lib.strerror(code))


def _connect(socket, timeout_ms=None):
    """A new connection (ctypes pointer) to feedd at socket (None: $FEEDD_SOCKET,
    else /run/feedd/feedd.sock). Raises DaemonNotRunning, AccessDenied or
    FeedError with the library's words, which name the socket."""
    conn = ctypes.c_void_p()
    r = lib.feed_conn_new(ctypes.byref(conn))
    if r < 0:
        raise MemoryError("feedclient: out of memory for a connection")
    if timeout_ms is not None:
        lib.feed_conn_set_timeout(conn, timeout_ms)
    r = lib.feed_conn_open(conn, os.fsencode(socket) if socket is not None else None)
    if r >= 0:
        return conn
    detail = _lib.errmsg(conn)
    lib.feed_disconnect(conn)
    reason = _lib.strerror(r)
    if r in (-errno.ENOENT, -errno.ECONNREFUSED, -errno.ENOTSOCK):
        raise DaemonNotRunning(f"{detail}; is feedd running there? Start it (feedd --socket "
                               f"PATH), or pass socket= (or set $FEEDD_SOCKET) to where it "
                               f"listens", r, reason, socket)
    if r == -errno.EACCES:
        cls = class_for(r, detail)
        raise cls(f"{detail}; this user may not connect to the socket (its group is set by "
                  f"feedd's socket_group)", r, reason)
    raise class_for(r, detail)(detail, r, reason)


def datasets(socket: Optional[str] = None) -> List[DatasetInfo]:
    """The datasets feedd serves to this user, in the daemon's config order.

    Returns a list of DatasetInfo(name, samples, version, fields, classes). socket:
    the daemon's socket (None: $FEEDD_SOCKET, else /run/feedd/feedd.sock).
    Blocks until the daemon answers (at most 10 s). Any thread. Raises
    DaemonNotRunning (naming the socket), AccessDenied, FeedError.
    """
    conn = _connect(socket)
    try:
        lst = ctypes.POINTER(_lib.DatasetList)()
        r = lib.feed_list_datasets(conn, ctypes.byref(lst))
        if r < 0:
            raise _error(conn, r)
        try:
            out = []
            for i in range(lst.contents.count):
                d = lst.contents.datasets[i]
                classes = tuple(d.classes[k].decode() for k in range(d.num_classes))
                out.append(DatasetInfo(d.name.decode(), d.num_samples, d.version.decode(),
                                       _fields(d.fields, d.num_fields), classes))
            return out
        finally:
            lib.feed_dataset_list_free(lst)
    finally:
        lib.feed_disconnect(conn)


class DatasetName(str):
    """A Loader's dataset: its name (a str, as before), plus path(i).

    path(i): the path of sample i as feedpack imagefolder recorded it,
    relative to the tree it packed (the name every error and skip of that
    sample uses). Asks the daemon on a connection of its own; blocks until
    it answers. Raises IndexError for a sample past the end, UnknownDataset
    (a FeedError) when the dataset recorded no paths or is not served,
    DaemonNotRunning, AccessDenied."""

    __slots__ = ("_socket",)

    def __new__(cls, name: str, socket: Optional[str]) -> "DatasetName":
        self = super().__new__(cls, name)
        self._socket = socket
        return self

    def path(self, i: int) -> str:
        """Sample i's path as feedpack recorded it (see the class). Blocks
        until the daemon answers; any thread."""
        _check_int("i", i, 0, 2**64 - 1)
        conn = _connect(self._socket)
        try:
            buf = ctypes.create_string_buffer(4096)
            r = lib.feed_sample_path(conn, str(self).encode(), i, buf, len(buf))
            if r == -errno.ERANGE:
                raise IndexError(_lib.errmsg(conn))
            if r < 0:
                raise _error(conn, r)
            return buf.value.decode("utf-8", "surrogateescape")
        finally:
            lib.feed_disconnect(conn)


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
                 "_torch")

    @property
    def indices(self) -> Any:
        """The dataset index of each sample (see the class's docstring)."""
        idx = getattr(self, "_indices", None)
        if idx is None:
            slot = getattr(self, "_slot", None)
            if slot is None:
                return None
            idx = _indices(slot.b, getattr(self, "_torch", None))
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


def _indices(b, torch):
    """The dataset indices of batch b, copied: numpy (read-only) or torch."""
    n = lib.feed_batch_size(b)
    idx = np.empty(n, np.int64)
    if n:
        ctypes.memmove(idx.ctypes.data, lib.feed_batch_samples(b), 8 * n)
    if torch is not None:
        return torch.from_numpy(idx)
    idx.flags.writeable = False
    return idx


def _record(s):
    """A ctypes struct as a dict: text decoded, arrays as lists."""
    out = {}
    for name, *_ in s._fields_:
        v = getattr(s, name)
        if isinstance(v, bytes):
            v = v.decode("ascii", "replace")
        elif isinstance(v, ctypes.Array):
            v = list(v)
        out[name] = v
    return out


def status(socket: Optional[str] = None) -> Dict[str, Any]:
    """What `feedctl status` shows, as a dict: the daemon's counters
    ("server_version", "uptime_ms", "connections", "workers", "requests",
    ...), "cache" (hits, misses, evictions, bytes, entries, budget) and
    "streams": one dict per stream or group over a dataset this user may
    read (kind, uid, pid, dataset, group, members, batch, credits,
    credits_in_use, samples_per_s, mb_per_s, worker_ns, reader_wait_share,
    pipeline, shm_bytes, device — "" when no device slots were asked for,
    "ipc", or why the stream has host slots only — device_bytes,
    member_pids, job — the job its client named: FEED_JOB_ID, SLURM_JOB_ID or
    TORCHELASTIC_RUN_ID — and samples_per_s_10s, mb_per_s_10s,
    reader_wait_share_10s over the last 10 s, rank and world, slot_bytes,
    batches_per_epoch, epochs, start_epoch, start_batch, detached_batches —
    batches its readers moved to private memory because a view of them was
    still held when the slot was needed, their own count —, ...), and "gpus":
    one dict per GPU the daemon's driver shows (ordinal, name, allowed,
    context: whether feedd holds a context there, failed, slot_bytes).
    Blocks until the daemon answers (at most 10 s). Any thread. Raises as
    datasets()."""
    return _status(socket, None)


def _status(socket, timeout_ms):
    conn = _connect(socket, timeout_ms)
    try:
        st = ctypes.POINTER(_lib.Status)()
        r = lib.feed_status(conn, ctypes.byref(st))
        if r < 0:
            raise _error(conn, r)
        try:
            out = _record(st.contents.stats)
            out["cache"] = _record(st.contents.cache)
            streams = []
            for i in range(st.contents.count):
                d = _record(st.contents.streams[i])
                n = d.pop("nmember_pids")
                d["member_pids"] = d["member_pids"][:n]
                d["member_reader_wait_ns"] = d["member_reader_wait_ns"][:n]
                streams.append(d)
            out["streams"] = streams
            out["gpus"] = [_record(st.contents.gpus[i]) for i in range(st.contents.ngpus)]
            out["pending"] = [st.contents.pending[i].decode("ascii", "replace")
                              for i in range(st.contents.npending)]
            out["jpeg_decode"] = st.contents.jpeg_decode.decode("utf-8", "replace")
            return out
        finally:
            lib.feed_status_free(st)
    finally:
        lib.feed_disconnect(conn)


def _describe(v):
    if isinstance(v, list):
        return f"list of {len(v)}"
    return f"{getattr(v, 'dtype', type(v).__name__)}{list(getattr(v, 'shape', ()))}"


class _Slot:
    """Owner of one delivered batch: numpy arrays of the batch have it as
    their base (through __array_interface__), and the Batch holds it. Its
    __del__ runs when the last of them goes, on whatever thread drops it,
    and releases the slot, or, once the batch was detached from its slot
    (_Stream.detach_oldest: its bytes moved to private memory at the same
    addresses), frees that copy."""

    __slots__ = ("__array_interface__", "stream", "b", "d", "__weakref__")

    def __init__(self, stream, b):
        self.d = None
        stream.delivered(self)
        self.stream = stream
        self.b = b

    def __del__(self):
        stream = self.stream
        if stream is not None:
            self.stream = None
            if self.d is not None:
                stream.free_detached(self.d)
            else:
                stream.release(self.b)


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


class _Stream:
    """One C connection and one stream on it, with the count of what keeps
    them: the Loader (until it moves to another stream or closes) and each
    batch delivered and not yet released. The last to go closes both, on
    its own thread. Never in a reference cycle (it points to no Python
    object that points back), so it is freed as soon as its count says."""

    def __init__(self, conn, st, torch, spare=1, label_dtype=None):
        self.conn = conn
        self.st = st
        self.fork_gen = _fork_gen
        self.lock = threading.Lock()   # refs and held; nothing else is taken under it
        self.refs = 1                  # the Loader's
        self.held = 0                  # batches delivered, not released
        self.slots = collections.deque()  # weakrefs to the _Slots delivered, oldest first
        self.detached = 0              # batches detach_oldest() moved off their slots
        info = lib.feed_stream_info(st).contents
        self.batches_per_epoch = info.batches_per_epoch
        self.start_epoch = info.start_epoch
        self.start_batch = info.start_batch
        # what the user may hold: the granted slots less those the Loader
        # keeps for itself (the batch being fetched, transform= in flight)
        self.spare = spare
        self.credits = info.credits - spare
        self.batch = info.batch
        self.pipeline = (info.pipeline or b"").decode()
        self.dataset_version = (info.dataset_version or b"").decode()
        self.note = (info.note or b"").decode()
        self.fields = _fields(info.fields, info.num_fields)
        # concat's rows (pipeline "concat(seq_len=L)"): input_ids become
        # int64 under as_torch, cu_seqlens one flat array per batch
        packed = {f.name for f in self.fields} >= {"input_ids", "cu_seqlens"}
        self.plan = [_FieldPlan(i, info.fields[i], torch, label_dtype, packed)
                     for i in range(info.num_fields)]
        self.view = _lib.View()
        self.view_ref = ctypes.byref(self.view)
        self.bp = ctypes.c_void_p()
        self.bp_ref = ctypes.byref(self.bp)
        # device slots (Loader(device_slots=N)): granted, or why not
        why = ctypes.c_char_p()
        self.device_slots = lib.feed_stream_device(st, ctypes.byref(why)) == 1
        self.device_reason = (why.value or b"").decode("utf-8", "replace")
        self.pinned = False

    def pin(self):
        """Registers the data region with the CUDA driver (feed_stream_pin)."""
        r = lib.feed_stream_pin(self.st, _cuda_device())
        if r < 0:
            detail = _lib.errmsg(self.conn)
            from .errors import GpuUnavailable
            cls = GpuUnavailable if r == -errno.ENODEV else class_for(r, detail)
            raise cls(f"pin_memory=True: {detail}; pass pin_memory=False (copies to the GPU "
                      f"are then pageable: .to('cuda', non_blocking=True) does not overlap)",
                      r, _lib.strerror(r))
        self.pinned = True

    def delivered(self, slot=None):
        with self.lock:
            self.refs += 1
            self.held += 1
        if slot is not None:
            q = self.slots
            q.append(weakref.ref(slot))
            while q and q[0]() is None:
                q.popleft()
            if len(q) > 4 * (self.credits + self.spare) + 16:  # a batch kept at the front
                alive = [r for r in q if r() is not None]
                q.clear()
                q.extend(alive)

    def detach_oldest(self):
        """Detaches the oldest batch still held (feed_batch_detach): its
        views stay valid in private memory, its slot goes back to feedd.
        True when one was. The loop's thread, lock held."""
        if self.fork_gen != _fork_gen:
            return False  # a forked child: the slots are the parent's
        q = self.slots
        while q:
            slot = q.popleft()()
            if slot is None or slot.d is not None or slot.stream is None:
                continue
            d = ctypes.c_void_p()
            if lib.feed_batch_detach(slot.b, ctypes.byref(d)) < 0:
                q.appendleft(weakref.ref(slot))
                return False
            slot.d = d.value
            with self.lock:
                self.held -= 1   # the stream's ref stays until the copy is freed
            self.detached += 1
            return True
        return False

    def free_detached(self, d):
        """feed_detached_free(d); closes the stream if that was the last reference."""
        if self.fork_gen != _fork_gen:
            return
        lib.feed_detached_free(d)
        with self.lock:
            self.refs -= 1
            last = self.refs == 0
        if last:
            self._close()

    def release(self, b):
        """feed_release(b); closes the stream if that was the last reference."""
        if self.fork_gen != _fork_gen:
            return  # a forked child: the slot is the parent's to release
        if lib.feed_release(b) < 0:
            return  # released already: nothing of ours to count
        with self.lock:
            self.held -= 1
            self.refs -= 1
            last = self.refs == 0
        if last:
            self._close()

    def unref(self):
        """Drops the Loader's reference; closes the stream if it was the last."""
        with self.lock:
            self.refs -= 1
            last = self.refs == 0
        if last:
            self._close()

    def _close(self):
        if self.fork_gen != _fork_gen:
            return
        st, conn, self.st, self.conn = self.st, self.conn, None, None
        lib.feed_stream_close(st)   # nothing is held: every batch went first
        lib.feed_disconnect(conn)


def _drop_stream(box):
    """The Loader's finalizer (close() or garbage collection): lets its stream go."""
    stream, box[0] = box[0], None
    if stream is not None:
        stream.unref()


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


class Loader:
    """Batches of a dataset served by feedd, one epoch per iteration.

    Loader(dataset, batch_size, *, pipeline=None, shuffle=True, seed=0,
           drop_last=False, pad_last=False, eval=False, window=None,
           rank=None, world_size=None, credits=4, socket=None,
           as_torch=False, reconnect_s=30, group=None, device=None,
           dtype=None, mean=None, std=None, layout=None,
           device_slots=None, on_error="fail", max_bad=None,
           mixup_alpha=None, cutmix_alpha=None, mix_switch_prob=0.5,
           num_classes=None, label_smoothing=None, order=None, nodes=None,
           node=None, node_deal="rotate", timeout=None, label_dtype="int64",
           pin_memory=False, transform=None, transform_threads=1,
           wait_for_daemon=0, samples_per_epoch=None, convert_on="feedd")

    dataset: a name feedd serves (see datasets()), or a mixture: a mapping
    of names to weights (or feedclient.Source), one stream whose rows come
    from each source by its share, with a "source" field (feedclient.mixture;
    samples_per_epoch: its epoch's rows). batch_size: samples per
    batch. pipeline: ops on the samples, e.g. "random_crop(size=28, pad=2)
    | hflip(p=0.5)", or the name of a pipeline in feedd's config; None: the
    records as stored. shuffle: a new permutation of the dataset each epoch
    (False: sequential order). window: block-window shuffle, W blocks per
    window (each decoded block used while cached; needs shuffle=True).
    seed: order and augmentation randomness (same seed, same batches).
    drop_last: each rank's share cut to whole batches. pad_last: the last
    batch filled by wrap-around so every batch is full (static shapes);
    without either, DataLoader's counts: the last batch is partial, and with
    several ranks each rank's share is padded to equal counts as
    DistributedSampler pads it. eval: sequential, every sample exactly once
    across all ranks (ranks may get uneven counts). rank, world_size: this
    process's share; by default torchrun's $RANK/$WORLD_SIZE, else Slurm's
    $SLURM_PROCID/$SLURM_NTASKS, else 0 and 1. credits (default 4, 1 up
    to feedd's limits.max_credits less one, 63 by default): how many
    batches the loop may hold while it fetches the next, and how many feedd
    builds ahead. The rule: a plain `for batch in loader` needs credits >=
    1 (the loop variable holds the previous batch while the next is
    fetched); a loop that keeps k batches (a look-ahead prefetcher, a list)
    needs credits >= k. A batch is held while it, or any array or tensor
    viewing it, is alive: an autograd graph over its tensors (an evaluation
    loop without torch.no_grad() that keeps its outputs) holds it too. When
    the next batch needs a slot that held batches keep, the oldest of them
    is detached: its bytes move to private memory at the same addresses
    (every view stays valid: a row kept for logging costs one copy of its
    batch, no credit) and the slot goes back to feedd (loader.detached
    counts them). Only where that cannot be done (a group member, pinned
    memory, device slots) does the loop raise CreditsExhausted, with the
    count held. socket: the daemon's
    socket (None: $FEEDD_SOCKET, else /run/feedd/feedd.sock). as_torch:
    batches hold torch tensors over the same memory (torch.from_numpy)
    instead of numpy arrays; integer labels (one integer per sample) become
    int64 copies, as torch's losses take them (label_dtype=), and
    Batch.indices a tensor. reconnect_s (seconds, default 30, 0 to 2147):
    when feedd goes away (a restart), how long to keep reconnecting before
    DaemonGone, to the millisecond; 0: fail at once (the message says
    reconnecting is off); while reconnecting, next() still returns to
    Python every 0.25 s, so Ctrl-C interrupts it. timeout (seconds, None:
    no limit): the longest one next() waits for a batch, also while feedd
    is away and the Loader reconnects; past it, Timeout names the dataset,
    the wait and what `feedctl status` shows about the stream (or that
    feedd does not answer); the Loader stays usable. wait_for_daemon
    (seconds, default 0): how long construction waits for feedd's socket
    to answer (a job started with its daemon) before DaemonNotRunning.
    label_dtype (default "int64"): the type integer labels take under
    as_torch or device= (a torch or numpy dtype); None keeps the stored
    one (e.g. uint8 of IDX files). pin_memory (default False): the
    stream's shared memory is registered with the CUDA driver
    (feed_stream_pin), so .to("cuda", non_blocking=True) of a batch's
    tensors is an asynchronous copy; without a driver the Loader raises
    GpuUnavailable saying why. transform, transform_threads (default None,
    1): see Transforms below. group: a name
    (1 to 63 of A-Z a-z 0-9 _ . -): Loaders of one user with the same group
    and the same dataset, pipeline, seed, batch_size, order, window, rank,
    world_size, drop_last, pad_last, eval, on_error and max_bad share one
    stream of batches,
    each built once by feedd (a sweep, or train jobs side by side); another
    value of any of them is refused naming it (InvalidArgument). The
    batches are copy-on-write: writing into one changes it for this process
    only. A member that holds batches and releases none for feedd's group
    timeout (30 s by default) is detached: its next batch raises
    Detached (a StreamStopped) saying so.

    Groups: iterations follow the group. The first gives the rest of the
    epoch the group is in (partial for a Loader that joins late: its
    first_epoch and first_batch say where it came in); one left early is
    continued by the next iteration; set_epoch() and load_state_dict() are
    refused.

    Epochs: iter(loader) gives the batches of one epoch, then stops. The
    epoch is the one set_epoch(n) chose, else the one after the previous
    iteration's (0 first), as with DistributedSampler. A new iteration
    always gives a whole epoch: one started before the previous one was
    finished (a `break`) reopens the stream at the new epoch's first batch.
    The only partial epoch is the first after load_state_dict(). Behind the
    scenes the C stream runs on endlessly from epoch to epoch, so the
    daemon builds the next epoch's first batches while the trainer finishes
    the current one.

    Batches: see Batch. Fixed-size fields are arrays of shape (samples,
    *record shape). Variable-length fields are lists of per-sample arrays
    (each of shape (length, *element shape)), also viewing the slot; "str"
    fields are lists of Python str (decoded copies). bf16 fields are uint16
    arrays of the raw bits in numpy, torch.bfloat16 tensors with as_torch.
    Under as_torch, a field whose dtype this torch cannot hold (uint16,
    uint32, uint64 before torch 2.3) stays a numpy array.

    Opening blocks until feedd has created the stream (up to 10 s) and
    raises DaemonNotRunning, UnknownDataset, AccessDenied, BadPipeline,
    InvalidArgument, LimitReached or FeedError, each with the daemon's
    words. Iterating may raise CreditsExhausted, DaemonGone, StreamStopped,
    Timeout, TransformError.

    Threads: one thread at a time; use from a second thread meanwhile
    raises ConcurrentUse. Batches may be dropped on any thread. Not for
    processes forked after it was opened (DataLoader workers): open a
    Loader in each process instead.

    device, dtype, mean, std, layout: converted batches (feedclient.device):
    device="cuda" (or "cuda:N") or "cpu"; each u8 image field, (h, w) or
    (h, w, c) with c <= 4, becomes a tensor of dtype (torch.float32, the
    default, torch.float16 or torch.bfloat16) in layout "NCHW" (None, the
    default, means it) or "NHWC", normalized as torchvision's Normalize after ToTensor with mean
    and std (one value per channel, or one for all; units of x/255; None:
    x/255; mean and std are checked against the channels when the Loader
    is made); u16 / u32 fields become int64, integer labels label_dtype;
    other fields become tensors on the device (copies). On "cuda" the u8
    bytes are copied and converted on the GPU into tensors torch
    allocates, on its current stream; where the
    GPU path is not usable Loader raises GpuUnavailable with the reason
    (feedclient.gpu_info()). On "cpu" the same conversion runs on the CPU.
    Such batches hold no slot: it goes back once the conversion has run.
    convert_on: where device="cpu" converts (and mixes): "feedd" (default)
    appends normalize(...) and mix(...) to the stream's pipeline, so
    feedd's workers publish float batches with soft labels and next() only
    hands them over (tensors viewing the slot, as as_torch's); "loader"
    runs the same CPU twins on the loop's thread, into tensors of their
    own. Both give the same bits. "feedd" falls back to "loader" for a
    group, a mixture, batches with more than one u8 image field or with
    u16 / u32 fields, and values the pipeline text cannot write exactly.
    Without device=, layout="NCHW" makes the u8 image field NCHW uint8 (as
    torchvision's PILToTensor / ToImage): feedd's workers write it so,
    contiguous (the pipeline gets "| to_chw"; a pipeline ending in
    normalize has its own layout key); None or "NHWC" keeps it as stored.

    on_error: what a sample the pipeline cannot take (an image that does
    not decode) does: "fail" (default, as DataLoader) stops the stream,
    StreamStopped naming it, once the batches before it are read; "skip"
    replaces it by the sample at the next position of the epoch's global
    order that builds (the same on every run, for any worker count and
    after load_state_dict()), the batch keeps its size and lists the
    positions in batch.replaced, and status() counts them ("replaced");
    at the epoch's end the Loader warns once (SkippedSamplesWarning) with
    the count and the files that failed (their recorded paths).
    max_bad (with "skip"): past this many replaced samples in one epoch
    the stream stops (StreamStopped naming them); None: 0.1% of the
    epoch, at least 1.

    device_slots: a CUDA device ordinal (int): feedd converts each batch on
    that GPU itself, into device memory it owns, and hands it over by CUDA
    IPC (C: feed_stream_opts.device), with dtype, mean, std and layout as
    above (dtype=None: torch.float32). Each fixed field of a batch is then
    a DeviceArray (its __cuda_array_interface__ views feedd's device slot;
    torch.as_tensor(x, device="cuda") takes it with no copy, or
    x.to_torch()): images converted, u16 / u32 as int64, others as they
    are; variable-length fields stay host arrays. Taking the batch makes
    torch's current CUDA stream (the legacy default stream without a CUDA
    torch) wait for feedd's conversion, on the GPU; dropping the last view
    lets feedd reuse the slot once the work that stream had queued by then
    has run. Where feedd or this process cannot serve device slots (no GPU,
    another PID namespace, a group, ...) the Loader opens anyway with host
    batches: loader.device_slots is then False and loader.device_reason says
    why. Not with device=.

    mixup_alpha, cutmix_alpha, mix_switch_prob, num_classes,
    label_smoothing (with device=): batch mixes after the conversion, as
    torchvision's classification references and timm do them
    (feedclient.device): mixup_alpha > 0 blends each image with the
    previous one of the batch (the batch rolled by one) by lambda ~
    Beta(alpha, alpha); cutmix_alpha > 0 pastes the previous image's box
    (lambda corrected by its area); with both, a batch gets cutmix with
    probability mix_switch_prob (0.5: torchvision's RandomChoice). The
    integer field "label" becomes soft labels, an (n, num_classes) float32
    tensor: one-hot with label_smoothing (timm's), mixed by the same lambda;
    num_classes is required (alone, with no alpha: smoothed one-hot labels).
    The draws are the stream's (seed, epoch, batch index and rank): a resume
    and any worker count give the same mix. Refused (InvalidArgument naming
    the argument) without device=, when the batches have no integer
    "label" field, and, at the batch, for a label outside [0, num_classes).
    order="node", nodes, node, node_deal: node-aware order for multi-node
    jobs (one feedd per node): each epoch, units of window blocks (None:
    1) are dealt to the nodes by a seeded permutation, samples are shuffled
    inside a node's share and its ranks split the share as
    DistributedSampler splits an epoch, so each node's feedd reads and
    caches 1/nodes of the dataset. The counts (drop_last, pad_last,
    padding) are the other orders'; padding repeats samples of the node's
    own share. Ranks, nodes and node come from torchrun ($RANK,
    $WORLD_SIZE, $LOCAL_RANK, $LOCAL_WORLD_SIZE, $GROUP_RANK or $NODE_RANK)
    or Slurm ($SLURM_PROCID, $SLURM_NTASKS, $SLURM_NODEID, $SLURM_NNODES,
    $SLURM_LOCALID), else the arguments (nodes default 1, node rank //
    (world_size // nodes)); variables that disagree with each other or with
    an argument raise InvalidArgument naming them (feedclient.nodes).
    node_deal "rotate" (default) deals anew each epoch; "fixed" keeps each
    node's share, so a cache holding 1/nodes of the dataset serves every
    epoch after the first. A state_dict taken on N nodes loads on M nodes:
    the rest of the epoch, every remaining sample once, then whole epochs.

    Transforms: transform=fn runs fn(batch) for each batch on
    transform_threads threads of this process, up to that many batches
    ahead of the loop; the loop gets fn's results in the batches' order.
    A batch's slot goes back once fn's result no longer refers to it (a
    result of new tensors lets it go at once; credits need not count
    batches in flight). An exception in fn reaches the loop as
    TransformError naming the batch's epoch and index (the original is its
    __cause__); the loop may go on. state_dict() and resume are unchanged:
    the position is that of the first batch the loop has not received.
    This is the place for the Python a DataLoader's collate_fn would run;
    per-sample work (crops, flips, decoding, normalization) belongs in
    feedd's pipeline, where it runs on the daemon's workers with no GIL.

    Errors when opening, with the argument or variable named, its value
    and the allowed range or the fix: InvalidArgument (a bad argument; a
    path given as dataset; rank >= world_size, from $RANK/$WORLD_SIZE too;
    credits above feedd's limit; mean/std whose count fits no image
    field's channels), UnknownDataset, BadPipeline, LimitReached (e.g.
    max_streams: each Loader holds a stream until close()), AccessDenied,
    DaemonNotRunning, GpuUnavailable (device="cuda", pin_memory=True);
    load_state_dict() raises ResumeRefused naming the argument that
    differs (shuffle=, seed=, batch_size=, ...).

    Lifetime: close() (or `with`, or garbage collection) lets go of the
    stream; feedd frees it once every batch still alive is gone too.
    """

    def __init__(self, dataset: Any, batch_size: int, *, pipeline: Optional[str] = None,
                 shuffle: bool = True, seed: int = 0, drop_last: bool = False,
                 pad_last: bool = False, eval: bool = False, window: Optional[int] = None,
                 rank: Optional[int] = None, world_size: Optional[int] = None,
                 credits: int = 4, socket: Optional[str] = None, as_torch: bool = False,
                 reconnect_s: float = 30, group: Optional[str] = None,
                 device: Optional[str] = None, dtype: Any = None,
                 mean: Union[None, float, Sequence[float]] = None,
                 std: Union[None, float, Sequence[float]] = None,
                 layout: Optional[str] = None,
                 device_slots: Optional[int] = None, on_error: str = "fail",
                 max_bad: Optional[int] = None, mixup_alpha: Optional[float] = None,
                 cutmix_alpha: Optional[float] = None, mix_switch_prob: float = 0.5,
                 num_classes: Optional[int] = None, label_smoothing: Optional[float] = None,
                 order: Optional[str] = None, nodes: Optional[int] = None,
                 node: Optional[int] = None, node_deal: str = "rotate",
                 timeout: Optional[float] = None, label_dtype: Any = "int64",
                 pin_memory: bool = False,
                 transform: Optional[Callable[[Batch], Any]] = None,
                 transform_threads: int = 1, wait_for_daemon: float = 0,
                 samples_per_epoch: Optional[int] = None, convert_on: str = "feedd") -> None:
        self._closed = True  # until the first stream is open
        self._mixture = None
        from collections.abc import Mapping as _Mapping
        if isinstance(dataset, _Mapping):  # a mixture: feedclient.mixture
            from .mixture import Mixture
            self._mixture = Mixture(dataset, samples_per_epoch)
            dataset = self._mixture.label
        elif samples_per_epoch is not None:
            raise InvalidArgument("samples_per_epoch: a mixture's (dataset={name: weight})")
        self._dataset = dataset
        self._pool = None    # transform='s threads, made at the first iteration
        # device= (feedclient.device): converted tensors on "cuda" or "cpu"
        self._conv = None
        self._slots_req = None
        if device is not None and device_slots is not None:
            raise InvalidArgument("device and device_slots: choose one (device= converts in "
                                  "this process, device_slots= has feedd convert on the GPU)")
        mix_args = {"mixup_alpha": mixup_alpha, "cutmix_alpha": cutmix_alpha,
                    "num_classes": num_classes, "label_smoothing": label_smoothing}
        given = [k for k, v in mix_args.items() if v is not None] + \
            (["mix_switch_prob"] if mix_switch_prob != 0.5 else [])
        if given and device is None:
            raise InvalidArgument(f"{given[0]}: mixup, cutmix and soft labels work on converted "
                                  f"batches: give device='cuda' or device='cpu' too")
        if convert_on not in ("feedd", "loader"):
            raise InvalidArgument(f"convert_on={convert_on!r}: 'feedd' (its workers convert "
                                  f"for device='cpu') or 'loader' (this thread converts)")
        self._convert_on = convert_on
        if device is not None:
            from .device import Conversion, MixPlan
            mix = MixPlan(mixup_alpha, cutmix_alpha, mix_switch_prob, num_classes,
                          label_smoothing) if given else None
            self._conv = Conversion(device, dtype, mean, std, layout or "NCHW", mix)
        elif device_slots is not None:
            from .device import slots_request
            self._slots_req = slots_request(device_slots, dtype, mean, std, layout or "NCHW")
        elif dtype is not None or mean is not None or std is not None:
            raise InvalidArgument("dtype, mean and std convert batches for a device: give "
                                  "device='cuda' or device='cpu' too")
        if not isinstance(dataset, str) or not dataset:
            raise InvalidArgument("dataset: a non-empty name (str) is required")
        if "/" in dataset and self._mixture is None:
            raise InvalidArgument(f"dataset={dataset!r}: a name feedd serves, not a path; have "
                                  f"feedd serve the packed directory (feedd --dataset "
                                  f"NAME={dataset}, or a datasets: entry in its config) and "
                                  f"pass NAME (feedclient.datasets() lists the names served)")
        _check_int("batch_size", batch_size, 1, 2**32 - 1)
        _check_int("seed", seed, 0, 2**64 - 1)
        _check_int("credits", credits, 1, 65535)
        _check_int("transform_threads", transform_threads, 1, 256)
        if transform is not None and not callable(transform):
            raise InvalidArgument(f"transform={transform!r}: a callable fn(batch) -> batch, "
                                  f"or None")
        if timeout is not None and (isinstance(timeout, bool) or
                                    not isinstance(timeout, (int, float)) or
                                    not 0 < timeout <= 2**31 // 1000):
            raise InvalidArgument(f"timeout={timeout!r}: seconds (a number above 0, at most "
                                  f"{2**31 // 1000}) that one batch may take, or None to wait "
                                  f"as long as it takes")
        if pipeline is not None and not isinstance(pipeline, str):
            raise InvalidArgument("pipeline: a str or None is required")
        if isinstance(wait_for_daemon, bool) or not isinstance(wait_for_daemon, (int, float)) \
                or not 0 <= wait_for_daemon <= 86400:
            raise InvalidArgument(f"wait_for_daemon={wait_for_daemon!r}: seconds (0 to 86400) "
                                  f"to wait for feedd's socket at construction")
        if window is not None:
            _check_int("window", window, 1, 2**32 - 1)
            if not shuffle or eval:
                raise InvalidArgument("window: block-window order shuffles; it needs "
                                      "shuffle=True and eval=False")
        if group is not None and (not isinstance(group, str) or not 1 <= len(group) <= 63):
            raise InvalidArgument("group: a name (str) of 1 to 63 characters, or None")
        if drop_last and pad_last:
            raise InvalidArgument("drop_last and pad_last: choose one (pad_last fills the "
                                  "last batch that drop_last drops)")
        if on_error not in ("fail", "skip"):
            raise InvalidArgument(f"on_error: {on_error!r} is not 'fail' or 'skip'")
        if max_bad is not None:
            _check_int("max_bad", max_bad, 1, 2**64 - 1)
            if on_error != "skip":
                raise InvalidArgument("max_bad: only with on_error='skip'")
        if order not in (None, "node") or node_deal not in ("rotate", "fixed") or \
                (order is None and (nodes, node) != (None, None)):
            raise InvalidArgument(f"order={order!r}, node_deal={node_deal!r}: order is None "
                                  f"(see shuffle, window) or 'node' (with nodes, node), "
                                  f"node_deal 'rotate' or 'fixed'")
        if order == "node":
            if eval or not shuffle:
                raise InvalidArgument("order='node' shuffles: it needs shuffle=True and "
                                      "eval=False")
            from .nodes import placement
            rank, world_size, nodes, node = placement(rank, world_size, nodes, node)
        rank_from = world_from = None
        if rank is None:
            rank, rank_from = _env_int(("RANK", "SLURM_PROCID"), 0)
        if world_size is None:
            world_size, world_from = _env_int(("WORLD_SIZE", "SLURM_NTASKS"), 1)
        _check_int(f"${world_from}" if world_from else "world_size", world_size, 1, 2**32 - 1)
        _check_int(f"${rank_from}" if rank_from else "rank", rank, 0, 2**32 - 1)
        if rank >= world_size:
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
        if not isinstance(reconnect_s, (int, float)) or reconnect_s < 0 \
                or reconnect_s * 1000 > 2**31 - 1:
            raise InvalidArgument(f"reconnect_s: {reconnect_s!r} is not a number of seconds "
                                  f"in 0..{(2**31 - 1) // 1000}")
        self._torch = None
        if as_torch or self._conv is not None:
            import torch
            self._torch = torch
        self._label_dtype = _label_dtype(label_dtype, self._torch)
        self._timeout = timeout
        self._reconnect_s = reconnect_s
        self._transform = transform
        self._transform_threads = transform_threads
        self._pending = None       # the iteration's transform= queue (_EpochIter)
        self._credits = credits
        self._detached = 0
        self._pin = bool(pin_memory)
        self._dataset = dataset
        self._socket = socket
        self._batch_size = batch_size
        self._rank = rank
        self._world_size = world_size
        self._as_torch = bool(as_torch)
        self._opts = _lib.StreamOpts()
        o = self._opts
        self._dataset_b = dataset.encode()
        pipeline = _u8_layout(pipeline, layout, device, device_slots)
        self._pipeline_b = pipeline.encode() if pipeline is not None else None
        o.dataset = self._dataset_b
        if self._mixture is not None:
            self._mixture.apply(o)
        o.batch = batch_size
        # one slot more than credits: the batch being fetched while the loop
        # still holds the previous one (and transform='s batches in flight)
        self._spare = 1 + (transform_threads if transform is not None else 0)
        o.credits = credits + self._spare
        o.epochs = 0   # endless: epochs are cut at FEED_END_OF_EPOCH
        o.drop_last = bool(drop_last)
        o.pad_last = bool(pad_last)
        o.seed = seed
        if eval or not shuffle:
            o.order = _lib.FEED_ORDER_SEQUENTIAL
        elif order == "node":
            o.order = _lib.FEED_ORDER_NODE
            o.window = window or 0
            o.nodes, o.node = nodes, node
            o.node_deal = (_lib.FEED_NODE_DEAL_FIXED if node_deal == "fixed" else
                           _lib.FEED_NODE_DEAL_ROTATE)
        elif window is not None:
            o.order = _lib.FEED_ORDER_BLOCK_WINDOW
            o.window = window
        else:
            o.order = _lib.FEED_ORDER_FULL
        o.rank = rank
        o.world = world_size
        o.eval = bool(eval)
        o.pipeline = self._pipeline_b
        o.on_error = _lib.FEED_ON_ERROR_SKIP if on_error == "skip" else _lib.FEED_ON_ERROR_FAIL
        o.max_bad = max_bad or 0
        self._group = group
        self._group_b = group.encode() if group is not None else None
        o.group = self._group_b
        o.reconnect_ms = int(reconnect_s * 1000) if reconnect_s > 0 else -1
        if o.reconnect_ms == 0:
            o.reconnect_ms = 1
        if self._slots_req is not None:
            o.device = self._slots_req

        self._lock = threading.Lock()
        self._fork_gen = _fork_gen
        self._box = [None]         # the current _Stream
        self._finalizer = weakref.finalize(self, _drop_stream, self._box)
        self._finalizer.atexit = False  # the process's exit frees everything
        self._epoch_next = 0       # the epoch the next iteration gives
        self._gen = 0              # bumped by each iteration: older iterators stop
        self._iter_epoch = None    # epoch of the iteration in progress
        self._cur_start = None     # the stream's next batch is this epoch's first
        self._resume = None        # (epoch, token) loaded and not yet iterated
        stream = self._open_waiting(wait_for_daemon)
        try:
            if self._conv is not None:
                self._conv.check_channels(stream.plan)
                if self._conv.mix is not None:
                    self._conv.mix.check_fields(stream.fields)
                stream = self._to_workers(stream)
            if self._pin:
                stream.pin()
        except BaseException:
            self._finalizer()
            raise
        self._len = stream.batches_per_epoch
        # where this member came in: a late joiner's first epoch is partial
        self.first_epoch, self.first_batch = stream.start_epoch, stream.start_batch
        if group is not None:
            self._epoch_next = self._cur_start = stream.start_epoch
        self._closed = False

    # ---- the stream ------------------------------------------------------

    def _to_workers(self, stream):
        """device="cpu": reopens the stream with the conversion (normalize,
        mix) appended to its pipeline, so feedd's workers publish float
        batches and next() converts nothing (convert_on="feedd"); the
        stream as it is when the Loader must convert (convert_on="loader",
        a group, batches the pipeline cannot convert: Conversion.worker_ops)."""
        ops = None
        if self._convert_on == "feedd" and self._group is None and self._mixture is None:
            ops = self._conv.worker_ops(stream.plan, stream.fields)
        if ops is None:
            return stream
        self._pipeline_b = (stream.pipeline + ops).encode()
        self._opts.pipeline = self._pipeline_b
        conv, self._conv = self._conv, None
        self._as_torch = True
        try:
            return self._open(0, None)
        except BaseException:
            self._conv = conv
            raise

    def _open_waiting(self, wait_s):
        """_open(0, None), retrying for up to wait_s seconds while feedd is
        not running (DaemonNotRunning), in steps of at most 0.1 s so Ctrl-C
        gets through; the last refusal is raised past wait_s."""
        end = time.monotonic() + wait_s
        while True:
            try:
                return self._open(0, None)
            except DaemonNotRunning as e:
                left = end - time.monotonic()
                if left <= 0:
                    if wait_s:
                        raise DaemonNotRunning(f"{e.detail} (waited wait_for_daemon={wait_s} s)",
                                               e.code, e.reason, e.socket) from None
                    raise
                time.sleep(min(0.1, left))

    def _open(self, start_epoch, token):
        """Opens a stream at start_epoch's first batch, or at token's position,
        on a new connection, and makes it current. Lock held (or __init__)."""
        conn = _connect(self._socket)
        o = self._opts
        o.start_epoch = start_epoch
        o.start_batch = 0
        if token is not None:
            buf = ctypes.create_string_buffer(token, len(token))
            o.resume = ctypes.cast(buf, ctypes.c_void_p)
            o.resume_len = len(token)
        else:
            o.resume = None
            o.resume_len = 0
        st = ctypes.c_void_p()
        r = lib.feed_stream_open(conn, ctypes.byref(o), ctypes.byref(st))
        o.resume = None
        o.resume_len = 0
        if r < 0:
            err = _error(conn, r)
            lib.feed_disconnect(conn)
            if isinstance(err, UnknownDataset):
                err = self._unknown(err)
            raise self._explain(err)
        stream = _Stream(conn, st, self._torch, self._spare, self._label_dtype)
        old, self._box[0] = self._box[0], stream
        if old is not None:
            old.unref()
        self._cur_start = stream.start_epoch if stream.start_batch == 0 else None
        return stream

    def _explain(self, err):
        """err in the words of the Python arguments the user set."""
        d = err.detail
        m = re.search(r"credits:? (\d+),? (?:allowed \d+\.\.|exceeds? the limit max_credits "
                      r")(\d+)", d)
        if isinstance(err, InvalidArgument) and m:
            most = int(m.group(2)) - self._spare
            return InvalidArgument(
                f"credits={self._credits} is out of range: this feedd allows 1..{most} "
                f"(its limits.max_credits is {m.group(2)}, and the Loader asks for "
                f"{self._spare} more than credits, for the batch being fetched while the loop "
                f"holds the previous one{' and transform= in flight' if self._spare > 1 else ''})"
                f"; pass credits <= {most}, or raise limits.max_credits in feedd's config "
                f"[{d}]", err.code, err.reason)
        if isinstance(err, LimitReached) and "max_streams" in d:
            return LimitReached(
                f"{d}; each Loader holds one stream until close() (or the end of its `with`, "
                f"or garbage collection): close the Loaders no longer used, or raise "
                f"limits.max_streams in feedd's config", err.code, err.reason)
        m = re.search(r"resume token: (\w+) is (\d+) in the token, (\d+) in the request", d)
        if isinstance(err, InvalidArgument) and m:
            what, then, now = m.group(1), int(m.group(2)), int(m.group(3))
            names = {"order": ("shuffle", {0: "shuffle=False (or eval=True)", 1: "shuffle=True",
                                           2: "shuffle=True with window="}),
                     "batch": ("batch_size", {}), "seed": ("seed", {}),
                     "drop_last": ("drop_last", {0: "drop_last=False", 1: "drop_last=True"}),
                     "pad_last": ("pad_last", {0: "pad_last=False", 1: "pad_last=True"}),
                     "eval": ("eval", {0: "eval=False", 1: "eval=True"}),
                     "window": ("window", {})}
            arg, vals = names.get(what, (what, {}))
            a = vals.get(then, f"{arg}={then}")
            b = vals.get(now, f"{arg}={now}")
            return ResumeRefused(
                f"load_state_dict: the state was taken with {a}, this Loader has {b}; open "
                f"the Loader with {a} to resume from it [{d}]", err.code, err.reason)
        return err

    def _unknown(self, err):
        """err with the names feedd serves added, when they can be had."""
        try:
            names = [d.name for d in datasets(self._socket)]
        except FeedError:
            return err
        served = ", ".join(repr(n) for n in names) or "none"
        return UnknownDataset(f"{err.detail}; feedd serves {served} to this user",
                              err.code, err.reason)

    def _enter(self):
        """Takes the lock for one call; raises if that cannot be done safely."""
        if not self._lock.acquire(blocking=False):
            raise ConcurrentUse("feedclient.Loader used from two threads at once: one thread "
                                "at a time may iterate it, close it or take its state")
        if self._closed or self._fork_gen != _fork_gen:
            self._lock.release()
            self._check_usable()

    def _check_usable(self):
        if self._fork_gen != _fork_gen:
            raise FeedError("feedclient.Loader used in a process forked from the one that "
                            "opened it (a DataLoader worker?); its stream belongs to the "
                            "parent. Iterate the Loader in the process that made it, with no "
                            "worker processes, or open a Loader in each process")
        if self._closed:
            raise LoaderClosed(f"feedclient.Loader for '{self._dataset}' is closed")

    # ---- public ----------------------------------------------------------

    def __len__(self) -> int:
        """This rank's batches per epoch (with a resumed stream: a whole epoch's)."""
        self._check_usable()
        return self._len

    def __iter__(self) -> "_EpochIter":
        """An iterator over the batches of one epoch (see the class's docstring).

        Starting it makes older iterators of this Loader stop with an error.
        Blocks only when it must reopen the stream (up to 10 s)."""
        _in_worker_check()
        self._enter()
        try:
            epoch = self._epoch_next
            stream = self._box[0]
            empty = False
            if self._resume is not None and self._resume[0] == epoch:
                # the loaded stream goes on; nothing is left of the epoch if the
                # token was taken after its last batch
                empty = stream.start_epoch > epoch
            elif self._cur_start != epoch and self._group is None:
                stream = self._open(epoch, None)   # a failure changes nothing
            # a group's next iteration goes on where the stream is
            self._epoch_next = epoch + 1 if self._group is None else epoch
            self._gen += 1
            self._resume = None
            if empty:
                self._iter_epoch = None
                return _EpochIter(self, self._gen, epoch, stream, done=True)
            self._cur_start = None
            self._iter_epoch = epoch
            return _EpochIter(self, self._gen, epoch, stream)
        finally:
            self._lock.release()

    def set_epoch(self, epoch: int) -> None:
        """Chooses the epoch the next iteration gives (as
        DistributedSampler.set_epoch does); it changes the order and the
        augmentation draws. Without it each iteration gives the epoch after
        the previous one's. Does not block."""
        _check_int("epoch", epoch, 0, 2**63 - 1)
        if self._group is not None:
            raise InvalidArgument(f"set_epoch: the Loader is in group {self._group!r}, whose "
                                  f"members follow the group's epochs")
        self._enter()
        try:
            self._epoch_next = epoch
            if self._resume is not None and self._resume[0] != epoch:
                self._resume = None
        finally:
            self._lock.release()

    def state_dict(self) -> Dict[str, Any]:
        """The position: the next batch not yet returned, and its epoch.

        A dict {"feedclient": 1, "dataset": str, "epoch": int, "token": bytes
        or None} (picklable, torch.save-able). Taken during an iteration, it
        is the position after the last batch that iteration returned;
        between iterations, the start of the epoch the next one gives. The
        token is the C library's resume token (feed_stream_resume_token):
        it also names the dataset version, pipeline, seed, batch size and
        order, which the daemon checks when it is loaded. Does not block;
        takes the same thread as the iteration."""
        self._enter()
        try:
            if self._resume is not None:
                epoch, token = self._resume
            elif self._iter_epoch is not None:
                # transform= ran ahead: the position is that of the first
                # batch not yet given to the loop
                pend = self._pending
                epoch = self._iter_epoch
                token = pend[0][3] if pend else self._token()
            else:
                epoch = self._epoch_next
                token = self._token() if self._cur_start == epoch else None
            return {"feedclient": 1, "dataset": self._dataset, "epoch": epoch, "token": token}
        finally:
            self._lock.release()

    def _token(self):
        buf = ctypes.create_string_buffer(_lib.FEED_RESUME_MAX)
        n = ctypes.c_size_t()
        r = lib.feed_stream_resume_token(self._box[0].st, buf, len(buf), ctypes.byref(n))
        if r < 0:
            raise FeedError(f"resume token: {_lib.strerror(r)}", r, _lib.strerror(r))
        return buf.raw[:n.value]

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Continues where state_dict() was taken: the next iteration gives
        the rest of that epoch (from the batch not yet returned then, none
        if it was the last), the ones after it whole epochs. Works in a new
        process and with another world_size or rank (the same global
        position). Opens the stream now, so a refusal raises here:
        ResumeRefused naming what differs, InvalidArgument for a dict that
        is not a Loader's state. Blocks up to 10 s while the daemon opens
        the stream."""
        if not isinstance(state, dict) or state.get("feedclient") != 1 or \
                not isinstance(state.get("epoch"), int) or \
                not isinstance(state.get("token"), (bytes, type(None))):
            raise InvalidArgument("load_state_dict: not a feedclient.Loader state_dict")
        # a mixture's state goes to a mixture of other weights or sources
        # too: the daemon carries each source's position over by version
        if state.get("dataset") != self._dataset and not (
                self._mixture is not None and str(state.get("dataset")).startswith("mixture(")):
            raise InvalidArgument(f"load_state_dict: the state is of dataset "
                                  f"{state.get('dataset')!r}, this Loader reads "
                                  f"{self._dataset!r}")
        epoch, token = state["epoch"], state["token"]
        if self._group is not None:
            raise InvalidArgument(f"load_state_dict: the Loader is in group {self._group!r}, "
                                  f"which starts its members where it is")
        self._enter()
        try:
            if token is not None:
                self._open(0, token)    # a refusal leaves the Loader as it was
            self._gen += 1
            self._iter_epoch = None
            self._epoch_next = epoch
            self._resume = (epoch, token) if token is not None else None
        finally:
            self._lock.release()

    def close(self) -> None:
        """Lets go of the stream: feedd frees it, now if no batch is alive,
        else when the last one goes (their memory stays valid until then).
        Later use raises LoaderClosed; closing again does nothing. Blocks
        up to 10 s while telling the daemon."""
        if not self._lock.acquire(blocking=False):
            raise ConcurrentUse("feedclient.Loader closed while another thread uses it")
        try:
            if self._closed:
                return
            self._closed = True
            self._gen += 1
            if self._pool is not None:
                for fut, *_ in self._pending or ():
                    if fut is not _END:
                        fut.cancel()
                self._pool.shutdown(wait=False)
                self._pool = None
            if self._fork_gen == _fork_gen:
                self._finalizer()
            else:
                self._finalizer.detach()
        finally:
            self._lock.release()

    def __enter__(self) -> "Loader":
        self._check_usable()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __getitem__(self, index):
        raise TypeError(_NOT_A_DATASET)

    def __reduce__(self):
        raise TypeError("feedclient.Loader cannot be pickled (its stream lives in this "
                        "process). " + _NOT_A_DATASET)

    def __repr__(self):
        state = "closed" if self._closed else f"next epoch {self._epoch_next}"
        return (f"<feedclient.Loader '{self._dataset}' batch {self._batch_size}, "
                f"rank {self._rank}/{self._world_size}, {state}>")

    # ---- read-only facts -------------------------------------------------

    @property
    def dataset(self) -> "DatasetName":
        """The dataset's name (a str, as given) with path(i): sample i's
        recorded path (DatasetName)."""
        return DatasetName(self._dataset, self._socket)

    @property
    def batch_size(self) -> int:
        """Samples per batch (the last of an epoch may hold fewer)."""
        return self._batch_size

    @property
    def rank(self) -> int:
        """This process's rank (rank=, else $RANK / $SLURM_PROCID, else 0)."""
        return self._rank

    @property
    def world_size(self) -> int:
        """Ranks sharing the dataset (world_size=, else $WORLD_SIZE /
        $SLURM_NTASKS, else 1)."""
        return self._world_size

    @property
    def fields(self) -> Tuple[FieldInfo, ...]:
        """Tuple of FieldInfo: what each batch's fields hold, after the
        pipeline and after this Loader's device=, dtype=, layout= and
        label_dtype= (shape without the sample axis): e.g. a u8 (28, 28)
        image under device="cpu" is f32 (1, 28, 28), a u8 label under
        as_torch i64. Fields feedd delivers as they are keep their stored
        dtype; transform='s output is not described."""
        s = self._current()
        out = []
        for f, p in zip(s.fields, s.plan):
            dtype, shape = f.dtype, f.shape
            if self._conv is not None:
                dtype, shape = self._conv.describe(p, dtype, shape)
            elif s.device_slots:
                dtype, shape = _slots_describe(self._slots_req, p, dtype, shape)
            if p.label is not None and dtype[0] in "iu":  # not soft labels (f32)
                dtype = _SHORT.get(np.dtype(p.label).str.lstrip("<|"), dtype)
            if (dtype, shape) != (f.dtype, f.shape):
                size = _SIZES.get(dtype, 1)
                for d in shape:
                    size *= d
                f = FieldInfo(f.name, dtype, shape, f.variable, size)
            out.append(f)
        return tuple(out)

    @property
    def credits(self) -> int:
        """Batches the loop may hold while it fetches the next (credits=)."""
        return self._credits

    @property
    def detached(self) -> int:
        """Batches moved off their slots so far: held (a view of one kept)
        when the loop needed their slot, their bytes now private memory at
        the same addresses (feed_batch_detach)."""
        return self._detached

    @property
    def pinned(self) -> bool:
        """pin_memory=True: the data region is registered with the CUDA driver."""
        return self._current().pinned

    @property
    def dataset_version(self) -> str:
        """The dataset's content hash (same version, same records)."""
        return self._current().dataset_version

    @property
    def pipeline(self) -> str:
        """The pipeline in canonical text, as the daemon runs it."""
        return self._current().pipeline

    @property
    def device_slots(self) -> bool:
        """Loader(device_slots=N): whether feedd serves device slots (False:
        host batches, device_reason says why); False without device_slots."""
        return self._current().device_slots

    @property
    def device_reason(self) -> str:
        """Why the stream has no device slots ("" when it has them or none
        were asked for), e.g. "feedd: the client is in another PID
        namespace ..." or "this process: libcuda.so.1 not found ..."."""
        return self._current().device_reason

    @property
    def note(self) -> str:
        """Advice from the daemon about this stream (e.g. on full shuffle
        over a dataset larger than its cache); may be ""."""
        return self._current().note

    def _current(self):
        self._check_usable()
        return self._box[0]


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


class _EpochIter:
    """The batches of one epoch of a Loader."""

    __slots__ = ("_loader", "_gen", "_epoch", "_stream", "_done", "_pending", "_failed")

    def __init__(self, loader, gen, epoch, stream, done=False):
        self._failed = []   # on_error="skip": dataset indices of the samples that failed
        self._loader = loader
        self._gen = gen
        self._epoch = epoch
        self._stream = stream
        self._done = done
        # transform=: (future or _END, epoch, index, token before it), in order
        self._pending = collections.deque() if loader._transform is not None else None
        loader._pending = self._pending

    def __iter__(self) -> "_EpochIter":
        return self

    def __len__(self) -> int:
        return self._loader._len

    def __next__(self) -> Batch:
        """The next batch: blocks until feedd has it ready (or reconnects
        after a daemon restart, up to reconnect_s; or timeout= passes).
        Raises StopIteration at the epoch's end, CreditsExhausted,
        DaemonGone, StreamStopped, Timeout, TransformError."""
        t0 = time.perf_counter_ns()
        loader = self._loader
        loader._enter()
        try:
            if self._gen != loader._gen:
                raise FeedError("this iterator of feedclient.Loader was superseded by a later "
                                "iter(loader), load_state_dict() or close()")
            if self._done:
                raise StopIteration
            if self._pending is not None:
                return self._next_transformed()
            batch = self._take(True)
            if batch is None:
                self._end()
                raise StopIteration
            return batch
        finally:
            _note_next(loader, time.perf_counter_ns() - t0)
            loader._lock.release()

    def _end(self):
        """The epoch's end reached the loop: the Loader's position moves on."""
        loader = self._loader
        self._done = True
        if self._failed:
            _warn_skipped(loader, self._epoch, self._failed, bool(loader._opts.eval))
            self._failed = []
        loader._iter_epoch = None
        loader._cur_start = self._epoch + 1
        if loader._group is not None:
            loader._epoch_next = self._epoch + 1

    def _take(self, block):
        """The stream's next batch; None at the epoch's end; _NOTHING when
        not block and none is ready (or no credit is free). Lock held."""
        loader = self._loader
        s = self._stream
        retried = False
        wait = _NEXT_SLICE_MS if block else 0
        end = time.monotonic() + loader._timeout if block and loader._timeout else None
        while True:
            r = lib.feed_next(s.st, wait, s.bp_ref)
            if r == 0:
                slot = _Slot(s, s.bp.value)   # at once: whatever happens next releases
                break
            if r == -errno.ETIMEDOUT:
                if not block:
                    return _NOTHING
                if end is not None:
                    left = end - time.monotonic()
                    if left <= 0:
                        raise self._timeout_error()
                    wait = max(1, min(_NEXT_SLICE_MS, int(left * 1000 + 0.999)))
                continue
            if r == _lib.FEED_END_OF_EPOCH:
                return None
            if r == -errno.ENOBUFS and not block:
                return _NOTHING
            if r == -errno.ENOBUFS and s.detach_oldest():
                loader._detached += 1
                continue  # a held batch moved off its slot: the slot is feedd's again
            if r == -errno.ENOBUFS and not retried:
                retried = True
                gc.collect()  # dead batches in reference cycles hold credits too
                continue
            raise self._error(r)
        batch = _make_batch(s, slot, loader._as_torch and loader._conv is None)
        if batch.replaced:
            self._failed += _failed(slot.b, batch.replaced)
        if batch.dropped:
            self._failed += batch.dropped
        if s.device_slots:
            _device_fields(s, slot, batch, loader._slots_req.device)
        if loader._conv is not None:  # tensors of their own: the slot goes now
            batch = loader._conv.convert(s, slot.b, batch)
            del slot
        if batch.epoch != self._epoch:
            raise StreamStopped(f"feedd delivered a batch of epoch {batch.epoch} in epoch "
                                f"{self._epoch}", -errno.EPROTO, _lib.strerror(-errno.EPROTO))
        return batch

    def _next_transformed(self):
        """transform=: the next batch fn made, fn running ahead on the pool."""
        loader = self._loader
        q = self._pending
        if not q:
            self._fill(True)
        self._fill(False)
        fut, epoch, index, _ = q.popleft()
        if fut is _END:
            self._end()
            raise StopIteration
        try:
            return fut.result()
        except Exception as e:
            raise TransformError(f"transform={getattr(loader._transform, '__name__', 'fn')} "
                                 f"raised {type(e).__name__}: {e}, on batch {index} of epoch "
                                 f"{epoch} of dataset '{loader._dataset}'", epoch=epoch,
                                 index=index) from e

    def _fill(self, block):
        """Tops the queue up to transform_threads batches: the first waits
        when block, the rest only if ready."""
        loader = self._loader
        q = self._pending
        if loader._pool is None:
            loader._pool = concurrent.futures.ThreadPoolExecutor(
                loader._transform_threads, thread_name_prefix="feedclient-transform")
        while len(q) < loader._transform_threads and not (q and q[-1][0] is _END):
            token = loader._token()
            b = self._take(block and not q)
            if b is _NOTHING:
                return
            if b is None:
                q.append((_END, self._epoch, None, token))
                return
            q.append((loader._pool.submit(loader._transform, b), b.epoch, b.index, token))
            del b   # the worker's reference is the only one: fn's output decides

    def _timeout_error(self):
        loader = self._loader
        s = self._stream
        try:
            st = _status(loader._socket, 1000)
            pid = os.getpid()
            mine = [d for d in st["streams"] if d["dataset"] == loader._dataset and
                    (d["pid"] == pid or pid in d["member_pids"])]
            if mine:
                d = mine[0]
                kind = "this stream" if d["kind"] == "stream" else \
                    f"its group '{d['group']}' ({d['members']} members)"
                shown = (f"feedctl status shows {kind}: {d['credits_in_use']} of "
                         f"{d['credits']} credits in use, {d['batches']} batches built, "
                         f"{d['samples_per_s']:.0f} samples/s, reader_wait_share "
                         f"{d['reader_wait_share']:.2f}; feedd has {st['workers']} workers")
            else:
                shown = (f"feedctl status lists no stream of this process over "
                         f"'{loader._dataset}' (feedd restarted or dropped it)")
        except FeedError as e:
            shown = (f"feedctl status got no answer within 1 s ({e.detail}): feedd is hung "
                     f"or stopped (SIGSTOP, a debugger, swapping)")
        return Timeout(f"no batch of dataset '{loader._dataset}' within timeout="
                       f"{loader._timeout} s ({s.held} batches held by this process); {shown}",
                       -errno.ETIMEDOUT, _lib.strerror(-errno.ETIMEDOUT))

    def _error(self, r):
        s = self._stream
        loader = self._loader
        if r == -errno.ENOBUFS:
            held = s.held
            alive = "1 batch of this stream is" if held == 1 else \
                f"{held} batches of this stream are"
            err = CreditsExhausted(
                         f"credits={s.credits}: {alive} still alive while the next is fetched "
                         f"(a batch, or an array or tensor viewing one, holds its slot; a "
                         f"plain `for batch in loader` holds 1). Likely cause: batches or "
                         f"tensors kept past the loop body, in a list or in an autograd graph "
                         f"(outputs of a model kept without torch.no_grad() keep their inputs "
                         f"alive). Fix: drop them (batch.copy() gives arrays of their own to "
                         f"keep; wrap evaluation in torch.no_grad()), or open the Loader with "
                         f"credits={held} or more", r, _lib.strerror(r), held)
            return err
        if r == -errno.ECONNRESET:
            if loader._reconnect_s == 0:
                return _error(s.conn, r, "reconnect_s=0 turned it off; pass reconnect_s=S to "
                                         "ride through a restart of up to S seconds")
            return _error(s.conn, r, f"that is reconnect_s={loader._reconnect_s} of this "
                                     f"Loader; raise it to ride through longer restarts")
        if r == _lib.FEED_END_OF_STREAM:
            return StreamStopped("feedd ended an endless stream", -errno.EPROTO,
                                 _lib.strerror(-errno.EPROTO))
        err = _error(s.conn, r)
        if r == -errno.ENOMEM:   # the stream is as it was: the next call tries again
            return err
        if type(err) in (FeedError, InvalidArgument, UnknownDataset):
            err = StreamStopped(err.detail, err.code, err.reason)
        return err


def _note_next(loader, ns):
    """The loop's time in next() becomes the stream's reader wait
    (feed_stream_note_next): `feedctl top`'s WAIT% is then the loop's own
    measure, time in next() over wall time. Lock held."""
    s = loader._box[0]
    if s is not None and s.st is not None and s.fork_gen == _fork_gen:
        lib.feed_stream_note_next(s.st, ns)


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


_SKIP_NAMED = 10  # files a skip warning names; the count covers the rest


def _dropped(lib_, b):
    """The dataset indices of the samples left out of batch b (eval skip,
    feed_batch_dropped); None for one feedd did not name."""
    n = lib_.feed_batch_dropped(b)
    if not n:
        return ()
    idx = ctypes.c_uint64()
    return tuple(idx.value if lib_.feed_batch_dropped_sample(b, k, ctypes.byref(idx)) == 0
                 else None for k in range(n))


def _warn_skipped(loader, epoch, failed, dropped=False):
    """on_error="skip": one warning per epoch, with the count and the files."""
    import warnings
    names = []
    for i in failed[:_SKIP_NAMED]:
        if i is None:
            names.append("a sample feedd did not name")
            continue
        try:
            names.append(f"{loader.dataset.path(i)} (sample {i})")
        except (FeedError, IndexError):
            names.append(f"sample {i}")
    more = f" and {len(failed) - _SKIP_NAMED} more" if len(failed) > _SKIP_NAMED else ""
    warnings.warn(f"feedclient: on_error='skip': {len(failed)} sample"
                  f"{'s' if len(failed) != 1 else ''} of epoch {epoch} of dataset "
                  f"'{loader.dataset}' failed and were "
                  f"{'dropped (eval)' if dropped else 'replaced by the next good ones'}: "
                  f"{', '.join(names)}{more} (feedd's log has the decoder's words)",
                  SkippedSamplesWarning, stacklevel=4)


_NOTHING = object()   # _take: no batch ready without waiting
_END = object()       # transform= queue: the epoch's end


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
    view = s.view
    views = []
    lo = hi = None
    for p in s.plan:
        lib_.feed_batch_field(b, p.i, s.view_ref)
        data, nbytes = view.data or 0, view.bytes
        ends = ctypes.string_at(view.ends, 8 * (n + 1)) if p.variable else None
        views.append((p, data, nbytes, ends))
        if nbytes:
            lo = data if lo is None or data < lo else lo
            end = data + nbytes
            hi = end if hi is None or end > hi else hi
    if lo is None:  # no bytes at all (eval skip dropped every sample): no view
        lo = 0
        span = np.empty(0, np.uint8)
    else:
        slot.__array_interface__ = {"data": (lo, False), "shape": (hi - lo,),
                                    "typestr": "|u1", "version": 3}
        span = np.asarray(slot)
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
            a = np.ndarray(((e[n] - e[0]) // 4,), p.dtype, span, off + e[0])
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
