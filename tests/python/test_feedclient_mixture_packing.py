"""Packed mixtures and exact packed resume through a real feedd (issue 29):
Loader({"web": 0.6, "code": 0.3, "books": 0.1}, B, pipeline="concat(...)").

Three token-document datasets (feedpack tokens --doc-sep) of different
sizes, each source's tokens in a range of its own. Checked: every row comes
from one source (its `source` field, its tokens, its document ids);
the shares of rows follow the weights up to rounding at every prefix;
each source's rows, in the order the mixture gives them, are exactly the
rows a plain packed stream over that dataset gives, epoch after epoch
(its own passes, reshuffled), so no token is lost per source but each
pass's last partial row, and each row is a contiguous piece of its
source's documents; cu_seqlens and position ids as for one dataset.
Resume: a plain packed stream (concat and pack) and a packed mixture
resumed in the middle of an epoch, with a document split across the
resume point, yield every field of every row bit for bit as the
uninterrupted stream does; a packed mixture resumed under other weights
continues each source from its own position. Refusals name the source.
"""

import collections
import pickle
import subprocess
from types import SimpleNamespace

import numpy as np
import pytest

import feedclient
from conftest import pack

L = 16
B = 4
SIZES = {"web": 70, "code": 40, "books": 15}
W3 = {"web": 0.6, "code": 0.3, "books": 0.1}
FIELDS = ("input_ids", "labels", "position_ids", "document_ids")


def make_docs(rng, n, base):
    """n documents of 0..40 tokens in [base, base + 1000), each ending with
    the separator 1 (feedpack keeps it); some empty but for it."""
    docs = []
    for i in range(n):
        k = 0 if i % 9 == 4 else int(rng.integers(1, 40))
        docs.append((base + rng.integers(0, 1000, k)).tolist() + [1])
    return docs


@pytest.fixture(scope="module")
def mp(feedpack, feedd_factory, tmp_path_factory):
    d = tmp_path_factory.mktemp("mixpack")
    rng = np.random.default_rng(2929)
    docs, args = {}, []
    for s, (name, n) in enumerate(SIZES.items()):
        docs[name] = make_docs(rng, n, 1000 * (s + 2))
        np.array([t for x in docs[name] for t in x], dtype="<u2").tofile(d / f"{name}.bin")
        pack(feedpack, "tokens", d / f"{name}.bin", "--dtype", "uint16", "--doc-sep", 1,
             "--block-records", 8, "-o", d / name)
        args += ["--dataset", f"{name}={d / name}"]
    np.save(d / "plain.npy", np.arange(10, dtype=np.int64))
    pack(feedpack, "npy", f"input_ids={d / 'plain.npy'}", "-o", d / "plain")
    args += ["--dataset", f"plain={d / 'plain'}"]
    (d / "run").mkdir()
    daemon = feedd_factory(d / "run", "--workers", 2, *args)
    return SimpleNamespace(sock=daemon.sock, docs=docs, dir=d)


def batch_rows(b):
    """The rows of a batch: dicts of numpy arrays (and the source, if any)."""
    out = []
    arr = {k: np.asarray(b[k]) for k in FIELDS}
    src = np.asarray(b["source"]).tolist() if "source" in b else None
    for i in range(arr["input_ids"].shape[0]):
        r = {k: arr[k][i].astype(np.int64).copy() for k in FIELDS}
        r["source"] = src[i] if src is not None else None
        out.append(r)
    return out


def check_cu(b):
    """cu_seqlens: every segment start (a run of one document) and B * L."""
    dids = np.asarray(b["document_ids"])
    n = dids.shape[0]
    starts = [i * L + j for i in range(n) for j in range(L)
              if j == 0 or dids[i, j] != dids[i, j - 1]]
    assert np.asarray(b["cu_seqlens"]).tolist() == starts + [n * L]


def mixture_rows(sock, weights, pipeline, nbatches, **kw):
    rows = []
    with feedclient.Loader(weights, B, socket=sock, seed=11, pipeline=pipeline, **kw) as ld:
        while len(rows) < nbatches * B:
            for b in ld:
                check_cu(b)
                rows += batch_rows(b)
                if len(rows) >= nbatches * B:
                    break
    return rows


