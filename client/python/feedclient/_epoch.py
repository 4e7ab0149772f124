"""feedclient._epoch: iterating one epoch of a Loader (_EpochIter):
feed_next() in slices so Ctrl-C gets through, the timeout and its
diagnosis, on_error="skip"'s warning, and transform= running ahead on the
Loader's pool (its threads never call into the stream, only drop
batches). Runs on the Loader's thread with its lock held. With a batch
ready on a stream that reuses its tensors, next() runs in C
(feedclient._fastiter, whose Iter type _EpochIter derives from: it does
_next's reuse path and calls _next, _delivered and _check for the rest);
the attributes below are then that type's members, set once here."""

import collections
import concurrent.futures
import ctypes
import errno
import gc
import os
import sys
import time

from . import _lib
from ._lib import lib
from .errors import (CreditsExhausted, FeedError, InvalidArgument, SkippedSamplesWarning,
                     StreamStopped, Timeout, TransformError, UnknownDataset)
from ._conn import _error, _status
from ._batch import (Batch, _device_fields, _dropped, _failed, _make_batch, _replaced,
                     _to_torch)
from ._stream import _Slot
from . import _reuse
from ._native import fastiter as _native

# The attributes of an _EpochIter: feedclient._fastiter.Iter's members
# when it loaded (its next() reads them), else slots of a Python base.
_ATTRS = ("_loader", "_gen", "_epoch", "_stream", "_done", "_pending", "_failed", "_fast")
if _native is not None:
    _Base = _native.Iter
else:
    class _Base:
        __slots__ = ()
# feedclient._fastiter's next() for the iterators made from now on (tests
# turn it off to run the Python path over the same streams)
NATIVE = True
_NEXT_DESC = ctypes.cast(lib.feed_next_desc, ctypes.c_void_p).value


_clock = time.perf_counter_ns   # CLOCK_MONOTONIC, as feedclient._fastiter's
_NEXT_SLICE_MS = 250   # feed_next() waits this long at most, so Ctrl-C gets through


