"""feedclient.pack._parallel: from_iterable() and from_hf(), datasets written
by several threads at once whose result never depends on how many.

The samples are read and checked in order on the calling thread and cut
into chunks by a rule that looks only at the samples (a chunk ends past
chunk_bytes of data or chunk_samples samples); each chunk becomes a part,
a small dataset written by a worker thread through its own C writer
(compression drops the GIL), and the parts are joined in chunk order by the
final writer (fmt_writer_adopt: their shard files move in). So workers=1
and workers=16 write the same bytes. Parts live in a temporary sibling of
out_dir, removed whatever happens.
"""

import collections
import concurrent.futures
import os
import shutil
import tempfile

from ..errors import InvalidArgument
from ._fields import parse_fields, sample_bytes
from ._progress import Progress
from ._writer import Writer

CHUNK_BYTES = 64 << 20
CHUNK_SAMPLES = 1 << 18


def _write_part(part_dir, fields, opts, base, cols, n):
    w = Writer(part_dir, fields, progress=False, _record_base=base, **opts)
    try:
        w._add(n, cols)
        w.close()
    finally:
        w.abort()
    return part_dir


def from_iterable(iterable, out_dir, fields, *, workers=None, chunk_bytes=CHUNK_BYTES,
                  chunk_samples=CHUNK_SAMPLES, total=None, progress=True, **opts):
    """Writes every sample (a dict, as Writer.write takes) of iterable into
    a dataset at out_dir, compressing on `workers` threads (default: the
    CPUs); returns the number of samples. The dataset's bytes do not depend
    on workers. opts are Writer's (name, block_bytes, level, classes...)."""
    workers = workers or os.cpu_count() or 1
    if workers < 1:
        raise InvalidArgument(f"workers={workers}: at least 1")
    if total is None and hasattr(iterable, "__len__"):
        total = len(iterable)
    specs = parse_fields(fields)
    out_dir = os.fspath(out_dir).rstrip("/") or "/"
    part_opts = {k: v for k, v in opts.items() if k in ("block_bytes", "block_records",
                                                        "level", "shard_bytes")}
    final = Writer(out_dir, fields, progress=False, **opts)
    prog = Progress(total=total, quiet=not progress)
    tmp = tempfile.mkdtemp(prefix=os.path.basename(out_dir) + ".parts-",
                           dir=os.path.dirname(os.path.abspath(out_dir)))
    try:
        with concurrent.futures.ThreadPoolExecutor(workers) as pool:
            _run_chunks(iterable, specs, fields, part_opts, final, pool, workers, tmp,
                        chunk_bytes, chunk_samples, prog)
        n = final.close()
    finally:
        final.abort()
        prog.end()
        shutil.rmtree(tmp, ignore_errors=True)
    if progress:
        secs = max(prog.elapsed(), 1e-9)
        print(f"packed {n} samples into {out_dir}: {prog.bytes / 1e6:.1f} MB in, {secs:.2f} s, "
              f"{prog.bytes / 1e6 / secs:.1f} MB/s, {workers} workers", flush=True)
    return n


def _run_chunks(iterable, specs, fields, opts, final, pool, workers, tmp, chunk_bytes,
                chunk_samples, prog):
    """Cuts the samples into chunks, writes each as a part on the pool, and
    joins the parts in order, at most 2 * workers chunks in flight."""
    inflight = collections.deque()
    cols, n, nbytes, pos = [[] for _ in specs], 0, 0, 0
    prog.bytes = 0

    def submit():
        nonlocal cols, n, nbytes
        part = os.path.join(tmp, f"part-{pos - n:012d}")
        inflight.append(pool.submit(_write_part, part, fields, opts, pos - n, cols, n))
        cols, n, nbytes = [[] for _ in specs], 0, 0
        while len(inflight) > 2 * workers or (inflight and inflight[0].done()):
            final.adopt(inflight.popleft().result())

    for sample in iterable:
        vals = sample_bytes(specs, sample, pos)
        size = 0
        for col, v in zip(cols, vals):
            col.append(v)
            size += memoryview(v).nbytes
        n, nbytes, pos = n + 1, nbytes + size, pos + 1
        prog.bytes += size
        prog.tick(pos, prog.bytes)
        if nbytes >= chunk_bytes or n >= chunk_samples:
            submit()
    if n:
        submit()
    while inflight:
        final.adopt(inflight.popleft().result())


# datasets' feature types -> Writer field specs
_HF_VALUES = {"string": "str", "large_string": "str", "binary": "bytes", "large_binary": "bytes"}


def _hf_field(name, feat):
    """A datasets feature as a Writer field spec; InvalidArgument naming the
    column when it has no counterpart."""
    kind = type(feat).__name__
    if kind == "Value":
        if feat.dtype in _HF_VALUES:
            return _HF_VALUES[feat.dtype]
        return (feat.dtype, ())
    if kind == "ClassLabel":
        return ("int64", ())
    if kind == "Image":
        return "image"
    if kind in ("Sequence", "List", "LargeList") and type(feat.feature).__name__ == "Value":
        length = getattr(feat, "length", -1)
        return (feat.feature.dtype, (None,) if length in (-1, None) else (length,))
    if kind.startswith("Array") and hasattr(feat, "shape"):
        shape = tuple(feat.shape)
        return (feat.dtype, (None,) + shape[1:] if shape and shape[0] is None else shape)
    raise InvalidArgument(f"column '{name}': feature {kind} has no field kind; give it in "
                          "fields= or leave the column out of columns=")


def _hf_rows(dataset, columns, batch):
    """The dataset's rows as dicts of the chosen columns, read in slices."""
    for start in range(0, len(dataset), batch):
        part = dataset[start:start + batch]
        n = len(part[columns[0]])
        for j in range(n):
            yield {c: part[c][j] for c in columns}


def from_hf(dataset, out_dir, columns=None, *, fields=None, workers=None, **opts):
    """Writes a Hugging Face datasets.Dataset (anything with len(),
    column_names, features and slicing) into a dataset at out_dir: one
    field per column (all, or those in columns), named after it; a
    ClassLabel column's names become the dataset's classes; an Image
    column keeps its encoded bytes (read with decode=False). fields= gives
    or overrides a column's spec. Returns the number of samples."""
    columns = list(columns or dataset.column_names)
    missing = [c for c in columns if c not in dataset.column_names]
    if missing:
        raise InvalidArgument(f"column '{missing[0]}' is not in the dataset "
                              f"({', '.join(dataset.column_names)})")
    feats = dataset.features
    specs = {c: (fields or {}).get(c) or _hf_field(c, feats[c]) for c in columns}
    for c in columns:
        if type(feats[c]).__name__ == "Image" and getattr(feats[c], "decode", False):
            dataset = dataset.cast_column(c, type(feats[c])(decode=False))
    labels = [c for c in columns if type(feats[c]).__name__ == "ClassLabel"]
    if labels and "classes" not in opts:
        opts["classes"] = list(feats[labels[0]].names)
    return from_iterable(_hf_rows(dataset, columns, 1024), out_dir, specs, workers=workers,
                         total=len(dataset), **opts)
