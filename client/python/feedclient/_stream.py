"""feedclient._stream: one C connection and one stream on it (_Stream),
and the owner of each delivered batch (_Slot).

A stream lives while its Loader uses it or any batch of it is alive, and
is closed by whoever drops the last of them: the Loader's thread, or
whichever thread the garbage collector runs a batch's finalizer on.
feed_stream_close() unmaps the regions and releases every batch, so it
must never run while an array still views a slot: that is why a stream
outlives its Loader when batches outlive it.

Threads: batches may be dropped on any thread: feed_release() may run
concurrently with feed_next(); _Stream.lock guards only its counts.

Must never: touch C objects in a process forked from the one that opened
them (a forked child shares the parent's release ring): _fork_gen counts
forks, and each stream remembers the one it was opened in."""

import collections
import ctypes
import errno
import os
import threading
import weakref

from . import _lib
from . import _reuse
from ._lib import lib
from ._native import fastiter as _fastiter
from .errors import class_for
from ._conn import _fields
from ._batch import _FieldPlan, _cuda_device, batch_samples as _batch_samples


# Bumped in every forked child: C objects opened before the fork belong to
# the parent (their shared memory and socket are shared with it).
_fork_gen = 0


def _after_fork_in_child():
    global _fork_gen
    _fork_gen += 1


os.register_at_fork(after_in_child=_after_fork_in_child)

# feedclient._fastiter's release of a batch (_reuse's dropped in C) calls
# feed_release itself and reads _fork_gen here
if _fastiter is not None:
    _fastiter._setup(ctypes.cast(lib.feed_release, ctypes.c_void_p).value, globals())


class _Slot:
    """Owner of one delivered batch: numpy arrays of the batch have it as
    their base (through __array_interface__), and the Batch holds it. Its
    __del__ runs when the last of them goes, on whatever thread drops it,
    and releases the slot, or, once the batch was detached from its slot
    (_Stream.detach_oldest: its bytes moved to private memory at the same
    addresses), frees that copy. A slot whose tensors feedclient._reuse
    hands out again lives on in its cache between deliveries: held says
    whether the C batch is held now (released by _reuse.dropped when the
    Batch goes and nothing else holds the tensors, so __del__ releases
    only what is still held)."""

    __slots__ = ("__array_interface__", "stream", "b", "d", "held", "ref", "samples",
                 "__weakref__")

    def __init__(self, stream, b):
        self.d = None
        self.samples = None   # the dataset indices, kept when detached (b describes
        #                       the slot's next delivery then)
        self.held = True   # False once released (feedclient._reuse) or detached
        self.ref = weakref.ref(self)   # what _Stream.slots holds, at each delivery
        stream.delivered(self)
        self.stream = stream
        self.b = b

    def __del__(self):
        stream = self.stream
        if stream is not None:
            self.stream = None
            if self.d is not None:
                stream.free_detached(self.d)
            elif self.held:
                stream.release(self.b)


class _Stream:
    """One C connection and one stream on it, with the count of what keeps
    them: the Loader (until it moves to another stream or closes) and each
    batch delivered and not yet released. The last to go closes both, on
    its own thread. Never in a reference cycle (it points to no Python
    object that points back), so it is freed as soon as its count says."""

    # fixed attributes: next()'s reads (st, note_ns, refs, held, cache...) go
    # to a slot of the object, not through a dict (feedclient._fastiter's too)
    __slots__ = ("conn", "st", "fork_gen", "lock", "refs", "held", "slots", "detached",
                 "batches_per_epoch", "start_epoch", "start_batch", "spare", "credits",
                 "slots_max", "batch", "pipeline", "dataset_version", "note", "fields", "plan",
                 "view", "view_ref", "bp", "bp_ref", "desc", "spans", "nspans", "desc_mv",
                 "note_ns", "note_c", "nspans_c", "reuse", "cache", "reuse_lock",
                 "device_slots", "device_reason", "pinned")

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
        self.slots_max = 4 * info.credits + 16   # self.slots' length before tidy()
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
        # feed_next_desc's output: struct feed_batch_desc and each field's
        # span, read back in one go through memoryviews
        # (one buffer: the desc's 7 words, then 2 per field)
        self.desc = (ctypes.c_uint64 * (7 + 2 * len(self.plan)))()
        self.spans = (ctypes.c_uint64 * (2 * len(self.plan))).from_buffer(self.desc, 7 * 8)
        self.nspans = len(self.plan)
        self.desc_mv = memoryview(self.desc).cast("B").cast("Q")
        self.note_ns = 0               # the loop's last next(), told at the next call
        self.note_c = ctypes.c_uint64()              # _lib.next_desc_raw's typed arguments
        self.nspans_c = ctypes.c_uint32(self.nspans)
        # feedclient._reuse: whether this stream reuses its tensors; slot
        # number -> _Entry of a released slot; the lock of the held flags
        self.reuse = _reuse.eligible(self.plan, torch)
        self.cache = {}
        self.reuse_lock = threading.RLock()
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
            q.append(slot.ref)
            while q and not getattr(q[0](), "held", False):
                q.popleft()   # gone, released (a reused slot lives on) or detached
            if len(q) > self.slots_max:  # a batch kept at the front
                self.tidy()

    def tidy(self):
        """Keeps in self.slots only the slots still held."""
        q = self.slots
        alive = [r for r in q if getattr(r(), "held", False)]
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
            if slot is None or slot.d is not None or slot.stream is None or not slot.held:
                continue
            d = ctypes.c_void_p()
            with self.reuse_lock:
                if not slot.held:
                    continue   # released meanwhile (a Batch dropped on another thread)
                samples = _batch_samples(slot.b)   # b is the slot's: reused at its next delivery
                if lib.feed_batch_detach(slot.b, ctypes.byref(d)) < 0:
                    q.appendleft(slot.ref)
                    return False
                slot.d = d.value
                slot.samples = samples
                slot.held = False
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
        """Drops the Loader's reference; closes the stream if it was the last.
        The Loader's thread: the loop's last next() is told first."""
        note, self.note_ns = self.note_ns, 0
        if note and self.st is not None and self.fork_gen == _fork_gen:
            lib.feed_stream_note_next(self.st, note)
        with self.lock:
            self.refs -= 1
            last = self.refs == 0
        if last:
            self._close()

    def _close(self):
        if self.fork_gen != _fork_gen:
            return
        # st None first: feedclient._fastiter's next() calls only while st
        # is the object it was armed with; the cache emptied in place, as
        # an armed iterator holds this dict (not a new one)
        st, conn, self.st, self.conn = self.st, self.conn, None, None
        self.cache.clear()   # tensors over memory about to be unmapped
        lib.feed_stream_close(st)   # nothing is held: every batch went first
        lib.feed_disconnect(conn)


def _drop_stream(box):
    """The Loader's finalizer (close() or garbage collection): lets its stream go."""
    stream, box[0] = box[0], None
    if stream is not None:
        stream.unref()
