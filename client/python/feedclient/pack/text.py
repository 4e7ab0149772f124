"""feedclient.pack.text: `python3 -m feedclient.pack text FILE...`: JSONL or
Parquet text into a dataset, tokenized with a `tokenizers` tokenizer or
kept as strings.

Documents are read in input order (JSONL, also .jsonl.gz and .jsonl.zst,
line by line; Parquet through pyarrow, row groups read on several
threads), tokenized in batches on N processes (pool.imap keeps the order),
and written by one Writer: sample i is input document i. With
--tokenizer, one variable `tokens` field (u16 when the vocabulary fits,
else u32; --eos appends that token's id to every document); without it,
the text as a str field named after --field. Bad input names the file and
the line (JSONL) or row (Parquet).
"""

import argparse
import concurrent.futures
import gzip
import io
import itertools
import json
import multiprocessing
import os
import sys
import time

import numpy as np

from ..errors import FeedError, InvalidArgument
from ._progress import Progress
from ._writer import Writer

BATCH_DOCS = 512


class InputError(FeedError):
    """Bad input: the message names the file and the position."""


def _open_text(path):
    if path.endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8")
    if path.endswith(".zst") or path.endswith(".zstd"):
        try:
            import zstandard
        except ImportError:
            raise InputError(f"{path}: reading .zst needs the zstandard module "
                             "(apt install python3-zstandard)") from None
        raw = zstandard.ZstdDecompressor().stream_reader(open(path, "rb"), closefd=True)
        return io.TextIOWrapper(raw, encoding="utf-8")
    return open(path, encoding="utf-8")


def read_jsonl(path, field):
    """(text, where) for every non-blank line of a JSONL file."""
    with _open_text(path) as fh:
        try:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    doc = json.loads(line)
                except ValueError as e:
                    raise InputError(f"{path}:{lineno}: not JSON: {e}") from None
                if not isinstance(doc, dict) or field not in doc:
                    raise InputError(f"{path}:{lineno}: no field '{field}'")
                if not isinstance(doc[field], str):
                    raise InputError(f"{path}:{lineno}: field '{field}' is "
                                     f"{type(doc[field]).__name__}, not a string")
                yield doc[field], f"{path}:{lineno}"
        except UnicodeDecodeError as e:
            raise InputError(f"{path}: not UTF-8 text: {e}") from None
        except (OSError, EOFError) as e:
            raise InputError(f"{path}: {e}") from None


def read_parquet(path, field, threads):
    """(text, where) for every row of a Parquet file's column `field`;
    row groups read `threads` at a time, yielded in order."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise InputError(f"{path}: reading Parquet needs pyarrow (pip install pyarrow)") \
            from None
    try:
        pf = pq.ParquetFile(path)
    except Exception as e:  # pyarrow raises its own ArrowInvalid, OSError...
        raise InputError(f"{path}: not a Parquet file: {e}") from None
    names = pf.schema_arrow.names
    if field not in names:
        raise InputError(f"{path}: no column '{field}' (columns: {', '.join(names)})")
    row = 0
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        groups = range(pf.num_row_groups)
        for start in range(0, len(groups), 2 * threads):
            reads = pool.map(lambda g: pq.ParquetFile(path).read_row_group(g, columns=[field]),
                             groups[start:start + 2 * threads])
            for table in reads:
                for text in table.column(0).to_pylist():
                    if not isinstance(text, str):
                        raise InputError(f"{path}: row {row}: column '{field}' is "
                                         f"{type(text).__name__}, not a string")
                    yield text, f"{path}: row {row}"
                    row += 1


# ---- tokenizing, in worker processes ----------------------------------------

_tok = None


def _init(path):
    global _tok
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one core per process
    from tokenizers import Tokenizer
    _tok = Tokenizer.from_file(path)


def _encode(texts):
    """Token ids of a batch of texts: (flat int64 ids, lengths)."""
    ids = [e.ids for e in _tok.encode_batch(texts, add_special_tokens=False)]
    lengths = np.fromiter(map(len, ids), np.int64, len(ids))
    flat = np.fromiter(itertools.chain.from_iterable(ids), np.int64, int(lengths.sum()))
    return flat, lengths


def _batches(docs, n):
    texts, wheres = [], []
    for text, where in docs:
        texts.append(text)
        wheres.append(where)
        if len(texts) == n:
            yield texts, wheres
            texts, wheres = [], []
    if texts:
        yield texts, wheres


def _tokenizer_facts(path, eos):
    """(vocabulary size, eos id or None) from the tokenizer file."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise InputError("--tokenizer needs the tokenizers library (pip install tokenizers)") \
            from None
    try:
        tok = Tokenizer.from_file(path)
    except Exception as e:  # tokenizers raises its own Exception types
        raise InputError(f"{path}: not a tokenizers tokenizer.json: {e}") from None
    vocab = tok.get_vocab_size(with_added_tokens=True)
    eos_id = None
    if eos is not None:
        eos_id = tok.token_to_id(eos)
        if eos_id is None:
            raise InputError(f"{path}: --eos {eos!r} is not a token of this tokenizer")
    return vocab, eos_id


