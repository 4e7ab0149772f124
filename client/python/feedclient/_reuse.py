"""feedclient._reuse: next() with a batch ready at the cost of one C call
(feed_next_desc) and no torch call, for streams whose fields all become
torch tensors viewing the slot (as_torch, device="cpu" with feedd's
workers converting).

A slot's fields lie at the same addresses from one delivery to the next
(until it is detached or feedd restarts), so the tensors built over a slot
at its first delivery (_Entry) are handed out again at the next, in a fresh
Batch dict; building them costs tens of microseconds when the caches are
cold after a training step, which was most of next(). A tensor is handed
out again only once nothing but the cache holds it or its memory: its
Python reference count, and the reference counts torch keeps of its
TensorImpl (views, autograd's saved tensors) and of its storage (views,
.numpy(), .data), are what they were when the entry was built. The last
two are read from torch's objects (c10::intrusive_ptr_target's count, one
word after the vtable pointer: the whole word up to torch 2.x, its low 32
bits since torch packed the weak count and flags above them; _STRONG
masks), which a probe checks against views of a scratch tensor and an
autograd graph that saves it first (_counts_readable); where it fails
(another torch's layout) no stream reuses anything.

The cache holds only the entries of released slots: a delivery takes
its slot's entry out, and the Batch holds it. When the slot goes back:
when the Batch dict is dropped and nothing else holds its tensors
(Batch.__del__ -> the entry's drop: dropped, or feedclient._fastiter's
C twin of it, which counts the same way), and the entry goes back into the cache
unless an in-place call changed a tensor's shape or strides; else
the entry goes with the Batch, and the slot with the last tensor or view
of it, as for batches that reuse nothing (the _Slot's __del__); or when
the credits run out and it is detached (_Stream.detach_oldest): its
tensors then view the private copy, and the entry is not cached again.

Threads: a Batch may be dropped on any thread; the release decision and
the held flag are taken under the stream's reuse_lock (an RLock: a
finalizer may run inside next() on the loop's own thread). Must never:
hand out an entry's tensors while anything else holds them or their memory,
or keep a slot from feedd once nothing does."""

import ctypes
import struct
import sys

import numpy as np

from ._native import fastiter as _fastiter

# feedclient._fastiter's snapshot() and dropped() for the entries settled
# from now on, or None (not built; tests turn it off for this module's)
C = _fastiter
_probe = {}    # id(torch module) -> bool: _counts_readable's verdict
_STRONG = 0xFFFFFFFF   # the strong count's bits of the word (_counters)


def _addrs(t):
    """The addresses of the words over the strong reference counts of t's
    TensorImpl and StorageImpl (valid while t lives)."""
    return t._cdata + 8, _storage_addr(t) + 8


def _storage_addr(t):
    """The address of t's c10::StorageImpl."""
    us = getattr(t, "untyped_storage", None)
    s = us() if us is not None else t.storage()
    s = getattr(s, "_storage", s)   # torch 1.13: TypedStorage over an UntypedStorage
    return s._cdata


def _counters(t):
    """ctypes words over the strong reference counts of t's TensorImpl and
    StorageImpl (valid while t lives)."""
    return tuple(ctypes.c_size_t.from_address(a) for a in _addrs(t))


def _counts_readable(torch):
    """Whether this torch's reference counts read as _counters reads them:
    for a lone tensor 1 (its TensorImpl) and 1 or 2 (its StorageImpl), one
    more of each with a view of it, back again, one more TensorImpl count
    while an autograd graph saves it, back once the graph goes."""
    ok = _probe.get(id(torch))
    if ok is None:
        try:
            t = torch.from_numpy(np.zeros(4, np.float32))
            impl, stor = _counters(t)

            def counts():
                return (impl.value & _STRONG, stor.value & _STRONG)
            seen = [counts()]
            v = t[:1]
            seen.append(counts())
            del v
            seen.append(counts())
            w = torch.ones(4, requires_grad=True)
            y = t * w             # saves t for w's gradient: t's TensorImpl
            seen.append(counts())
            del y
            seen.append(counts())
            # torch 2.x's storage holds one more (its preserved PyObject's)
            b0, b1 = seen[0]
            ok = b0 == 1 and b1 in (1, 2) and [(a - b0, b - b1) for a, b in seen] == [
                (0, 0), (1, 1), (0, 0), (1, 0), (0, 0)]
        except (AttributeError, TypeError, ValueError, RuntimeError):
            ok = False
        _probe[id(torch)] = ok
    return ok