def plain_rows(sock, name, pipeline, n):
    """The first n rows of a plain packed stream over `name` (batch 1: a
    pack epoch keeps all its rows), epoch after epoch."""
    rows = []
    with feedclient.Loader(name, 1, socket=sock, seed=11, pipeline=pipeline) as ld:
        while len(rows) < n:
            for b in ld:
                rows += batch_rows(b)
                if len(rows) >= n:
                    break
    return rows


def same_rows(got, want, what):
    assert len(got) == len(want), what
    for i, (g, w) in enumerate(zip(got, want)):
        for k in FIELDS:
            np.testing.assert_array_equal(g[k], w[k], err_msg=f"{what}: row {i}: {k}")


@pytest.mark.parametrize("pipeline", ["concat(seq_len=16)", "pack(seq_len=16, window=10)"])
def test_packed_mixture_rows_are_each_sources_own(mp, pipeline):
    rows = mixture_rows(mp.sock, W3, pipeline, 60)
    names = list(W3)
    counts = [0, 0, 0]
    for n, r in enumerate(rows, 1):
        counts[r["source"]] += 1
        for k, w in enumerate(W3.values()):
            assert abs(counts[k] - w * n) < 1, f"{names[k]} after {n} rows: {counts[k]}"
    for s, name in enumerate(names):
        mine = [r for r in rows if r["source"] == s]
        docs = mp.docs[name]
        for r in mine:  # a contiguous piece of each of its documents, in range
            dids, ids = r["document_ids"], r["input_ids"]
            for j in range(L):
                if dids[j] >= 0:
                    assert 0 <= dids[j] < len(docs)
                    assert ids[j] == 1 or 1000 * (s + 2) <= ids[j] < 1000 * (s + 3)
        # its rows are the plain stream's over its dataset, passes included
        same_rows(mine, plain_rows(mp.sock, name, pipeline, len(mine)), f"{pipeline} {name}")


