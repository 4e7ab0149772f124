"""concat(seq_len=L) through feedd and the Python Loader: every field of
every row against a reference cut from the documents written here, rank
interleaving, shuffled epochs that still hold every document whole, int64
tokens under as_torch, resume, and the refusals (pack, a dataset without
documents, seq_len past the tokens).
"""

import pickle

import numpy as np
import pytest

import feedclient
from conftest import pack

L = 32
BATCH = 4


def make_docs(rng, n):
    """n documents of 0..90 tokens; separator 1 ends each (feedpack keeps it)."""
    docs = []
    for i in range(n):
        k = 0 if i % 11 == 3 else int(rng.integers(1, 90))
        d = rng.integers(2, 60000, k).tolist() + [1]
        docs.append(d)
    return docs


@pytest.fixture(scope="module")
def pk(feedpack, feedd_factory, tmp_path_factory):
    d = tmp_path_factory.mktemp("packing")
    rng = np.random.default_rng(29)
    docs = make_docs(rng, 300)
    np.array([t for x in docs for t in x], dtype="<u2").tofile(d / "docs.bin")
    pack(feedpack, "tokens", d / "docs.bin", "--dtype", "uint16", "--doc-sep", 1,
         "--block-records", 16, "-o", d / "docs")
    np.arange(64, dtype="<u2").tofile(d / "flat.bin")
    pack(feedpack, "tokens", d / "flat.bin", "--dtype", "uint16", "--seq-len", 8,
         "-o", d / "flat")
    np.array([5, 6, 1], dtype="<u2").tofile(d / "tiny.bin")
    pack(feedpack, "tokens", d / "tiny.bin", "--dtype", "uint16", "--doc-sep", 1,
         "-o", d / "tiny")
    daemon = feedd_factory(d, "--workers", 2, "--dataset", f"docs={d / 'docs'}",
                           "--dataset", f"flat={d / 'flat'}", "--dataset", f"tiny={d / 'tiny'}")
    return daemon.sock, docs