class _EpochIter(_Base):
    """The batches of one epoch of a Loader."""

    __slots__ = () if _native is not None else _ATTRS

    def __init__(self, loader, gen, epoch, stream, done=False):
        self._failed = []   # on_error="skip": dataset indices of the samples that failed
        self._loader = loader
        self._gen = gen
        self._epoch = epoch
        self._stream = stream
        self._done = done
        # batches of tensors reused from slot to slot (feedclient._reuse)
        self._fast = bool(stream.reuse and loader._as_torch and loader._conv is None and
                          not stream.device_slots)
        # transform=: (future or _END, epoch, index, token before it), in order
        self._pending = collections.deque() if loader._transform is not None else None
        loader._pending = self._pending
        if self._fast and _native is not None and NATIVE:
            # feedclient._fastiter's next(): the reuse path below, in C
            self._arm(_NEXT_DESC, stream.st, stream.st.value, ctypes.addressof(stream.bp),
                      ctypes.addressof(stream.desc), stream.nspans, loader._lock, Batch,
                      sys.modules["torch"])

    def __iter__(self) -> "_EpochIter":
        return self

    def __len__(self) -> int:
        return self._loader._len

    def _next(self) -> Batch:
        """The next batch: blocks until feedd has it ready (or reconnects
        after a daemon restart, up to reconnect_s; or timeout= passes).
        Raises StopIteration at the epoch's end, CreditsExhausted,
        DaemonGone, StreamStopped, Timeout, TransformError. next() itself
        when feedclient._fastiter is absent; else its C path, which does
        the reuse path below and calls this for everything else."""
        t0 = _clock()
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
            s = self._stream
            if self._fast:
                # a batch ready: one C call, no waiting, no call frame more
                # than needed (each costs with cold caches); anything else
                # goes through _take
                s.note_c.value, s.note_ns = s.note_ns, 0   # the previous next() (below)
                r = _lib.next_desc_raw(s.st, 0, s.note_c, s.bp_ref, s.desc, s.spans, s.nspans_c)
                return self._delivered(r)
            batch = self._take(True)
            if batch is None:
                self._end()
                raise StopIteration
            return batch
        finally:
            # the loop's time in next() becomes the stream's reader wait, so
            # `feedctl top`'s WAIT% is the loop's own measure (time in next()
            # over wall time): told with the stream's next feed_next_desc (or
            # when the Loader lets it go), so that no call runs here
            s = loader._box[0]
            if s is not None:
                s.note_ns += _clock() - t0
            loader._lock.release()

    def _delivered(self, r):
        """The reuse path after feed_next_desc(timeout 0) returned r (the
        stream's desc and bp filled when 0). Lock held."""
        s = self._stream
        if r == 0:
            batch = _reused_batch(s)
            if batch is None:
                return self._made(s, _Slot(s, s.bp.value))
            if batch.replaced or batch.dropped or batch.epoch != self._epoch:
                return self._check(batch, batch._slot)
            return batch
        batch = None if r == _lib.FEED_END_OF_EPOCH else self._take(True)
        if batch is None:
            self._end()
            raise StopIteration
        return batch

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
        s = self._stream
        loader = self._loader
        retried = False
        wait = _NEXT_SLICE_MS if block else 0
        end = time.monotonic() + loader._timeout if block and loader._timeout else None
        while True:
            note, s.note_ns = s.note_ns, 0
            r = lib.feed_next_desc(s.st, wait, note, s.bp_ref, s.desc, s.spans, s.nspans)
            if r == 0:
                if self._fast:
                    batch = _reused_batch(s)
                    if batch is not None:
                        return self._check(batch, batch._slot)
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
        return self._made(s, slot)

    def _made(self, s, slot):
        """The Batch of slot, just delivered, made the usual way."""
        loader = self._loader
        batch = _make_batch(s, slot, loader._as_torch and loader._conv is None)
        if s.device_slots:
            _device_fields(s, slot, batch, loader._slots_req.device)
        if loader._conv is not None:  # tensors of their own: the slot goes now
            failed = _failed(slot.b, batch.replaced) if batch.replaced else []
            batch = loader._conv.convert(s, slot.b, batch)
            del slot
            return self._check(batch, None, failed)
        return self._check(batch, slot)

    def _check(self, batch, slot, failed=None):
        """batch, once its failed samples are noted (on_error="skip") and
        its epoch is the iteration's."""
        if batch.replaced:
            self._failed += failed if failed is not None else _failed(slot.b, batch.replaced)
        if batch.dropped:
            self._failed += batch.dropped
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


def _reused_batch(s):
    """The batch feed_next_desc just delivered, as a Batch of the tensors
    reused over its slot (feedclient._reuse), built at the slot's first
    delivery or when its addresses changed; None when a field has no bytes
    (nothing to view): the caller makes that batch the usual way."""
    v = s.desc_mv.tolist()   # struct feed_batch_desc, then each field's span
    spans = v[7:]
    e = s.cache.pop(v[3], None)   # out of the cache while delivered
    # the same C batch too: a slot cached before a restart may find its old
    # addresses mapped again by a later incarnation
    if e is not None and e.spans == spans and e.slot.b == s.bp.value:
        slot = e.slot
        slot.held = True     # the same struct feed_batch: slot.b stays
        with s.lock:         # _Stream.delivered, less its tidying of the queue
            s.refs += 1
            s.held += 1
        q = s.slots
        q.append(slot.ref)
        if len(q) > s.slots_max:
            s.tidy()
    elif 0 in spans[1::2]:
        return None
    else:
        slot = _Slot(s, s.bp.value)   # at once: whatever happens next releases
        torch = sys.modules["torch"]
        e = _reuse.build(s, slot, v[3], v[2], spans, lambda p, a: _to_torch(torch, p, a))
        del slot
        _reuse.settle(e)
    batch = Batch(e.items)
    batch._slot = e.slot
    batch._entry = e
    batch.epoch = v[0]
    batch.index = v[1]
    batch.padded = v[4] == 1
    batch._torch = sys.modules["torch"]
    if v[5] or v[6]:   # replaced or dropped samples (on_error="skip")
        batch.replaced = _replaced(lib, e.slot.b, v[2])
        batch.dropped = _dropped(lib, e.slot.b)
    else:
        batch.replaced = batch.dropped = ()
    return batch


_SKIP_NAMED = 10  # files a skip warning names; the count covers the rest


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


if _native is None:
    _EpochIter.__next__ = _EpochIter._next