def test_packed_mixture_concat_loses_only_each_pass_last_row(mp):
    """books (15 documents) passes twice in 100 batches: each pass is
    its documents whole, once each, in a new order; only the tokens after
    its last whole row are not read."""
    rows = [r for r in mixture_rows(mp.sock, W3, "concat(seq_len=16)", 100)
            if r["source"] == 2]
    docs = mp.docs["books"]
    total = sum(len(d) for d in docs)
    per = (total - 1) // L
    assert len(rows) >= 2 * per
    orders = []
    for p in range(len(rows) // per):
        part = rows[p * per:(p + 1) * per]
        ids = np.concatenate([r["input_ids"] for r in part])
        dids = np.concatenate([r["document_ids"] for r in part])
        order = [int(dids[0])] + [int(x) for a, x in zip(dids, dids[1:]) if x != a]
        assert len(set(order)) == len(order)
        stream = np.array([t for i in order for t in docs[i]] +
                          [t for i in range(len(docs)) if i not in order for t in docs[i]])
        np.testing.assert_array_equal(ids, stream[:len(ids)])
        assert len(ids) == per * L and total - len(ids) < L + 1
        orders.append(order)
    assert orders[0] != orders[1]


def split_point(rows, start):
    """A batch boundary at or after batch `start` with one document on both
    sides of it (concat: running from one row into the next; pack: pieces
    of a document longer than L in rows on either side)."""
    def docs_of(batch):
        return {(r["source"], int(x)) for r in batch for x in r["document_ids"] if x >= 0}
    for k in range(start, len(rows) // B - 1):
        if docs_of(rows[k * B:k * B + B]) & docs_of(rows[(k + 1) * B:(k + 2) * B]):
            return k + 1
    pytest.fail("no document split across a batch boundary")


def loader_rows(ld, n):
    out = []
    while len(out) < n:
        for b in ld:
            check_cu(b)
            out += batch_rows(b)
            if len(out) >= n:
                break
    return out


def resume_check(make, nbatches, first):
    """Rows of an uninterrupted run against a run stopped at a batch where
    a document is split, resumed from its state_dict: bit for bit."""
    with make() as ld:
        ref = loader_rows(ld, nbatches * B)
    k = split_point(ref, first)
    with make() as ld:
        head = loader_rows(ld, k * B)
        state = pickle.loads(pickle.dumps(ld.state_dict()))
    same_rows(head, ref[:k * B], "before the resume")
    with make() as ld:
        ld.load_state_dict(state)
        rest = loader_rows(ld, (nbatches - k) * B)
    same_rows(rest, ref[k * B:], "after the resume")
    assert [r["source"] for r in rest] == [r["source"] for r in ref[k * B:]]


@pytest.mark.parametrize("pipeline", ["concat(seq_len=16)", "pack(seq_len=16, window=10)"])
def test_plain_packed_resume_mid_epoch_is_exact(mp, pipeline):
    def make():
        return feedclient.Loader("web", B, socket=mp.sock, seed=4, pipeline=pipeline)
    resume_check(make, 12, 2)


@pytest.mark.parametrize("pipeline", ["concat(seq_len=16)", "pack(seq_len=16, window=10)"])
def test_packed_mixture_resume_mid_epoch_is_exact(mp, pipeline):
    def make():
        return feedclient.Loader(W3, B, socket=mp.sock, seed=4, pipeline=pipeline)
    resume_check(make, 40, 23)   # past books' first pass


@pytest.mark.parametrize("pipeline", ["concat(seq_len=16)", "pack(seq_len=16, window=10)"])
def test_packed_mixture_other_weights_continue_each_source(mp, pipeline):
    """state_dict under W3, load_state_dict on a Loader of other weights:
    every source's next rows are the ones after those it gave, and the
    new shares run from there."""
    w2 = {"web": 0.2, "code": 0.3, "books": 0.5}
    with feedclient.Loader(W3, B, socket=mp.sock, seed=11, pipeline=pipeline) as ld:
        head = loader_rows(ld, 9 * B)
        state = ld.state_dict()
    with feedclient.Loader(w2, B, socket=mp.sock, seed=11, pipeline=pipeline) as ld:
        ld.load_state_dict(state)
        rest = loader_rows(ld, 10 * B)
    given = collections.Counter(r["source"] for r in head)
    counts = [0, 0, 0]
    for n, r in enumerate(rest, 1):
        counts[r["source"]] += 1
        for s, w in enumerate(w2.values()):
            assert abs(counts[s] - w * n) < 1
    for s, name in enumerate(W3):
        mine = [r for r in rest if r["source"] == s]
        want = plain_rows(mp.sock, name, pipeline, given[s] + len(mine))[given[s]:]
        same_rows(mine, want, f"{name} after the resume")


def test_packed_mixture_refusals(mp):
    with pytest.raises(feedclient.FeedError, match="source 'plain'"):
        feedclient.Loader({"web": 1, "plain": 1}, B, socket=mp.sock,
                          pipeline="concat(seq_len=16)")
    with pytest.raises(feedclient.FeedError, match="source 'code'.*repeat and choose"):
        feedclient.Loader({"web": 1, "code": feedclient.Source(1, repeat=2)}, B,
                          socket=mp.sock, pipeline="pack(seq_len=16)")


def test_status_labels_a_mixture_stream_by_the_mixture(mp):
    with feedclient.Loader(W3, B, socket=mp.sock, pipeline="concat(seq_len=16)") as ld:
        next(iter(ld))
        mine = [s for s in feedclient.status(mp.sock)["streams"]
                if s["pipeline"] == "concat(seq_len=16)"]
    assert [s["dataset"] for s in mine] == ["web+code+books"]


def test_check_config_names_a_mixture_source_whose_schema_differs(mp, feed_bin):
    """feedd --check-config opens a configured mixture's sources and names
    the source and field whose schema is not the first source's."""
    cfg = mp.dir / "mixtures.yaml"
    cfg.write_text(
        f"socket: {mp.dir / 'check.sock'}\n"
        "datasets:\n"
        + "".join(f"  - {{name: {n}, path: {mp.dir / n}}}\n" for n in (*SIZES, "plain")) +
        "mixtures:\n"
        "  - name: lm\n"
        "    sources:\n"
        "      - {dataset: web, weight: 0.7}\n"
        "      - {dataset: books, weight: 0.3}\n"
        "  - name: broken\n"
        "    sources:\n"
        "      - {dataset: code, weight: 1}\n"
        "      - {dataset: plain, weight: 1}\n")
    res = subprocess.run([str(feed_bin / "feedd"), "--check-config", str(cfg), "--strict"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 1, res.stderr
    assert "mixture 'broken': source 'plain': field 'input_ids' differs from source " \
           "'code''s field 'tokens' (name)" in res.stderr, res.stderr
    assert "mixture 'lm'" not in res.stderr
