"""Bad samples under eval (issue 31 item 8): with Loader(eval=True,
on_error="skip") a sample that fails is dropped, never replaced, so an
eval epoch holds every good sample exactly once and no sample twice; each
batch is shorter by what it dropped and says which (batch.dropped, from
the C API's feed_batch_dropped/feed_batch_dropped_sample), and the epoch's
warning counts them. Train mode keeps replacing (test_feedclient_bad_samples).

The dataset is test_feedclient_bad_samples' damaged-JPEG ImageFolder tree.
"""

import warnings

import pytest

import feedclient
from test_feedclient_bad_samples import BATCH, PIPE, bad_set  # noqa: F401 (fixture)


def eval_epoch(bs, workers, batch):
    """One eval epoch: per batch (indices, dropped, rows of the image field)."""
    with feedclient.Loader("bad", batch, pipeline=PIPE, eval=True, on_error="skip", max_bad=10,
                           socket=bs.daemons[workers].sock) as ld:
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            out = [(b.indices.tolist(), b.dropped, b["image"].shape[0]) for b in ld]
    return out, [w for w in got if issubclass(w.category, feedclient.SkippedSamplesWarning)]


@pytest.mark.parametrize("workers", [1, 2])
def test_eval_skip_drops_bad_samples_never_duplicates(bad_set, workers):  # noqa: F811
    """Every good sample once, none twice, the bad ones named as dropped by
    the batches that lost them, each batch that much shorter."""
    n, bad = bad_set.n, bad_set.bad
    batches, warned = eval_epoch(bad_set, workers, BATCH)
    seen = [i for idx, _, _ in batches for i in idx]
    assert len(seen) == len(set(seen)), "a sample delivered twice"
    assert sorted(seen) == sorted(set(range(n)) - bad)
    dropped = [i for _, d, _ in batches for i in d]
    assert sorted(dropped) == sorted(bad)
    assert len(batches) == (n + BATCH - 1) // BATCH
    for k, (idx, d, rows) in enumerate(batches):
        laid_out = list(range(k * BATCH, min(n, (k + 1) * BATCH)))  # eval: sequential
        assert rows == len(idx) == len(laid_out) - len(d)
        assert idx == [i for i in laid_out if i not in d] and set(d) <= set(laid_out)
    assert len(warned) == 1
    msg = str(warned[0].message)
    assert f"{len(bad)} samples of epoch 0" in msg and "dropped (eval)" in msg
    for i in bad:
        assert bad_set.names[i] in msg


def test_eval_skip_batch_of_only_bad_samples_is_empty(bad_set):  # noqa: F811
    """batch_size=1: a bad sample's batch comes with no sample at all and
    names it; the epoch still counts one batch per position."""
    batches, _ = eval_epoch(bad_set, 1, 1)
    assert len(batches) == bad_set.n
    for i, (idx, d, rows) in enumerate(batches):
        if i in bad_set.bad:
            assert idx == [] and d == (i,) and rows == 0
        else:
            assert idx == [i] and d == () and rows == 1


def test_train_skip_still_replaces(bad_set):  # noqa: F811
    """Outside eval nothing is dropped: the batches keep their size."""
    with feedclient.Loader("bad", BATCH, pipeline=PIPE, seed=3, on_error="skip", max_bad=10,
                           socket=bad_set.daemons[1].sock) as ld:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = [(len(b.indices), b.dropped, len(b.replaced)) for b in ld]
    assert all(d == () for _, d, _ in got)
    assert sum(r for *_, r in got) == len(bad_set.bad)
    assert sum(k for k, _, _ in got) == bad_set.n


def test_eval_skip_empty_batches_convert_on_the_cpu(bad_set):  # noqa: F811
    """device="cpu": a batch whose only sample was dropped converts to
    empty tensors of the right shape, and names what it dropped."""
    torch = pytest.importorskip("torch")
    with feedclient.Loader("bad", 1, pipeline=PIPE, eval=True, on_error="skip", max_bad=10,
                           device="cpu", socket=bad_set.daemons[1].sock) as ld:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = [(b.dropped, tuple(b["image"].shape), b["image"].dtype) for b in ld]
    assert len(got) == bad_set.n
    for i, (d, shape, dtype) in enumerate(got):
        assert dtype == torch.float32
        assert (d, shape) == (((i,), (0, 3, 24, 24)) if i in bad_set.bad else
                              ((), (1, 3, 24, 24)))
