"""Resume: state_dict() / load_state_dict() continue at exactly the next
batch not yet returned, and a daemon restart is ridden out.

The reference is one uninterrupted run of 2.5 epochs (shuffled, with random
crops and flips, so both order and pixels depend on the position). A state
taken after k batches (at an epoch's start, in its middle, after its last
batch but before the iteration saw the end, between iterations) and loaded
into a new Loader gives exactly the rest of that run: same batches, same
indices, same bytes; also in a new process, and with another world size
(the ranks together continue from the same global position). A token that
does not fit the Loader is refused, naming why. feedd killed and started
again under a running Loader costs no batch and repeats none; one that
stays away past reconnect_s raises DaemonGone.
"""

import errno
import hashlib
import os
import pickle
import subprocess
import sys

import pytest

import feedclient
from conftest import N_SMALL, PYPKG

BATCH = 64
PIPE = "random_crop(size=8, pad=2) | hflip(p=0.5)"
KW = dict(seed=21, pipeline=PIPE)
PER_EPOCH = -(-N_SMALL // BATCH)     # 16
TOTAL = 2 * PER_EPOCH + 7


def digest(b):
    return (b.epoch, b.index, tuple(b.indices.tolist()),
            hashlib.sha1(b["image"].tobytes() + b["label"].tobytes()).hexdigest())


def run(loader, total):
    """Iterates loader until total batches, as a training loop does (one
    iteration per epoch); returns the digests."""
    out = []
    while len(out) < total:
        for b in loader:
            out.append(digest(b))
            if len(out) == total:
                break
    return out


@pytest.fixture(scope="module")
def reference(fc):
    with feedclient.Loader("small", BATCH, socket=fc.sock, **KW) as loader:
        return run(loader, TOTAL)


def state_after(fc, k):
    """The state of a Loader that returned k batches of the reference run:
    taken inside the iteration that returned the k-th batch, or (k at an
    epoch's end, marked by a negative k) after that iteration finished."""
    between = k <= 0
    k = abs(k)
    with feedclient.Loader("small", BATCH, socket=fc.sock, **KW) as loader:
        n = 0
        while True:
            if n == k and between:
                return loader.state_dict()
            for b in loader:
                n += 1
                if n == k and not between:
                    return loader.state_dict()


POSITIONS = [0, 1, 7, PER_EPOCH - 1, PER_EPOCH, -PER_EPOCH, PER_EPOCH + 1,
             2 * PER_EPOCH + 3]


@pytest.mark.parametrize("k", POSITIONS)
def test_resume_equals_the_uninterrupted_run(fc, reference, k):
    state = state_after(fc, k)
    assert set(state) == {"feedclient", "dataset", "epoch", "token"}
    assert state["epoch"] == abs(k) // PER_EPOCH - (k == PER_EPOCH)
    with feedclient.Loader("small", BATCH, socket=fc.sock, **KW) as loader:
        loader.load_state_dict(pickle.loads(pickle.dumps(state)))
        assert loader.state_dict() == state      # loaded, not yet iterated
        got = run(loader, TOTAL - abs(k))
    assert got == reference[abs(k):]


def test_first_iteration_after_resume_is_the_rest_of_the_epoch(fc, reference):
    with feedclient.Loader("small", BATCH, socket=fc.sock, **KW) as loader:
        loader.load_state_dict(state_after(fc, 5))
        rest = [digest(b) for b in loader]
        assert rest == reference[5:PER_EPOCH]
        assert len(loader) == PER_EPOCH
        loader.load_state_dict(state_after(fc, PER_EPOCH))      # after the last batch
        assert [b for b in loader] == []                        # nothing left of epoch 0
        assert [digest(b) for b in loader] == reference[PER_EPOCH:2 * PER_EPOCH]


def test_set_epoch_keeps_or_drops_the_resume(fc, reference):
    with feedclient.Loader("small", BATCH, socket=fc.sock, **KW) as loader:
        loader.load_state_dict(state_after(fc, PER_EPOCH + 3))
        loader.set_epoch(1)                        # the state's epoch: resume kept
        assert [digest(b) for b in loader] == reference[PER_EPOCH + 3:2 * PER_EPOCH]
        loader.load_state_dict(state_after(fc, PER_EPOCH + 3))
        loader.set_epoch(0)                        # another: a whole epoch 0
        assert [digest(b) for b in loader] == reference[:PER_EPOCH]


CHILD = r"""
import hashlib, json, pickle, sys
import feedclient
sock, path, total = sys.argv[1], sys.argv[2], int(sys.argv[3])
kw = json.loads(sys.argv[4])
with feedclient.Loader("small", 64, socket=sock, **kw) as loader:
    loader.load_state_dict(pickle.load(open(path, "rb")))
    out = []
    while len(out) < total:
        for b in loader:
            out.append([b.epoch, b.index, b.indices.tolist(), hashlib.sha1(
                b["image"].tobytes() + b["label"].tobytes()).hexdigest()])
            if len(out) == total:
                break
print(json.dumps(out))
"""


def resume_in_child(fc, state, total, tmp_path, **kw):
    import json
    path = tmp_path / f"state-{kw.get('rank', 0)}.pkl"
    path.write_bytes(pickle.dumps(state))
    env = dict(os.environ, PYTHONPATH=str(PYPKG))
    res = subprocess.run([sys.executable, "-c", CHILD, fc.sock, str(path), str(total),
                          json.dumps(dict(KW, **kw))], env=env, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr
    return [(e, i, tuple(idx), h) for e, i, idx, h in json.loads(res.stdout)]


def test_resume_in_a_new_process(fc, reference, tmp_path):
    k = PER_EPOCH + 5
    got = resume_in_child(fc, state_after(fc, k), TOTAL - k, tmp_path)
    assert got == reference[k:]


def test_resume_with_another_world_size(fc, reference, tmp_path):
    """Rank 0 and 1 of 2 continue a single-rank run from the same global
    position: together they hold the rest of its epoch, each sample with
    the same pixels (augmentation depends on seed, epoch and sample)."""
    k = 5
    state = state_after(fc, k)
    rest = [resume_in_child(fc, state, PER_EPOCH, tmp_path, rank=r, world_size=2)
            for r in range(2)]

    def samples(batches, epoch):
        return sorted(i for e, _, idx, _ in batches if e == epoch for i in idx)

    want = sorted(i for _, _, idx, _ in reference[k:PER_EPOCH] for i in idx)
    assert sorted(samples(rest[0], 0) + samples(rest[1], 0)) == want
    assert abs(len(samples(rest[0], 0)) - len(samples(rest[1], 0))) <= BATCH
    # the epoch after is a whole one, split as world 2 splits it
    nxt = samples(rest[0], 1) + samples(rest[1], 1)
    assert sorted(nxt) == list(range(N_SMALL))
    # same pixels: compare per-sample images of the resumed rank 0 with a
    # single-rank run's, for the rest of epoch 0
    with feedclient.Loader("small", BATCH, socket=fc.sock, **KW) as one:
        ref_px = {i: img.tobytes() for b in one for i, img in zip(b.indices.tolist(), b["image"])}
    with feedclient.Loader("small", BATCH, socket=fc.sock, rank=1, world_size=2, **KW) as two:
        two.load_state_dict(state)
        for b in two:
            for i, img in zip(b.indices.tolist(), b["image"]):
                assert img.tobytes() == ref_px[i]


@pytest.mark.parametrize("change, words", [
    (dict(seed=22), ["seed"]),
    (dict(pipeline="hflip(p=0.5)"), ["pipeline"]),
    (dict(shuffle=False), ["order"]),
])
def test_token_that_does_not_fit_is_refused(fc, change, words):
    state = state_after(fc, 3)
    with feedclient.Loader("small", BATCH, socket=fc.sock, **dict(KW, **change)) as loader:
        with pytest.raises(feedclient.ResumeRefused) as e:
            loader.load_state_dict(state)
        for w in words:
            assert w in str(e.value)
        assert e.value.code in (-errno.EINVAL, -errno.ESTALE)
        assert sum(1 for _ in loader) == PER_EPOCH     # as it was: epoch 0, whole


def test_state_of_another_dataset_or_not_a_state(fc):
    state = state_after(fc, 3)
    with feedclient.Loader("kinds", BATCH, socket=fc.sock) as loader:
        with pytest.raises(feedclient.InvalidArgument, match="dataset 'small'.*reads 'kinds'"):
            loader.load_state_dict(state)
        with pytest.raises(feedclient.InvalidArgument, match="not a feedclient.Loader state"):
            loader.load_state_dict({"epoch": 1})
        loader.load_state_dict({"feedclient": 1, "dataset": "kinds", "epoch": 4, "token": None})
        assert {b.epoch for b in loader} == {4}


# ---- daemon restarts ---------------------------------------------------------

@pytest.fixture
def own_daemon(fc, feedd_factory, tmp_path_factory):
    d = tmp_path_factory.mktemp("restart")
    return feedd_factory(d, "--workers", "2", "--dataset", f"small={fc.dir / 'small'}")


def test_daemon_restart_is_ridden_out(reference, own_daemon):
    with feedclient.Loader("small", BATCH, socket=own_daemon.sock, reconnect_s=120,
                           **KW) as loader:
        got = []
        while len(got) < TOTAL:
            for b in loader:
                got.append(digest(b))
                del b
                if len(got) in (5, PER_EPOCH + 9):
                    own_daemon.kill()
                    own_daemon.start()
                if len(got) == TOTAL:
                    break
    assert got == reference
    assert own_daemon.log_text().count(" ready: ") == 3


def test_daemon_gone_past_reconnect_s(own_daemon):
    with feedclient.Loader("small", BATCH, socket=own_daemon.sock, reconnect_s=0.2,
                           credits=2) as loader:
        it = iter(loader)
        next(it)
        own_daemon.kill()
        with pytest.raises(feedclient.DaemonGone) as e:
            for _ in range(4):    # batches already published (credits + 1) still come
                next(it)
    assert "feedd" in str(e.value) and "reconnect_s" in str(e.value)
    assert e.value.code == -errno.ECONNRESET


def test_daemon_restarts_with_reused_tensors(fc, own_daemon):
    """as_torch, where next() hands a slot's tensors out again: across two
    restarts every batch is still the uninterrupted stream's, and a tensor
    kept from before a restart keeps its values (a cached slot is reused
    only with the C batch it was built for)."""
    torch = pytest.importorskip("torch")

    def tdigest(b):
        return (b.epoch, b.index, tuple(b.indices.tolist()),
                hashlib.sha1(b["image"].numpy().tobytes() + b["label"].numpy().tobytes())
                .hexdigest())

    with feedclient.Loader("small", BATCH, socket=fc.sock, as_torch=True, **KW) as loader:
        want = [tdigest(b) for b, _ in zip(loader, range(PER_EPOCH))]
    kept = None
    with feedclient.Loader("small", BATCH, socket=own_daemon.sock, reconnect_s=120,
                           as_torch=True, **KW) as loader:
        got = []
        for b in loader:
            got.append(tdigest(b))
            if len(got) == 2:
                kept = (b["label"], b["label"].clone())
            del b
            if len(got) in (4, 9):
                own_daemon.kill()
                own_daemon.start()
    assert got == want
    assert torch.equal(kept[0], kept[1])
    assert own_daemon.log_text().count(" ready: ") == 3