def reference_rows(docs, order):
    """The rows of concat over docs in `order`: dicts of numpy arrays."""
    toks = np.array([t for i in order for t in docs[i]], np.int64)
    dids = np.array([i for i in order for _ in docs[i]], np.int64)
    rows = []
    for r in range((len(toks) - 1) // L):
        ids, lab, doc = toks[r * L:r * L + L], toks[r * L + 1:r * L + L + 1], dids[r * L:r * L + L]
        pos = np.zeros(L, np.int64)
        for j in range(1, L):
            pos[j] = 0 if doc[j] != doc[j - 1] else pos[j - 1] + 1
        rows.append({"input_ids": ids, "labels": lab, "document_ids": doc, "position_ids": pos})
    return rows


def check_batch(b, want_rows):
    n = len(want_rows)
    assert b["input_ids"].shape == (n, L)
    for k in ("input_ids", "labels", "document_ids", "position_ids"):
        got = np.asarray(b[k])
        np.testing.assert_array_equal(got, np.stack([w[k] for w in want_rows]), err_msg=k)
    starts = [i * L + j for i, w in enumerate(want_rows) for j in range(L)
              if j == 0 or w["document_ids"][j] != w["document_ids"][j - 1]]
    cu = np.asarray(b["cu_seqlens"])
    assert cu.dtype == np.int32
    assert cu.tolist() == starts + [n * L]
    assert b["max_seqlen"] == int(np.diff(cu).max())


def test_concat_rows_match_reference(pk):
    sock, docs = pk
    want = reference_rows(docs, range(len(docs)))
    with feedclient.Loader("docs", BATCH, socket=sock, shuffle=False,
                           pipeline="concat(seq_len=32)") as loader:
        assert len(loader) == -(-len(want) // BATCH)
        got = 0
        for b in loader:
            check_batch(b, want[got:got + BATCH])
            assert b.indices.tolist() == list(range(got, got + len(b.indices)))
            got += len(b.indices)
        assert got == len(want)
        f = {x.name: x for x in loader.fields}
        assert f["input_ids"].dtype == "u16" and f["labels"].dtype == "i64"


def test_concat_ranks_interleave(pk):
    sock, docs = pk
    want = reference_rows(docs, range(len(docs)))
    for rank in range(2):
        with feedclient.Loader("docs", BATCH, socket=sock, shuffle=False, rank=rank,
                               world_size=2, drop_last=True,
                               pipeline="concat(seq_len=32)") as loader:
            for k, b in enumerate(loader):
                rows = [(k * BATCH + i) * 2 + rank for i in range(BATCH)]
                check_batch(b, [want[r] for r in rows])


def test_concat_shuffled_epoch_holds_documents_whole(pk):
    """A shuffled epoch is the documents in some order, each whole; the
    same seed gives the same rows, another epoch another order."""
    sock, docs = pk
    kw = dict(socket=sock, shuffle=True, seed=5, pipeline="concat(seq_len=32)")
    with feedclient.Loader("docs", BATCH, **kw) as loader:
        epochs = [[(np.asarray(b["input_ids"]).copy(), np.asarray(b["document_ids"]).copy())
                   for b in loader] for _ in range(2)]
    with feedclient.Loader("docs", BATCH, **kw) as loader:
        again = [np.asarray(b["input_ids"]).copy() for b in loader]
    assert all((a == b).all() for a, (b, _) in zip(again, epochs[0]))
    orders = []
    for ep in epochs:
        ids = np.concatenate([x.reshape(-1) for x, _ in ep])
        dids = np.concatenate([d.reshape(-1) for _, d in ep])
        order = [int(dids[0])] + [int(x) for p, x in zip(dids, dids[1:]) if x != p]
        assert len(set(order)) == len(order)            # each document once, in one run
        toks = np.array([t for i in order for t in docs[i]])
        np.testing.assert_array_equal(ids, toks[:len(ids)])
        orders.append(order)
    nonempty = [i for i, d in enumerate(docs) if d]
    assert sorted(orders[0]) != orders[0] and orders[0] != orders[1]
    assert set(orders[0]) <= set(nonempty)


def test_concat_as_torch_int64(pk):
    torch = pytest.importorskip("torch")
    sock, docs = pk
    want = reference_rows(docs, range(len(docs)))
    with feedclient.Loader("docs", BATCH, socket=sock, shuffle=False, as_torch=True,
                           pipeline="concat(seq_len=32)") as loader:
        b = next(iter(loader))
        assert b["input_ids"].dtype == torch.int64 and b["labels"].dtype == torch.int64
        assert b["cu_seqlens"].dtype == torch.int32
        assert b["input_ids"].tolist() == [w["input_ids"].tolist() for w in want[:BATCH]]
        assert {x.name: x for x in loader.fields}["input_ids"].dtype == "i64"
        emb = torch.nn.Embedding(60000, 4)(b["input_ids"])
        assert emb.shape == (BATCH, L, 4)


def test_concat_resume_continues(pk):
    sock, _ = pk
    kw = dict(socket=sock, shuffle=True, seed=9, pipeline="concat(seq_len=32)")
    with feedclient.Loader("docs", BATCH, **kw) as loader:
        ref = [np.asarray(b["input_ids"]).copy() for b in loader]
    with feedclient.Loader("docs", BATCH, **kw) as loader:
        for k, b in enumerate(loader):
            if k == 6:
                state = loader.state_dict()
                break
    with feedclient.Loader("docs", BATCH, **kw) as loader:
        loader.load_state_dict(pickle.loads(pickle.dumps(state)))
        rest = [np.asarray(b["input_ids"]).copy() for b in loader]
    assert len(rest) == len(ref) - 7
    assert all((a == b).all() for a, b in zip(rest, ref[7:]))


def test_packing_refusals(pk):
    sock, _ = pk
    with pytest.raises(feedclient.FeedError, match="token-document dataset"):
        feedclient.Loader("flat", 2, socket=sock, pipeline="concat(seq_len=4)")
    with pytest.raises(feedclient.FeedError, match="not one row of 8"):
        feedclient.Loader("tiny", 1, socket=sock, pipeline="concat(seq_len=8)")
    with pytest.raises(feedclient.FeedError, match="only op"):
        feedclient.Loader("docs", 2, socket=sock, pipeline="concat(seq_len=8) | identity")
    with feedclient.Loader("tiny", 4, socket=sock, pipeline="pack(seq_len=8)") as loader:
        with pytest.raises(feedclient.FeedError, match="epoch 0 has 1 rows, not a batch of 4"):
            next(iter(loader))


def test_concat_first_batch_of_a_million_documents(feedpack, feedd_factory, tmp_path):
    """Issue 29's start cost: 10^6 documents; the Loader's first batch needs
    no pass over them (feedd keeps their lengths, 4 bytes each, from open).
    Checks the rows; prints the time from construction to the first batch
    (the figure the README quotes; no timing is asserted)."""
    import time
    rng = np.random.default_rng(6)
    n = 1_000_000
    lens = rng.integers(1, 16, n)
    toks = rng.integers(2, 50000, int(lens.sum())).astype("<u2")
    ends = np.cumsum(lens) - 1
    toks[ends] = 1                               # each document ends with its separator
    toks.tofile(tmp_path / "m.bin")
    pack(feedpack, "tokens", tmp_path / "m.bin", "--dtype", "uint16", "--doc-sep", 1,
         "-o", tmp_path / "million")
    daemon = feedd_factory(tmp_path, "--dataset", f"million={tmp_path / 'million'}")
    for shuffle in (False, True):
        t0 = time.monotonic()
        with feedclient.Loader("million", 8, socket=daemon.sock, shuffle=shuffle,
                               pipeline="concat(seq_len=2048)") as loader:
            b = next(iter(loader))
            dt = time.monotonic() - t0
            ids = np.asarray(b["input_ids"]).reshape(-1)
            dids = np.asarray(b["document_ids"]).reshape(-1)
            if not shuffle:
                np.testing.assert_array_equal(ids, toks[:8 * 2048])
            # every document in the rows is whole (but the last), ending with 1
            order = [int(dids[0])] + [int(x) for p, x in zip(dids, dids[1:]) if x != p]
            starts = np.concatenate([[0], ends[:-1] + 1])
            got = np.concatenate([toks[starts[i]:ends[i] + 1] for i in order])
            np.testing.assert_array_equal(ids, got[:len(ids)])
            print(f"\n10^6 documents, shuffle={shuffle}: first batch {dt * 1000:.0f} ms "
                  f"after Loader()")
    t0 = time.monotonic()
    with feedclient.Loader("million", 8, socket=daemon.sock, seed=2,
                           pipeline="pack(seq_len=2048)") as loader:
        b = next(iter(loader))
        dt = time.monotonic() - t0
        ids, dids = np.asarray(b["input_ids"]), np.asarray(b["document_ids"])
        for r in range(8):          # each piece is its document, whole (all are < L)
            runs = np.flatnonzero(np.diff(dids[r]) != 0) + 1
            for seg in np.split(np.arange(2048), runs):
                i = int(dids[r, seg[0]])
                if i >= 0:
                    np.testing.assert_array_equal(ids[r, seg], toks[starts[i]:ends[i] + 1])
        print(f"10^6 documents, pack: first batch {dt * 1000:.0f} ms after Loader()")


def reference_pack(docs, order, window):
    """pack(seq_len=L, pad_id=0, window=W) by hand: per window, pieces of at
    most L sorted longest first (then by position, then by start), each
    into the open row with the least room that holds it (the oldest of
    equals), else a new row; rows in the order opened, padded with 0."""
    rows = []
    for w0 in range(0, len(order), window):
        pieces = []
        for q, i in enumerate(order[w0:w0 + window]):
            for s in range(0, len(docs[i]), L):
                pieces.append((-min(L, len(docs[i]) - s), q, s, i))
        pieces.sort()
        room, content = [], []
        for neg, _, s, i in pieces:
            n = -neg
            fits = [r for r in range(len(room)) if room[r] >= n]
            r = min(fits, key=lambda r: (room[r], r)) if fits else None
            if r is None:
                room.append(L)
                content.append([])
                r = len(room) - 1
            room[r] -= n
            content[r].append((i, s, n))
        for c in content:
            ids, lab, dids = [], [], []
            for i, s, n in c:
                d = docs[i]
                ids += d[s:s + n]
                lab += d[s + 1:s + n] + ([d[s + n]] if s + n < len(d) else [-100])
                dids += [i] * n
            pad = L - len(ids)
            ids, lab, dids = ids + [0] * pad, lab + [-100] * pad, dids + [-1] * pad
            pos = np.zeros(L, np.int64)
            for j in range(1, L):
                pos[j] = 0 if dids[j] != dids[j - 1] else pos[j - 1] + 1
            rows.append({"input_ids": np.array(ids), "labels": np.array(lab),
                         "document_ids": np.array(dids), "position_ids": pos})
    return rows


def test_pack_rows_match_reference(pk):
    sock, docs = pk
    want = reference_pack(docs, list(range(len(docs))), 40)
    with feedclient.Loader("docs", BATCH, socket=sock, shuffle=False,
                           pipeline="pack(seq_len=32, window=40)") as loader:
        assert len(loader) <= len(want) // BATCH       # a bound: every row full
        for epoch in range(2):
            got = 0
            for b in loader:
                check_batch(b, want[got:got + BATCH])
                got += BATCH
            assert got == len(want) // BATCH * BATCH   # whole batches, to the last


def test_pack_ranks_and_resume(pk):
    sock, docs = pk
    want = reference_pack(docs, list(range(len(docs))), 40)
    world = 3
    nb = len(want) // (BATCH * world)
    for rank in range(world):
        kw = dict(socket=sock, shuffle=False, rank=rank, world_size=world,
                  pipeline="pack(seq_len=32, window=40)")
        with feedclient.Loader("docs", BATCH, **kw) as loader:
            batches = [b.copy() for b in loader]
            assert len(batches) == nb
            for k, b in enumerate(batches):
                check_batch(b, [want[(k * BATCH + i) * world + rank] for i in range(BATCH)])
            del batches
        with feedclient.Loader("docs", BATCH, **kw) as loader:
            for k, b in enumerate(loader):
                if k == 2:
                    state = loader.state_dict()
                    break
        with feedclient.Loader("docs", BATCH, **kw) as loader:
            loader.load_state_dict(state)
            for k, b in enumerate(loader, start=3):
                check_batch(b, [want[(k * BATCH + i) * world + rank] for i in range(BATCH)])
            assert k == nb - 1


def test_pack_shuffled_holds_every_token_once(pk):
    sock, docs = pk
    seen = {}
    with feedclient.Loader("docs", BATCH, socket=sock, shuffle=True, seed=3,
                           pipeline="pack(seq_len=32, pad_id=7)") as loader:
        rows = 0
        for b in loader:
            ids, dids = np.asarray(b["input_ids"]), np.asarray(b["document_ids"])
            pos = np.asarray(b["position_ids"])
            for r in range(ids.shape[0]):
                for j in range(L):
                    if dids[r, j] >= 0:
                        seen.setdefault(int(dids[r, j]), []).append(int(ids[r, j]))
                    else:
                        assert ids[r, j] == 7
            rows += ids.shape[0]
    # every document placed whole (window 1000 holds them all: one window),
    # but those of the rows cut by the last partial batch
    whole = [i for i, d in seen.items() if len(d) == len(docs[i])]
    assert len(whole) > 0.8 * len([d for d in docs if d])
    for i in whole:
        assert sorted(seen[i]) == sorted(docs[i])


def test_lengths_that_lie_fail_the_stream(feedpack, feedd_factory, tmp_path):
    """A lengths.u32 whose values disagree with the records (same size):
    the batch that reads such a document fails, naming it."""
    np.array([5, 6, 7, 1, 8, 1, 9, 9, 9, 1] * 20, dtype="<u2").tofile(tmp_path / "a.bin")
    pack(feedpack, "tokens", tmp_path / "a.bin", "--dtype", "uint16", "--doc-sep", 1,
         "-o", tmp_path / "liar")
    lens = np.fromfile(tmp_path / "liar" / "lengths.u32", "<u4")
    lens[0], lens[1] = lens[1], lens[0]        # the total stays: the open accepts it
    (tmp_path / "liar" / "lengths.u32").chmod(0o644)
    lens.tofile(tmp_path / "liar" / "lengths.u32")
    daemon = feedd_factory(tmp_path, "--dataset", f"liar={tmp_path / 'liar'}")
    with feedclient.Loader("liar", 2, socket=daemon.sock, shuffle=False,
                           pipeline="concat(seq_len=4)") as loader:
        with pytest.raises(feedclient.FeedError, match="document 0 holds 4 tokens, its "
                                                       "recorded length is 2"):
            next(iter(loader))


def test_concat_device_cpu(pk):
    """device= converts as on the GPU: input_ids int64 tensors, cu_seqlens
    one int32 tensor, the rows as the reference has them."""
    torch = pytest.importorskip("torch")
    sock, docs = pk
    want = reference_rows(docs, range(len(docs)))
    with feedclient.Loader("docs", BATCH, socket=sock, shuffle=False, device="cpu",
                           pipeline="concat(seq_len=32)") as loader:
        b = next(iter(loader))
        assert b["input_ids"].dtype == torch.int64
        assert b["cu_seqlens"].dtype == torch.int32
        check_batch({k: (v.numpy() if hasattr(v, "numpy") else v) for k, v in b.items()},
                    want[:BATCH])
