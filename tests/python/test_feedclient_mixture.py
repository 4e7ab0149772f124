"""Mixtures through a real feedd: Loader({"web": 0.6, "code": 0.3,
"books": 0.1}, B) is one stream over three datasets.

Each dataset's one field `x` holds 1000 * (source + 1) + sample, so every
row says where it came from. Checked: the shares of rows per source follow
the weights exactly up to rounding at every prefix, and each batch's
`source` field names the row's source; each source keeps its own epochs
(a permutation of its samples, then the next one, reshuffled), Mosaic's
repeat and choose; the epoch ends after the sources' rows together (or
samples_per_epoch); two Loaders agree; 8 ranks of a 3-source mixture are 8
streams (under the default max_streams of 16, where 24 per-source streams
were refused) whose rows together are the world-1 epoch's; resume with the
same weights is exact, with other weights continues every source from its
position under the new shares, with another batch size from the same
global position; a source whose schema differs is refused naming it and
the field.
"""

import collections
from types import SimpleNamespace

import numpy as np
import pytest

import feedclient
from conftest import pack

SIZES = {"web": 50, "code": 30, "books": 20}
W3 = {"web": 0.6, "code": 0.3, "books": 0.1}


@pytest.fixture(scope="module")
def mx(feedpack, feedd_factory, tmp_path_factory):
    """feedd serving web, code, books (x: int64) and odd (x: int32)."""
    d = tmp_path_factory.mktemp("mixture")
    args = []
    for s, (name, n) in enumerate(SIZES.items()):
        np.save(d / f"{name}.npy", 1000 * (s + 1) + np.arange(n, dtype=np.int64))
        pack(feedpack, "npy", f"x={d / f'{name}.npy'}", "--block-records", 7, "-o", d / name)
        args += ["--dataset", f"{name}={d / name}"]
    np.save(d / "odd.npy", np.arange(10, dtype=np.int32))
    pack(feedpack, "npy", f"x={d / 'odd.npy'}", "-o", d / "odd")
    args += ["--dataset", f"odd={d / 'odd'}"]
    (d / "run").mkdir()
    daemon = feedd_factory(d / "run", "--workers", 2, "--metrics", "127.0.0.1:0", *args)
    return SimpleNamespace(sock=daemon.sock, daemon=daemon)


def rows(loader, batches=None):
    """(source, x) of every row of one epoch (or of `batches` batches)."""
    out = []
    for k, b in enumerate(loader):
        src, x = b["source"], b["x"]
        assert src.dtype == np.int32 and len(src) == len(x)
        out += list(zip(src.tolist(), x.tolist()))
        if batches is not None and k + 1 == batches:
            break
    return out


def by_source(rs):
    per = collections.defaultdict(list)
    for s, x in rs:
        per[s].append(x)
    return per


def test_mixture_shares_and_source_field(mx):
    with feedclient.Loader(W3, 10, socket=mx.sock, seed=3) as loader:
        assert len(loader) == 10           # 50 + 30 + 20 rows an epoch
        rs = rows(loader)
    assert len(rs) == 100
    names = list(W3)
    counts = [0, 0, 0]
    for n, (s, x) in enumerate(rs, 1):
        assert x // 1000 == s + 1, "the source field names the row's dataset"
        counts[s] += 1
        for k, w in enumerate(W3.values()):
            assert abs(counts[k] - w * n) < 1, f"{names[k]} after {n} rows: {counts[k]}"
    assert counts == [60, 30, 10]


def test_mixture_counts_under_its_own_label(mx):
    """A mixture's samples count under its label in the per-dataset totals,
    as in its stream's series and status, not under its first source."""
    from promtext import fetch, metrics_base, samples

    def total(name):
        return samples(fetch(base)).get(
            ("feedd_dataset_samples_total", frozenset({"dataset": name}.items())), 0)

    base = metrics_base(mx.daemon)
    label = "+".join(W3)              # read before the stream opens: it publishes ahead
    web_before, before = total("web"), total(label)
    with feedclient.Loader(W3, 10, socket=mx.sock, seed=4) as loader:
        assert label in {s["dataset"] for s in feedclient.status(socket=mx.sock)["streams"]}
        assert len(rows(loader)) == 100
    assert total(label) - before >= 100   # published: what was read, and what was built ahead
    assert total("web") == web_before


def test_mixture_each_source_keeps_its_own_epochs(mx):
    with feedclient.Loader(W3, 10, socket=mx.sock, seed=3) as loader:
        per = by_source(rows(loader))
    web = [x - 1000 for x in per[0]]
    assert sorted(web[:50]) == list(range(50))     # its epoch: every sample once
    assert len(set(web[50:])) == 10                 # then its next epoch began
    assert web[50:] != web[:10], "the next epoch is reshuffled"
    assert sorted(x - 2000 for x in per[1]) == list(range(30))
    assert len(set(per[2])) == 10


def test_mixture_repeat_choose_and_samples_per_epoch(mx):
    # shares 1:8 of 45 rows: web's 5 (one epoch of choose=5), books' 40 (one of repeat=2)
    srcs = {"web": feedclient.Source(1, choose=5), "books": feedclient.Source(8, repeat=2)}
    with feedclient.Loader(srcs, 5, socket=mx.sock, seed=1) as loader:
        assert len(loader) == 9            # 5 + 2 * 20 rows
        per = by_source(rows(loader))
    assert len(per[0]) == 5 and len(set(per[0])) == 5
    assert sorted(collections.Counter(per[1]).values()) == [2] * 20  # each sample twice
    with feedclient.Loader(srcs, 5, socket=mx.sock, seed=1, samples_per_epoch=450) as loader:
        web = by_source(rows(loader))[0]
    chosen = [frozenset(web[i:i + 5]) for i in range(0, 50, 5)]
    assert all(len(c) == 5 for c in chosen)  # each epoch of web: 5 distinct samples
    assert len(set(chosen)) > 1, "each epoch chooses anew"
    with feedclient.Loader(W3, 10, socket=mx.sock, samples_per_epoch=40) as loader:
        assert len(loader) == 4
        assert len(rows(loader)) == 40


