"""feedclient.pack._writer: Writer, a dataset written from Python through
libfeedpack (format/'s C writer), sample by sample or a batch at a time.

Samples are checked and turned into bytes here (_fields.py), gathered into
a batch of columns, and handed to C one batch per call (the GIL is dropped
while C compresses), so a Python caller pays ctypes' cost per batch, not
per sample. One thread per Writer.
"""

import ctypes
import os

import numpy as np

from ..errors import FeedError, InvalidArgument
from . import _native
from ._fields import parse_fields, sample_bytes
from ._progress import Progress

_BATCH_BYTES = 4 << 20      # a batch goes to C past this many bytes ...
_BATCH_SAMPLES = 4096       # ... or this many samples


def _check_error(p, rc, what):
    if rc < 0:
        msg = _native.lib().feed_pack_errmsg(p).decode(errors="replace")
        raise FeedError(f"{what}: {msg or os.strerror(-rc)}", rc)


class Writer:
    """Writes a feedd dataset into out_dir (which must not exist; it appears
    only when close() succeeds).

        with feedclient.pack.Writer("out", fields={"x": ("uint8", (8, 8)),
                                                   "label": ("int64", ()),
                                                   "tokens": ("uint16", (None,)),
                                                   "caption": "str"}) as w:
            w.write({"x": x, "label": 3, "tokens": toks, "caption": "a cat"})

    fields maps a name to (numpy dtype name, shape) with None for the
    variable first axis, or to "str", "bytes" or "image" (a JPEG or PNG
    file's bytes, which feedd's `decode` op reads). A sample with a missing
    or unknown field, another dtype or shape is refused naming its position
    and the field. Options: name (default: out_dir's last component),
    block_bytes, block_records, level (zstd), shard_bytes, classes (label
    names), progress (a line on a terminal; False: never), total (samples
    expected, for the ETA).
    """

    def __init__(self, out_dir, fields, *, name=None, block_bytes=0, block_records=0,
                 level=0, shard_bytes=0, classes=(), source="feedclient.pack",
                 progress=True, total=None, _record_base=0):
        self.out_dir = os.fspath(out_dir).rstrip("/") or "/"
        self.specs = parse_fields(fields)
        self._fields = fields
        self._opts = dict(block_bytes=block_bytes, block_records=block_records, level=level,
                          shard_bytes=shard_bytes)
        self._p = None
        self._count = 0
        self._bytes = 0
        self._cols = [[] for _ in self.specs]
        self._pending = 0
        self._pending_bytes = 0
        self._progress = Progress(total=total, quiet=not progress)
        self._p = self._new(name or os.path.basename(self.out_dir), source, classes,
                            _record_base)

    def _new(self, name, source, classes, base):
        lib = _native.lib()
        arr = (_native.PackField * len(self.specs))()
        self._names = [s.name.encode() for s in self.specs]
        for i, s in enumerate(self.specs):
            arr[i].name, arr[i].dtype, arr[i].rank = self._names[i], s.code, len(s.shape)
            for d, v in enumerate(s.shape):
                arr[i].shape[d] = v
            arr[i].variable, arr[i].image = int(s.variable), int(s.kind == "image")
        self._classes = [c.encode() for c in classes]
        cls = (ctypes.c_char_p * max(1, len(self._classes)))(*self._classes)
        opts = _native.PackOpts(name.encode(), source.encode(), self._opts["block_bytes"],
                                self._opts["block_records"], self._opts["level"],
                                self._opts["shard_bytes"], len(self._classes), cls, base)
        p = ctypes.c_void_p()
        err = ctypes.create_string_buffer(512)
        rc = lib.feed_pack_new(self.out_dir.encode(), arr, len(self.specs), ctypes.byref(opts),
                               ctypes.byref(p), err, len(err))
        if rc < 0:
            msg = err.value.decode(errors="replace")
            raise FeedError(msg if self.out_dir in msg else f"{self.out_dir}: {msg}", rc)
        return p

    @property
    def count(self):
        """Samples written so far."""
        return self._count + self._pending

    def write(self, sample):
        """Adds one sample: a dict with a value for every field."""
        self._live()
        vals = sample_bytes(self.specs, sample, self._count + self._pending)
        size = 0
        for col, v in zip(self._cols, vals):
            col.append(v)
            size += v.nbytes if type(v) is np.ndarray else memoryview(v).nbytes
        self._pending += 1
        self._pending_bytes += size
        if self._pending >= _BATCH_SAMPLES or self._pending_bytes >= _BATCH_BYTES:
            self._flush()

    def write_batch(self, columns):
        """Adds n samples at once: columns maps every field to an array with
        the sample axis first (fixed fields) or a sequence of n values."""
        self._live()
        self._flush()
        names = [s.name for s in self.specs]
        unknown = [k for k in columns if k not in names]
        if unknown or len(columns) != len(names):
            missing = [k for k in names if k not in columns]
            raise InvalidArgument(f"write_batch: field '{(unknown or missing)[0]}' is "
                                  f"{'not a field' if unknown else 'missing'}")
        n = len(columns[names[0]])
        base = self.count
        cols = []
        for s in self.specs:
            col = columns[s.name]
            if len(col) != n:
                raise InvalidArgument(f"write_batch: field '{s.name}' has {len(col)} samples, "
                                      f"'{names[0]}' has {n}")
            if s.kind == "array" and not s.variable and isinstance(col, np.ndarray) \
                    and col.dtype == s.np and col.shape[1:] == s.shape:
                cols.append(np.ascontiguousarray(col))
            else:
                cols.append([s.bytes_of(v, base + j) for j, v in enumerate(col)])
        self._add(n, cols)

    def _flush(self):
        if self._pending:
            cols, n = self._cols, self._pending
            self._cols = [[] for _ in self.specs]
            self._pending = self._pending_bytes = 0
            self._add(n, cols)

    def _add(self, n, cols):
        """Hands n samples (per field: an array, or a list of bytes-like) to C."""
        data = (ctypes.c_void_p * len(cols))()
        offs = (ctypes.c_void_p * len(cols))()
        keep = []
        nbytes = 0
        for f, col in enumerate(cols):
            if isinstance(col, tuple):            # (flat bytes, n + 1 byte offsets)
                buf, off = col
                offs[f] = off.ctypes.data
            elif isinstance(col, np.ndarray):
                buf, off = col, None
            else:
                lens = np.fromiter((memoryview(v).nbytes for v in col), np.uint64, n)
                off = np.zeros(n + 1, np.uint64)
                np.cumsum(lens, out=off[1:])
                buf = np.frombuffer(b"".join(col), np.uint8) if n else np.zeros(1, np.uint8)
                offs[f] = off.ctypes.data
            keep.append((buf, off))
            data[f] = buf.ctypes.data if buf.nbytes else None
            nbytes += buf.nbytes
        lib = _native.lib()
        rc = lib.feed_pack_add_batch(self._p, n, data, offs)
        if rc < 0:
            self._fail(rc, self.out_dir)
        self._count += n
        self._bytes += nbytes
        self._progress.tick(self._count, self._bytes)

    def write_ragged(self, flat, lengths):
        """Adds len(lengths) samples of a dataset with one variable array
        field: sample j is the next lengths[j] elements of flat (of the
        field's dtype). The fast path for token documents."""
        self._live()
        self._flush()
        s = self.specs[0]
        if len(self.specs) != 1 or s.kind != "array" or not s.variable or s.shape:
            raise InvalidArgument("write_ragged: the dataset must have one flat variable field")
        flat = np.ascontiguousarray(flat, dtype=s.np)
        lengths = np.asarray(lengths, np.uint64)
        off = np.zeros(len(lengths) + 1, np.uint64)
        np.cumsum(lengths * np.uint64(s.np.itemsize), out=off[1:])
        if off[-1] != flat.nbytes:
            raise InvalidArgument(f"write_ragged: lengths add up to {int(off[-1])} bytes, "
                                  f"flat has {flat.nbytes}")
        self._add(len(lengths), [(flat.view(np.uint8), off)])

    def adopt(self, part_dir):
        """Appends every sample of the finished dataset part_dir (written by
        another Writer with the same fields), consuming it."""
        self._live()
        self._flush()
        rc = _native.lib().feed_pack_adopt(self._p, os.fspath(part_dir).encode())
        if rc < 0:
            self._fail(rc, self.out_dir)
        self._count = _native.lib().feed_pack_count(self._p)

    def close(self):
        """Writes what is left and puts the dataset in place; returns the
        number of samples. A second close does nothing."""
        if self._p is None:
            return self._count
        try:
            self._flush()
            rc = _native.lib().feed_pack_finish(self._p)
            if rc < 0:
                self._fail(rc, self.out_dir)
        finally:
            self._progress.end()
            self.abort()
        return self._count

    def abort(self):
        """Drops everything written; out_dir never appears."""
        if self._p is not None:
            _native.lib().feed_pack_free(self._p)
            self._p = None

    def summary(self):
        """The summary line: samples, MB in, time, MB/s."""
        secs = self._progress.elapsed()
        return (f"packed {self._count} samples into {self.out_dir}: {self._bytes / 1e6:.1f} MB "
                f"in, {secs:.2f} s, {self._bytes / 1e6 / max(secs, 1e-9):.1f} MB/s")

    def _fail(self, rc, what):
        try:
            _check_error(self._p, rc, what)
        finally:
            self.abort()

    def _live(self):
        if self._p is None:
            raise InvalidArgument(f"{self.out_dir}: the writer is closed")

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close()
        else:
            self.abort()
        return False

    def __del__(self):
        self.abort()