def _documents(files, fmt, field, threads):
    for path in files:
        if not os.path.isfile(path):
            raise InputError(f"{path}: no such file")
        if fmt == "jsonl":
            yield from read_jsonl(path, field)
        else:
            yield from read_parquet(path, field, threads)


def _check_vocab(flat, lengths, wheres, vocab):
    """InputError naming the document whose token is past the vocabulary."""
    if flat.size and int(flat.max()) >= vocab:
        at = int(np.argmax(flat >= vocab))
        doc = int(np.searchsorted(np.cumsum(lengths), at, side="right"))
        raise InputError(f"{wheres[doc]}: token id {int(flat[at])} is above the vocabulary "
                         f"({vocab} tokens)")


def _tokenized(docs, tokenizer, workers):
    """(flat ids, lengths, wheres) per batch, in input order, encoded on
    `workers` processes."""
    wheres = []

    def texts():
        for t, w in _batches(docs, BATCH_DOCS):
            wheres.append(w)
            yield t
    if workers == 1:
        _init(tokenizer)
        for t in texts():
            flat, lengths = _encode(t)
            yield flat, lengths, wheres.pop(0)
        return
    ctx = multiprocessing.get_context("spawn")   # no tokenizers state crosses a fork
    with ctx.Pool(workers, _init, (tokenizer,)) as pool:
        for flat, lengths in pool.imap(_encode, texts()):
            yield flat, lengths, wheres.pop(0)


def pack_text(files, out_dir, fmt, field, tokenizer=None, eos=None, workers=None, quiet=False,
              **opts):
    """Packs the documents of files; returns (documents, tokens or bytes)."""
    workers = workers or os.cpu_count() or 1
    docs = _documents(files, fmt, field, workers)
    start = time.monotonic()
    if tokenizer is None:
        if eos is not None:
            raise InvalidArgument("--eos needs --tokenizer")
        with Writer(out_dir, {field: "str"}, progress=not quiet, **opts) as w:
            for text, _ in docs:
                w.write({field: text})
        print(w.summary(), flush=True)
        return w.count, w._bytes
    vocab, eos_id = _tokenizer_facts(tokenizer, eos)
    dtype = np.uint16 if vocab <= 1 << 16 else np.uint32
    w = Writer(out_dir, {"tokens": (np.dtype(dtype).name, (None,))}, progress=False, **opts)
    prog = Progress(unit="documents", quiet=quiet)
    ndocs = ntok = 0
    try:
        for flat, lengths, wheres in _tokenized(docs, tokenizer, workers):
            if eos_id is not None:
                flat = np.insert(flat, np.cumsum(lengths), eos_id)
                lengths = lengths + 1
            _check_vocab(flat, lengths, wheres, vocab)
            w.write_ragged(flat.astype(dtype), lengths)
            ndocs, ntok = ndocs + len(lengths), ntok + int(flat.size)
            prog.tick(ndocs, ntok * np.dtype(dtype).itemsize)
        w.close()
    finally:
        w.abort()
        prog.end()
    secs = max(time.monotonic() - start, 1e-9)
    print(f"packed {ndocs} documents, {ntok} tokens ({np.dtype(dtype).name}) into {out_dir}: "
          f"{secs:.2f} s, {ntok / secs:.0f} tokens/s on {workers} processes", flush=True)
    return ndocs, ntok


def add_parser(sub):
    p = sub.add_parser("text", help="JSONL or Parquet text, tokenized or as strings",
                       description=__doc__.split("\n\n")[0])
    p.add_argument("files", nargs="+", metavar="FILE")
    p.add_argument("--format", required=True, choices=["jsonl", "parquet"])
    p.add_argument("--field", required=True, help="the JSON key or Parquet column of the text")
    p.add_argument("--tokenizer", help="a tokenizers tokenizer.json; without it, strings")
    p.add_argument("--eos", help="append this token's id to every document")
    p.add_argument("-o", "--output", required=True, help="dataset directory to create")
    p.add_argument("--workers", type=int, default=None, help="tokenizing processes "
                   "(default: the CPUs)")
    p.add_argument("--name", help="dataset name (default: last component of the output)")
    p.add_argument("--level", type=int, default=0, help="zstd level 1..19 (default 3)")
    p.add_argument("--block-bytes", type=int, default=0, help="target decoded block size")
    p.add_argument("--quiet", action="store_true", help="no progress line")
    p.set_defaults(run=lambda a: pack_text(a.files, a.output, a.format, a.field, a.tokenizer,
                                           a.eos, a.workers, a.quiet, name=a.name,
                                           level=a.level, block_bytes=a.block_bytes))
