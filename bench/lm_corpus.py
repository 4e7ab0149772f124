#!/usr/bin/python3
"""bench/lm_corpus.py: the language-model corpus of bench/run's lm rows.

    python3 bench/lm_corpus.py --out PREFIX [--max-bytes N]

Documents are files of local text: the reStructuredText sources of
Python's documentation (python3-doc, /usr/share/doc/python3*/html/_sources)
and the English man pages (/usr/share/man/man*/, gzip'd roff, read with
gzip), taken one from each source in turn (each list in path order) until
--max-bytes of text (default: all of both). The tokenizer is byte-level:
a token per byte of UTF-8 (0..255), and EOD (256) ends each document, as
Megatron's preprocess_data.py --append-eod does; vocabulary 257, stored as
uint16 (2 bytes a token in every loader's format).

Writes PREFIX.bin and PREFIX.idx in Megatron-LM's indexed-dataset format
("MMIDIDX", version 1, dtype code 8 = uint16; one sequence per document),
which bench/run imports with `feedpack megatron` and reads back here for
the peers' own formats (docs()), and PREFIX.json: documents, tokens, the
bytes of text per source, and how long the tokenization took.
"""
import argparse
import glob
import gzip
import json
import os
import struct
import sys
import time

import numpy as np

EOD = 256
VOCAB = 257
PYDOC = "/usr/share/doc/python3*/html/_sources"
MAN = "/usr/share/man/man[1-8]"
MAGIC = b"MMIDIDX\x00\x00"
DTYPE_U16 = 8  # Megatron's DType code of numpy.uint16


def pydoc_files():
    dirs = sorted(glob.glob(PYDOC))
    if not dirs:
        return []
    out = []
    for dirpath, _, files in sorted(os.walk(dirs[-1])):
        out += [os.path.join(dirpath, f) for f in sorted(files) if f.endswith(".txt")]
    return out


def man_files():
    out = []
    for d in sorted(glob.glob(MAN)):
        out += [os.path.join(d, f) for f in sorted(os.listdir(d)) if f.endswith(".gz")]
    return out


def read_text(path):
    """A file's bytes (gunzipped for .gz); None when unreadable."""
    try:
        if path.endswith(".gz"):
            with gzip.open(path) as f:
                return f.read()
        with open(path, "rb") as f:
            return f.read()
    except (OSError, EOFError):
        return None


def documents(max_bytes):
    """(source, bytes) of each document, alternating the two sources."""
    lists = [("python3-doc", pydoc_files()), ("man", man_files())]
    if not any(files for _, files in lists):
        raise SystemExit("lm_corpus: no %s and no %s (apt-get install python3-doc man-db)"
                         % (PYDOC, MAN))
    iters = [(name, iter(files)) for name, files in lists]
    total = 0
    while iters and (max_bytes is None or total < max_bytes):
        for name, it in list(iters):
            path = next(it, None)
            if path is None:
                iters.remove((name, it))
                continue
            text = read_text(path)
            if text:
                total += len(text)
                yield name, text


def tokenize(text):
    """Byte-level: each byte a token, then EOD."""
    t = np.empty(len(text) + 1, np.uint16)
    t[:-1] = np.frombuffer(text, np.uint8)
    t[-1] = EOD
    return t


def write_idx(path, sizes):
    """Megatron's MMIDIDX index of len(sizes) documents of uint16 tokens."""
    sizes = np.asarray(sizes, np.int32)
    pointers = np.zeros(len(sizes), np.int64)
    np.cumsum(sizes[:-1].astype(np.int64) * 2, out=pointers[1:])
    with open(path, "wb") as f:
        f.write(MAGIC + struct.pack("<Q", 1) + struct.pack("<B", DTYPE_U16))
        f.write(struct.pack("<Q", len(sizes)) + struct.pack("<Q", len(sizes) + 1))
        f.write(sizes.tobytes() + pointers.tobytes())
        f.write(np.arange(len(sizes) + 1, dtype=np.int64).tobytes())


def read_idx(path):
    """(sizes int32, pointers int64 in bytes) of a uint16 MMIDIDX index,
    memory-mapped, as Megatron's MMapIndexedDataset reads them."""
    with open(path, "rb") as f:
        head = f.read(34)
    if head[:9] != MAGIC or struct.unpack("<Q", head[9:17])[0] != 1:
        raise SystemExit("lm_corpus: %s is not a version-1 MMIDIDX index" % path)
    if head[17] != DTYPE_U16:
        raise SystemExit("lm_corpus: %s has dtype code %d, not 8 (uint16)" % (path, head[17]))
    n = struct.unpack("<Q", head[18:26])[0]
    buf = np.memmap(path, np.uint8, "r")
    sizes = np.frombuffer(buf, np.int32, n, 34)
    pointers = np.frombuffer(buf, np.int64, n, 34 + 4 * n)
    return sizes, pointers


def docs(prefix):
    """Each document's tokens (uint16 views of PREFIX.bin), in order."""
    sizes, pointers = read_idx(prefix + ".idx")
    data = np.memmap(prefix + ".bin", np.uint16, "r")
    for n, p in zip(sizes, pointers):
        yield data[p // 2:p // 2 + n]


def write(prefix, docs):
    """PREFIX.bin and PREFIX.idx of documents given as token arrays."""
    with open(prefix + ".bin", "wb") as f:
        for d in docs:
            f.write(np.asarray(d, "<u2").tobytes())
    write_idx(prefix + ".idx", [len(d) for d in docs])


def random_docs(seed, n, max_len):
    """n documents of random byte tokens, 1..max_len-1 long, each ending
    in EOD (the tests' corpora)."""
    rng = np.random.default_rng(seed)
    return [np.append(rng.integers(0, 256, int(rng.integers(1, max_len))), EOD)
            .astype(np.uint16) for _ in range(n)]


def build(prefix, max_bytes):
    t0 = time.perf_counter()
    sizes, per_source = [], {}
    with open(prefix + ".bin", "wb") as f:
        for source, text in documents(max_bytes):
            t = tokenize(text)
            f.write(t.tobytes())
            sizes.append(len(t))
            s = per_source.setdefault(source, {"documents": 0, "text_bytes": 0})
            s["documents"] += 1
            s["text_bytes"] += len(text)
    write_idx(prefix + ".idx", sizes)
    meta = {"documents": len(sizes), "tokens": int(np.sum(sizes, dtype=np.int64)),
            "vocab": VOCAB, "eod": EOD, "sources": per_source,
            "tokenize_s": time.perf_counter() - t0, "max_bytes": max_bytes}
    with open(prefix + ".json", "w") as f:
        json.dump(meta, f)
    return meta


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="PREFIX of PREFIX.bin / .idx / .json")
    p.add_argument("--max-bytes", type=int, help="stop after this much text")
    a = p.parse_args()
    meta = build(a.out, a.max_bytes)
    print(json.dumps(meta))
    return 0


if __name__ == "__main__":
    sys.exit(main())
