"""bench/run's language-model rows: the corpus files (Megatron's .bin/.idx,
byte-level tokens with EOD), the Megatron-style GPTDataset and its index,
the conversion times and the table's ratios (feedd reading the same
corpus: test_feedclient_bench_lm.py). The peers from PyPI (LitData,
Mosaic) run only in bench/run."""
import gzip
import json
import os
import sys
import types

import numpy as np


sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
import lm_corpus  # noqa: E402
import lm_peers  # noqa: E402
import lm_report  # noqa: E402

L = 64


def random_docs(seed, n=40):
    return lm_corpus.random_docs(seed, n, 3 * L)


def test_bench_lm_tokenize_appends_eod():
    t = lm_corpus.tokenize("é a".encode())
    assert t.dtype == np.uint16
    assert t.tolist() == [0xC3, 0xA9, 0x20, 0x61, lm_corpus.EOD]


def test_bench_lm_documents_alternate_sources(tmp_path, monkeypatch):
    rst = []
    for k in range(3):
        p = tmp_path / ("doc%d.rst.txt" % k)
        p.write_bytes(b"rst %d " % k * 10)
        rst.append(str(p))
    man = []
    for k in range(3):
        p = tmp_path / ("cmd%d.1.gz" % k)
        with gzip.open(p, "wb") as f:
            f.write(b".TH CMD%d 1\n" % k)
        man.append(str(p))
    monkeypatch.setattr(lm_corpus, "pydoc_files", lambda: rst)
    monkeypatch.setattr(lm_corpus, "man_files", lambda: man)
    got = list(lm_corpus.documents(None))
    assert [s for s, _ in got] == ["python3-doc", "man"] * 3
    assert got[1][1] == b".TH CMD0 1\n"          # gunzipped
    # stops once max_bytes of text are read (whole files)
    assert len(list(lm_corpus.documents(len(got[0][1]) + 1))) == 2
    meta = lm_corpus.build(str(tmp_path / "c"), None)
    assert meta["documents"] == 6
    assert meta["tokens"] == sum(len(t) + 1 for _, t in got)
    assert meta["sources"]["man"]["documents"] == 3
    with open(tmp_path / "c.json") as f:
        assert json.load(f)["tokens"] == meta["tokens"]


def test_bench_lm_idx_round_trip(tmp_path):
    docs = random_docs(1)
    prefix = str(tmp_path / "lm")
    lm_corpus.write(prefix, docs)
    sizes, pointers = lm_corpus.read_idx(prefix + ".idx")
    assert sizes.tolist() == [len(d) for d in docs]
    assert pointers[1] == 2 * len(docs[0])
    for want, got in zip(docs, lm_corpus.docs(prefix)):
        np.testing.assert_array_equal(got, want)


def test_bench_lm_megatron_windows_overlap_by_one(tmp_path):
    docs = random_docs(2)
    lm_corpus.write(str(tmp_path / "lm"), docs)
    a = types.SimpleNamespace(data=str(tmp_path), seq_len=L)
    lm_peers.prepare_megatron(a)
    with open(os.path.join(lm_peers.megatron_dir(a), "build.json")) as f:
        build = json.load(f)
    assert build["index_build_ms"] > 0
    ds = lm_peers.GPTDataset(str(tmp_path / "lm"), lm_peers.megatron_dir(a))
    assert sorted(ds.doc_idx.tolist()) == list(range(len(docs)))
    stream = np.concatenate([docs[d] for d in ds.doc_idx]).astype(np.int64)
    n = (len(stream) - 1) // L
    assert len(ds) == n == build["samples"]
    assert sorted(ds.shuffle_idx.tolist()) == list(range(n))
    for i in range(n):
        j = ds.shuffle_idx[i]
        np.testing.assert_array_equal(ds[i], stream[j * L:j * L + L + 1])


def row(name, tokens_per_s, cpu, **extra):
    run = dict(tokens_per_s=tokens_per_s, cpu_s_per_epoch=cpu, first_batch_ms=1.0,
               rss_kib=1024, seq_len=L, batch=4, epoch_samples=10, **extra)
    return {"workload": "lm", "name": name, "kind": "py", "runs": [run], "error": None,
            "command": "bench/lm_peers.py " + name}


def test_bench_lm_report_ratios():
    doc = {"rows": [row("feedd-concat", 1000.0, 0.01), row("feedd-pack", 500.0, 0.02),
                    row("megatron-memmap", 250.0, 0.08, index_build_ms=3.5),
                    row("litdata-tokens", 100.0, 0.1, conversion_s=12.25),
                    {"workload": "lm", "name": "mosaic-concat", "kind": "peer", "runs": [],
                     "error": "skipped: PyPI peers\nleft out | here", "command": "x"}],
           "lm_corpus": "3 documents"}
    md = "\n".join(lm_report.table(doc))
    meg = next(l for l in md.splitlines() if l.startswith("| megatron-memmap"))
    assert "concat: 4.0× tokens/s, 8.0× CPU" in meg
    assert "pack: 2.0× tokens/s, 4.0× CPU" in meg
    assert "| 3.5 | – |" in meg
    lit = next(l for l in md.splitlines() if l.startswith("| litdata-tokens"))
    assert "| – | 12.2 |" in lit and "concat: 10.0× tokens/s, 10.0× CPU" in lit
    skipped = next(l for l in md.splitlines() if l.startswith("| mosaic-concat"))
    assert "skipped: PyPI peers left out / here" in skipped   # one line, no stray |
    assert skipped.count("|") == md.splitlines()[4].count("|")
    assert "3 documents" in md and "rows of 64 tokens, batch 4" in md


def test_bench_lm_conversion_times_follow_the_format(tmp_path):
    d = str(tmp_path)
    assert lm_peers.conversion_s(d, "feedd-concat") is None
    lm_peers.record_conversion(d, "feedpack", 1.5)
    lm_peers.record_conversion(d, "litdata", 7.0)
    assert lm_peers.conversion_s(d, "feedd-concat") == 1.5
    assert lm_peers.conversion_s(d, "feedd-pack") == 1.5
    assert lm_peers.conversion_s(d, "litdata-tokens") == 7.0
    assert lm_peers.conversion_s(d, "mosaic-concat") is None
    assert lm_peers.conversion_s(d, "megatron-memmap") is None   # reads .bin/.idx as they are