def eligible(plan, torch):
    """Whether a stream with this field plan can reuse its tensors: every
    field fixed-size and a tensor viewing the slot as it is (no copy into
    another dtype, no lists, no strings), and a torch whose counts read."""
    if torch is None or not plan:
        return False
    for p in plan:
        if p.variable or p.string or not p.torch_ok or p.label is not None or p.flat:
            return False
    return _counts_readable(torch)


class _Entry:
    """The tensors over one slot at one set of addresses, with the counts
    that say nothing else holds them. Never referenced by its slot or its
    tensors (those reach the slot, through numpy, by C references a
    garbage collector cannot follow), so dropping it frees them."""

    __slots__ = ("slot", "k", "spans", "sig", "items", "ts", "addrs", "meta", "free0",
                 "free1", "drop")

    def __init__(self, slot, k, spans, items):
        self.slot = slot
        self.k = k             # the slot's number (struct feed_batch_desc)
        self.spans = spans
        # the spans and the C batch as native u64s: what feedclient._fastiter
        # compares with a delivery's
        self.sig = struct.pack(f"={len(spans) + 1}Q", *spans, slot.b)
        self.items = items
        self.ts = tuple((t,) + _counters(t) for t in items.values())
        self.addrs = tuple(a for t in items.values() for a in _addrs(t))   # C's snapshot
        self.meta = _meta(items)
        self.free0 = None
        self.free1 = None
        self.drop = None       # settle(): dropped, or C's twin of it


def _meta(items):
    """What in-place calls may change of the tensors themselves (shape,
    strides, offset, requires_grad: x.unsqueeze_(0), x.requires_grad_()),
    which the next batch must not inherit."""
    return [(t.shape, t.stride(), t.storage_offset(), t.requires_grad) for t in items.values()]


def _snapshot(e):
    """The counts of e: its slot's and each tensor's Python references, and
    each tensor's TensorImpl and StorageImpl references."""
    out = [sys.getrefcount(e.slot)]
    for t, impl, stor in e.ts:
        out += (sys.getrefcount(t), impl.value & _STRONG, stor.value & _STRONG)
    return out


def build(s, slot, k, n, spans, to_torch):
    """The entry of a slot just delivered (slot: its fresh _Slot; every
    field has bytes): one numpy array over its fields' bytes whose base is
    slot, each field's tensor over it (to_torch(p, array))."""
    lo = hi = None
    for f in range(0, len(spans), 2):
        data, nbytes = spans[f], spans[f + 1]
        lo = data if lo is None or data < lo else lo
        hi = data + nbytes if hi is None or data + nbytes > hi else hi
    slot.__array_interface__ = {"data": (lo, False), "shape": (hi - lo,),
                                "typestr": "|u1", "version": 3}
    span = np.asarray(slot)
    items = {}
    for p in s.plan:
        arr = np.ndarray((n,) + p.trail, p.dtype, span, spans[2 * p.i] - lo)
        items[p.name] = to_torch(p, arr)
    return _Entry(slot, k, spans, items)


def _whole(e, batch):
    """Whether batch (the dying Batch of e) still holds each of e's tensors
    under its own key, and nothing else."""
    return len(batch) == len(e.items) and all(batch.get(k) is t for k, t in e.items.items())


def settle(e):
    """Records e's counts as they are with nothing but the cache holding it
    (called with no Batch of it made yet, and no local reference left),
    and which dropped() compares them: C's when feedclient._fastiter
    loaded (its snapshot() counts its own way), else this module's."""
    c = C
    e.free0 = c.snapshot(e) if c is not None else _snapshot(e)
    e.drop = c.dropped if c is not None else dropped
    one = list(e.free0)
    one[0] += 1                    # the dying Batch's _slot
    for k in range(1, len(one), 3):
        one[k] += 1                # and its dict's reference to each tensor
    e.free1 = one


def dropped(e, batch):
    """A Batch of e is being freed (its __del__, any thread): when nothing
    else holds e's tensors, the slot goes back and e into the cache, for
    the slot's next delivery. Else e goes with this Batch, and the slot
    with the last tensor or view of it (the _Slot's own __del__)."""
    s = e.slot.stream   # no local reference to the slot: _snapshot counts them
    if s is None or not e.slot.held:
        return
    with s.reuse_lock:
        # the counts say how many hold each tensor, not who: a tensor moved out
        # of the dict (batch.pop("label")) keeps the dict's count
        if e.slot.held and _whole(e, batch) and _snapshot(e) == e.free1:
            e.slot.held = False
            if s.st is not None and _meta(e.items) == e.meta:
                s.cache[e.k] = e
            s.release(e.slot.b)
