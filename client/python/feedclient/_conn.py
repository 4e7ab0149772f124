"""feedclient._conn: connections to feedd and the queries that need no
stream: datasets(), status(), DatasetName.path(), and the exception for a
failed C call (_error). Each query opens a connection of its own and
closes it before returning, so any thread may call them."""

import ctypes
import errno
import os
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

from . import _lib
from ._lib import lib
from .errors import DaemonNotRunning, class_for
from ._options import _check_int


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
