"""feedclient.loader: batches from feedd as numpy arrays or torch tensors.

The Loader: its arguments (checked and turned into stream options by
feedclient._options), its current stream (feedclient._stream), one epoch's
iteration (feedclient._epoch, whose batches feedclient._batch builds),
and its position (state_dict, load_state_dict: feedclient._state). The
queries without a stream (datasets, status) are feedclient._conn's; this
module gives every public name of them, as before.

A Loader opens one stream at a time, each on a connection of its own;
the stream outlives the Loader while batches of it are alive
(feedclient._stream says how).

Threads: one thread at a time uses a Loader (its lock is taken without
waiting; a second thread gets ConcurrentUse). Batches may be dropped on
any thread. With transform=, the Loader's own pool runs the user's
function on batches already taken; those threads never call into the
stream, only drop batches.

Must never: release a slot that an array still views, close a stream with
batches alive, or touch C objects in a process forked from the one that
opened them.
"""

import ctypes
import re
import threading
import time
import weakref
from typing import Any, Callable, Optional, Sequence, Tuple, Union

import numpy as np

from ._lib import lib
from .errors import (ConcurrentUse, DaemonNotRunning, FeedError, InvalidArgument, LimitReached,
                     LoaderClosed, ResumeRefused, UnknownDataset)
from ._options import (_NOT_A_DATASET, _SHORT, _SIZES, _check_int, _in_worker_check,
                       _label_dtype, _slots_describe, _u8_layout)
from ._conn import DatasetName, FieldInfo, _connect, _error, datasets
from ._batch import Batch
from ._stream import _Stream, _drop_stream
from ._state import _Resumable
from ._epoch import _END, _EpochIter
from . import _options, _stream
# what feedclient.loader gave before it was split (tests, pickled batches)
from ._batch import _FieldPlan, _rebuild_batch, _to_torch, register_torch_safe  # noqa: F401
from ._conn import DatasetInfo, status  # noqa: F401


class Loader(_Resumable):
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
        a = _options.Args(locals())
        self._closed = True  # until the first stream is open
        self._mixture, dataset = _options.mixture(dataset, samples_per_epoch)
        self._dataset = dataset
        self._pool = None    # transform='s threads, made at the first iteration
        # device= (feedclient.device): converted tensors on "cuda" or "cpu"
        self._conv, self._slots_req = _options.conversion(a)
        self._convert_on = convert_on
        _options.check_args(a, self._mixture)
        rank, world_size, nodes, node = _options.placement(a)
        _options.check_reconnect(reconnect_s)
        self._torch = None
        if as_torch or self._conv is not None:
            import torch
            self._torch = torch
            register_torch_safe(torch)
        self._label_dtype = _label_dtype(label_dtype, self._torch)
        self._keep_args(a, rank, world_size)
        # one slot more than credits: the batch being fetched while the loop
        # still holds the previous one (and transform='s batches in flight)
        self._spare = 1 + (transform_threads if transform is not None else 0)
        self._dataset_b = dataset.encode()
        pipeline = _u8_layout(pipeline, layout, device, device_slots)
        self._pipeline_b = pipeline.encode() if pipeline is not None else None
        self._group = group
        self._group_b = group.encode() if group is not None else None
        self._opts = _options.stream_opts(a, (rank, world_size, nodes, node), self._spare,
                                          (self._dataset_b, self._pipeline_b, self._group_b))
        if self._mixture is not None:
            self._mixture.apply(self._opts)
        if self._slots_req is not None:
            self._opts.device = self._slots_req
        self._start(wait_for_daemon, group)

    def _keep_args(self, a, rank, world_size):
        """The arguments and the state that later calls read (__init__)."""
        self._timeout = a.timeout
        self._reconnect_s = a.reconnect_s
        self._transform = a.transform
        self._transform_threads = a.transform_threads
        self._pending = None       # the iteration's transform= queue (_EpochIter)
        self._credits = a.credits
        self._detached = 0
        self._pin = bool(a.pin_memory)
        self._socket = a.socket
        self._batch_size = a.batch_size
        self._rank = rank
        self._world_size = world_size
        self._as_torch = bool(a.as_torch)

    def _start(self, wait_for_daemon, group):
        """Opens the first stream (waiting up to wait_for_daemon seconds for
        feedd), converts or pins as asked, and makes the Loader usable."""
        self._lock = threading.Lock()
        self._fork_gen = _stream._fork_gen
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
        if self._closed or self._fork_gen != _stream._fork_gen:
            self._lock.release()
            self._check_usable()

    def _check_usable(self):
        if self._fork_gen != _stream._fork_gen:
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
            if self._fork_gen == _stream._fork_gen:
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