def test_mixture_is_deterministic(mx):
    with feedclient.Loader(W3, 7, socket=mx.sock, seed=9) as a, \
            feedclient.Loader(W3, 7, socket=mx.sock, seed=9) as b:
        assert rows(a) == rows(b)


def test_mixture_ranks_are_one_stream_each(mx):
    """8 ranks of a 3-source mixture open 8 streams, not 24 (the default
    max_streams is 16), and their rows are the world-1 epoch's."""
    with feedclient.Loader(W3, 5, socket=mx.sock, seed=4, samples_per_epoch=80) as one:
        want = sorted(rows(one))
    loaders = [feedclient.Loader(W3, 5, socket=mx.sock, seed=4, samples_per_epoch=80,
                                 rank=r, world_size=8) for r in range(8)]
    try:
        got = sorted(r for ld in loaders for r in rows(ld))
    finally:
        for ld in loaders:
            ld.close()
    assert got == want


def state_after(mx, weights, batch, k, **kw):
    """(rows read, state) of a Loader over weights after k batches."""
    with feedclient.Loader(weights, batch, socket=mx.sock, seed=5, **kw) as ld:
        return rows(ld, k), ld.state_dict()


def test_mixture_resume_same_weights_is_exact(mx):
    with feedclient.Loader(W3, 10, socket=mx.sock, seed=5) as ld:
        want = rows(ld)
    head, state = state_after(mx, W3, 10, 3)
    with feedclient.Loader(W3, 10, socket=mx.sock, seed=5) as ld:
        ld.load_state_dict(state)
        assert head + rows(ld) == want


def test_mixture_resume_with_other_weights(mx):
    """Each source goes on from its own position; the rows after the
    resume follow the new shares."""
    ref = {}
    for s, name in enumerate(W3):  # each source's own sequence, alone
        with feedclient.Loader({name: 1}, 10, socket=mx.sock, seed=5, samples_per_epoch=200) as ld:
            ref[s] = [x for _, x in rows(ld)]
    head, state = state_after(mx, W3, 10, 3)
    new = {"web": 0.2, "code": 0.3, "books": 0.5}
    with feedclient.Loader(new, 10, socket=mx.sock, seed=5) as ld:
        ld.load_state_dict(state)
        tail = rows(ld)
    assert len(head) + len(tail) == 100
    before, after = by_source(head), by_source(tail)
    for s in range(3):
        seq = before[s] + after[s]
        assert seq == ref[s][:len(seq)], f"source {s} continues from its position"
    counts = [0, 0, 0]
    for n, (s, _) in enumerate(tail, 1):
        counts[s] += 1
        for k, w in enumerate(new.values()):
            assert abs(counts[k] - w * n) < 1


def test_resume_with_another_batch_size(mx):
    """A state taken after 2 batches of 10 (position 20) continues with
    batches of 4 (dividing 20) and of 3 (not dividing it), from the same
    global position: for a dataset and for a mixture."""
    for ds in ("web", W3):
        with feedclient.Loader(ds, 10, socket=mx.sock, seed=5) as ld:
            want = [x for b in ld for x in b["x"].tolist()]
        with feedclient.Loader(ds, 10, socket=mx.sock, seed=5) as ld:
            it = iter(ld)
            head = [x for _ in range(2) for x in next(it)["x"].tolist()]
            state = ld.state_dict()
        for batch in (4, 3):
            with feedclient.Loader(ds, batch, socket=mx.sock, seed=5) as ld:
                ld.load_state_dict(state)
                tail = [x for b in ld for x in b["x"].tolist()]
            assert head + tail == want, f"{ds}: batch {batch}"


def test_mixture_schema_mismatch_refused(mx):
    with pytest.raises(feedclient.InvalidArgument) as e:
        feedclient.Loader({"web": 1, "odd": 1}, 4, socket=mx.sock)
    msg = str(e.value)
    assert "mixture (web, odd)" in msg and "source 'odd'" in msg, msg
    assert "'x'" in msg and "dtype" in msg, msg


def test_mixture_bad_arguments_refused(mx):
    with pytest.raises(feedclient.InvalidArgument, match="weight"):
        feedclient.Loader({"web": -1}, 4, socket=mx.sock)
    with pytest.raises(feedclient.InvalidArgument, match="1 to 8 sources"):
        feedclient.Loader({}, 4, socket=mx.sock)
    with pytest.raises(feedclient.UnknownDataset, match="nope"):
        feedclient.Loader({"web": 1, "nope": 1}, 4, socket=mx.sock)
    with pytest.raises(feedclient.InvalidArgument, match="samples_per_epoch"):
        feedclient.Loader("web", 4, socket=mx.sock, samples_per_epoch=10)


def test_mixture_resume_on_another_world_size(mx):
    """A mixture's state taken by one rank after 3 batches of 10 (row 30)
    is continued by 2 ranks with batches of 5: together they read the
    rest of the epoch's rows, as the world size changes for any dataset."""
    with feedclient.Loader(W3, 10, socket=mx.sock, seed=5) as ld:
        want = rows(ld)
    head, state = state_after(mx, W3, 10, 3)
    assert head == want[:30]
    got = []
    for r in range(2):
        with feedclient.Loader(W3, 5, socket=mx.sock, seed=5, rank=r, world_size=2) as ld:
            ld.load_state_dict(state)
            got += rows(ld)
    assert sorted(got) == sorted(want[30:])
