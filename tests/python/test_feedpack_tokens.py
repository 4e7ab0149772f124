"""feedpack's token-document ingest: `tokens --doc-sep` and `megatron`.

Each dataset is read back with bench/feedformat.py (the independent
reader) and its lengths.u32 checked against the documents. The Megatron
MMIDIDX files are written here by a small generator of that format.
"""

import os
import pathlib
import struct
import subprocess
import sys

import numpy as np
import pytest

SRC = pathlib.Path(os.environ.get("FEED_SRC", pathlib.Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(SRC / "bench"))

import feedformat as ff  # noqa: E402


def run(feedpack, *args, stdin=None):
    return subprocess.run([feedpack, *map(str, args)], capture_output=True, timeout=60,
                          input=stdin)


def fails(res, *words, code=1):
    err = res.stderr.decode()
    assert res.returncode == code, (res.returncode, err)
    for w in words:
        assert w in err, (w, err)


def documents(out):
    """The dataset's documents (numpy arrays) and its lengths.u32."""
    ds = ff.Dataset(str(out))
    docs = [np.asarray(ds[i]["tokens"]).copy() for i in range(len(ds))]
    lens = np.fromfile(os.path.join(out, "lengths.u32"), dtype="<u4")
    ds.close()
    return docs, lens


def split_reference(tokens, sep):
    """Documents ending after each separator (kept); the tail is one more."""
    docs, cur = [], []
    for t in tokens:
        cur.append(int(t))
        if t == sep:
            docs.append(cur)
            cur = []
    if cur:
        docs.append(cur)
    return docs


# ---- tokens --doc-sep ------------------------------------------------------

def test_doc_sep_splits_several_files_and_stdin(feedpack, tmp_path):
    rng = np.random.default_rng(1)
    a = rng.integers(0, 500, 3000, dtype=np.uint16)
    a[[10, 11, 400, 2999]] = 7      # an empty-looking run, and a file ending on one
    b = rng.integers(0, 500, 1234, dtype=np.uint16)
    b[b == 7] = 8                   # no separator: the whole file is one document
    c = rng.integers(0, 500, 777, dtype=np.uint16)
    (tmp_path / "a.bin").write_bytes(a.tobytes())
    (tmp_path / "b.bin").write_bytes(b.tobytes())
    out = tmp_path / "docs"
    res = run(feedpack, "tokens", tmp_path / "a.bin", "-", tmp_path / "b.bin", "--dtype",
              "uint16", "--doc-sep", "7", "-o", out, stdin=c.tobytes())
    assert res.returncode == 0, res.stderr
    want = split_reference(a, 7) + split_reference(c, 7) + split_reference(b, 7)
    docs, lens = documents(out)
    assert [d.tolist() for d in docs] == want
    assert docs[0].dtype == np.uint16
    assert lens.tolist() == [len(d) for d in want]


def test_doc_sep_u32_input_stored_u16_when_vocab_fits(feedpack, tmp_path):
    toks = np.array([5, 60000, 2, 9, 2, 65535], dtype=np.uint32)
    (tmp_path / "t.bin").write_bytes(toks.tobytes())
    out = tmp_path / "d"
    res = run(feedpack, "tokens", tmp_path / "t.bin", "--dtype", "uint32", "--doc-sep", "2",
              "--vocab-size", "65536", "-o", out)
    assert res.returncode == 0, res.stderr
    docs, lens = documents(out)
    assert [d.tolist() for d in docs] == [[5, 60000, 2], [9, 2], [65535]]
    assert docs[0].dtype == np.uint16
    # without a vocabulary that fits, u32 stays
    out2 = tmp_path / "d2"
    assert run(feedpack, "tokens", tmp_path / "t.bin", "--dtype", "uint32", "--doc-sep", "2",
               "-o", out2).returncode == 0
    assert documents(out2)[0][0].dtype == np.uint32


def test_doc_sep_vocab_size_checks_every_token(feedpack, tmp_path):
    toks = np.array([1, 2, 3, 0, 4, 1000, 0], dtype=np.uint16)
    (tmp_path / "t.bin").write_bytes(toks.tobytes())
    out = tmp_path / "d"
    fails(run(feedpack, "tokens", tmp_path / "t.bin", "--dtype", "uint16", "--doc-sep", "0",
              "--vocab-size", "1000", "-o", out), "t.bin", "token 5 is 1000", "--vocab-size 1000")
    assert not out.exists()


def test_doc_sep_refuses_odd_size(feedpack, tmp_path):
    (tmp_path / "odd.bin").write_bytes(bytes([1, 0, 2, 0, 3]))
    out = tmp_path / "d"
    fails(run(feedpack, "tokens", tmp_path / "odd.bin", "--dtype", "uint16", "--doc-sep", "0",
              "-o", out), "odd.bin", "size 5", "not a whole number of tokens")
    assert not out.exists()


def test_doc_sep_refuses_text(feedpack, tmp_path):
    (tmp_path / "notes.txt").write_text("The quick brown fox jumps over the lazy dog.\n" * 20)
    out = tmp_path / "d"
    fails(run(feedpack, "tokens", tmp_path / "notes.txt", "--dtype", "uint16", "--doc-sep",
              "0", "-o", out), "notes.txt", "looks like text")
    fails(run(feedpack, "tokens", "-", "--dtype", "uint16", "--doc-sep", "0", "-o", out,
              stdin=b"hello world, this is text and not tokens\n"), "stdin", "looks like text")
    assert not out.exists()


@pytest.mark.parametrize("opts", [["--dtype", "uint16", "--doc-sep", "1", "--seq-len", "4"],
                                  ["--dtype", "uint16", "--seq-len", "4", "--vocab-size", "9"],
                                  ["--dtype", "uint16", "--doc-sep", "70000"],
                                  ["--dtype", "uint16", "--doc-sep", "9", "--vocab-size", "5"]])
def test_doc_sep_usage(feedpack, tmp_path, opts):
    (tmp_path / "t.bin").write_bytes(bytes(64))
    fails(run(feedpack, "tokens", tmp_path / "t.bin", *opts, "-o", tmp_path / "d"), code=2)


# ---- megatron ----------------------------------------------------------------

MEG_CODES = {np.uint16: 8, np.int32: 4, np.int64: 5}


def write_mmidx(prefix, docs, dtype=np.uint16, sentences=1):
    """Megatron-LM's MMIDIDX .idx/.bin: each document cut into `sentences`
    sequences (Megatron's --split-sentences), document indices over them."""
    seqs, doc_idx = [], [0]
    for d in docs:
        parts = np.array_split(np.asarray(d, dtype=dtype), sentences)
        seqs.extend(parts)
        doc_idx.append(len(seqs))
    lens = np.array([len(s) for s in seqs], dtype=np.int32)
    ptrs = np.concatenate([[0], np.cumsum(lens[:-1], dtype=np.int64)]).astype(np.int64)
    ptrs *= np.dtype(dtype).itemsize
    with open(f"{prefix}.idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00")
        f.write(struct.pack("<Q", 1))
        f.write(struct.pack("<B", MEG_CODES[dtype]))
        f.write(struct.pack("<Q", len(seqs)))
        f.write(struct.pack("<Q", len(doc_idx)))
        f.write(lens.tobytes())
        f.write(ptrs.tobytes())
        f.write(np.array(doc_idx, dtype=np.int64).tobytes())
    with open(f"{prefix}.bin", "wb") as f:
        for s in seqs:
            f.write(s.tobytes())


def random_docs(rng, n, hi, vocab):
    return [rng.integers(0, vocab, rng.integers(1, hi)).tolist() for _ in range(n)]


def test_megatron_several_prefixes(feedpack, tmp_path):
    rng = np.random.default_rng(2)
    d1, d2 = random_docs(rng, 50, 300, 60000), random_docs(rng, 30, 200, 60000)
    write_mmidx(tmp_path / "web", d1)
    write_mmidx(tmp_path / "code", d2, sentences=3)
    out = tmp_path / "m"
    res = run(feedpack, "megatron", tmp_path / "web", tmp_path / "code", "-o", out)
    assert res.returncode == 0, res.stderr
    docs, lens = documents(out)
    assert [d.tolist() for d in docs] == d1 + d2
    assert docs[0].dtype == np.uint16
    assert lens.tolist() == [len(d) for d in d1 + d2]


def test_megatron_int32(feedpack, tmp_path):
    rng = np.random.default_rng(3)
    d = random_docs(rng, 20, 100, 200000)
    write_mmidx(tmp_path / "big", d, dtype=np.int32)
    out = tmp_path / "m"
    assert run(feedpack, "megatron", tmp_path / "big", "-o", out).returncode == 0
    docs, _ = documents(out)
    assert docs[0].dtype == np.int32 and [x.tolist() for x in docs] == d


def test_megatron_bin_size_disagrees(feedpack, tmp_path):
    write_mmidx(tmp_path / "x", [[1, 2, 3], [4, 5]])
    with open(tmp_path / "x.bin", "ab") as f:
        f.write(b"\0\0")
    out = tmp_path / "m"
    fails(run(feedpack, "megatron", tmp_path / "x", "-o", out), "x.bin", "12 bytes",
          "x.idx describes 10")
    assert not out.exists()


def test_megatron_refuses_bad_index(feedpack, tmp_path):
    (tmp_path / "n.idx").write_bytes(b"not an index at all, no")
    (tmp_path / "n.bin").write_bytes(b"")
    fails(run(feedpack, "megatron", tmp_path / "n", "-o", tmp_path / "m"), "n.idx", "MMIDIDX")
    write_mmidx(tmp_path / "w", [[1, 2]], dtype=np.int64)
    fails(run(feedpack, "megatron", tmp_path / "w", "-o", tmp_path / "m"), "w.idx",
          "dtype code 5")
    write_mmidx(tmp_path / "a", [[1, 2]])
    write_mmidx(tmp_path / "b", [[1, 2]], dtype=np.int32)
    fails(run(feedpack, "megatron", tmp_path / "a", tmp_path / "b", "-o", tmp_path / "m"),
          "b.idx", "dtype i32")


def test_lengths_file_checked_at_open(feedpack, tmp_path):
    """A lengths.u32 of the wrong size is refused naming it (the reader
    keeps it as the documents' lengths: it must hold one per document)."""
    (tmp_path / "t.bin").write_bytes(np.array([3, 4, 0, 5, 0], dtype="<u2").tobytes())
    out = tmp_path / "d"
    assert run(feedpack, "tokens", tmp_path / "t.bin", "--dtype", "uint16", "--doc-sep", "0",
               "-o", out).returncode == 0
    assert run(feedpack, "verify", out).returncode == 0
    lens = out / "lengths.u32"
    lens.chmod(0o644)
    lens.write_bytes(lens.read_bytes()[:4])
    fails(run(feedpack, "verify", out), "lengths.u32", "4 bytes, expected 8")
