"""Loader(credits=k) counts what the user holds (issue 21): a plain
`for batch in loader` works with credits=1 (the loop variable holds the
previous batch while the next is fetched), a prefetcher that holds k
batches works with credits=k, batches kept beyond that are detached from
their slots (issue 31), and where they cannot be (a group), the
exhaustion error says how many batches are held, the likely cause and the
fix.
"""

import collections

import pytest

import feedclient
from conftest import N_SMALL


def test_plain_for_loop_works_with_one_credit(fc):
    seen = []
    with feedclient.Loader("small", 10, socket=fc.sock, shuffle=False, credits=1) as loader:
        assert loader.credits == 1
        for batch in loader:           # `batch` still holds the previous one at each next()
            x = batch["image"]
            seen.extend(batch["label"].tolist())
        del batch, x
    assert seen == list(range(N_SMALL))


def test_plain_for_loop_as_torch_with_one_credit(fc):
    pytest.importorskip("torch")
    n = 0
    with feedclient.Loader("small", 50, socket=fc.sock, shuffle=True, credits=1,
                           as_torch=True) as loader:
        for batch in loader:
            x, y = batch["image"], batch["label"]
            n += len(y) if x.shape[0] == len(y) else 0
    assert n == N_SMALL


@pytest.mark.parametrize("k", [1, 2, 3])
def test_prefetcher_holding_k_works_with_k_credits(fc, k):
    """A look-ahead of k batches (as a CUDA prefetcher keeps them) holds k
    while it fetches the next."""
    got = []
    with feedclient.Loader("small", 25, socket=fc.sock, shuffle=False, credits=k) as loader:
        it = iter(loader)
        ahead = collections.deque(next(it) for _ in range(k))
        for nxt in it:                  # fetched while k batches are held
            got.append(ahead.popleft().index)
            ahead.append(nxt)
            del nxt
        got.extend(b.index for b in ahead)
    assert got == list(range(N_SMALL // 25))


def test_keeping_batches_detaches_instead_of_exhausting(fc):
    """Issue 31: batches kept past credits are detached from their slots
    (their bytes stay, in private memory) rather than exhausting them."""
    with feedclient.Loader("small", 10, socket=fc.sock, shuffle=False, credits=2) as loader:
        it = iter(loader)
        kept = [next(it) for _ in range(5)]
        assert [b.index for b in kept] == [0, 1, 2, 3, 4]
        assert [int(b["label"][0]) for b in kept] == [0, 10, 20, 30, 40]
        assert loader.detached == 2


def test_exhaustion_names_held_cause_and_fix(fc, monkeypatch):
    """Where batches cannot be detached (a group member's copy-on-write
    view, pinned memory, device slots: feed_batch_detach refuses, as the
    stand-in here), holding more than credits raises, naming cause and fix."""
    import feedclient.loader
    monkeypatch.setattr(feedclient.loader._Stream, "detach_oldest", lambda self: False)
    with feedclient.Loader("small", 10, socket=fc.sock, shuffle=False, credits=2) as loader:
        kept = []
        it = iter(loader)
        kept.append(next(it))
        kept.append(next(it))
        with pytest.raises(feedclient.CreditsExhausted) as e:
            kept.append(next(it)) or next(it)   # the third is fetched, the fourth is not
        assert e.value.held == 3
        msg = str(e.value)
        for words in ("credits=2", "3 batches of this stream are still alive",
                      "in a list or in an autograd graph", "torch.no_grad()",
                      "batch.copy()", "credits=3 or more"):
            assert words in msg, (words, msg)
        kept.clear()
        assert next(it).index == 3     # dropping them is the fix
