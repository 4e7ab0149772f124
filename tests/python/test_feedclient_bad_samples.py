"""Bad samples (issue 20): Loader(on_error="skip", max_bad=...) through a
real feedd.

The dataset is an ImageFolder tree packed by `feedpack imagefolder`: the
image fixtures that decode (damaged_*.jpg among them: PIL decodes those)
and three that do not, though their headers are fine, so ingest takes
them: bad_garbage.jpg (a bogus marker inside a progressive scan),
bad_truncated.jpg and bad_progressive_cut.jpg (cut, no end).

- skip: every epoch holds every good sample exactly once at its own
  position, and each position whose sample fails holds the sample of the
  next position that does not (cyclically): the next good sample of the
  epoch's global order; batch.replaced lists exactly those positions, the
  batches keep their size, status counts them;
- the same bytes with 1 and 2 workers and after a resume;
- past max_bad the stream stops naming the files that failed;
- fail (the default) stops at the first bad one, naming its file (the
  path feedpack imagefolder recorded, relative to the folder).
"""

import hashlib
import shutil

import numpy as np
import pytest

import feedclient
from test_image_torchvision import IMAGES

GOOD = ["photo_00.jpg", "photo_01.jpg", "photo_02.jpg", "rgb420.jpg", "rgb444.jpg",
        "progressive.jpg", "gray.jpg", "cmyk.jpg", "small.jpg", "tiny.jpg", "rgb8.png",
        "palette.png", "damaged_scrambled.jpg", "damaged_cut_scan.jpg",
        "damaged_progressive_first_scan.jpg", "damaged_junk.jpg"]
BAD = ["bad_garbage.jpg", "bad_truncated.jpg", "bad_progressive_cut.jpg"]
PIPE = "decode | random_resized_crop(size=24) | hflip(p=0.5)"
BATCH = 5


@pytest.fixture(scope="module")
def bad_set(feedpack, feedd_factory, tmp_path_factory):
    """Two daemons (1 and 2 workers) serving 'bad'; which indices are bad
    (ImageFolder's order: class folders, then file names)."""
    from conftest import pack
    from types import SimpleNamespace
    d = tmp_path_factory.mktemp("badsamples")
    names = []
    for c, cls in enumerate(["a_class", "b_class"]):
        (d / "tree" / cls).mkdir(parents=True)
        files = [f for k, f in enumerate(GOOD) if k % 2 == c] + \
                [f for k, f in enumerate(BAD) if k % 2 == c]
        for k, f in enumerate(files):
            shutil.copy(IMAGES / f, d / "tree" / cls / f"{k:02d}_{f}")
        names += sorted(f"{cls}/{k:02d}_{f}" for k, f in enumerate(files))
    pack(feedpack, "imagefolder", d / "tree", "-o", d / "bad")
    bad = {i for i, n in enumerate(names) if any(n.endswith("_" + b) for b in BAD)}
    assert len(bad) == len(BAD)
    daemons = {w: feedd_factory(d / f"w{w}", "--workers", w, "--dataset", f"bad={d / 'bad'}")
               for w in (1, 2)
               if (d / f"w{w}").mkdir() is None}
    return SimpleNamespace(daemons=daemons, n=len(names), bad=bad, names=names, dir=d / "bad")


def test_imagefolder_records_each_path(bad_set):
    """paths.txt: sample i's path relative to the folder, on line i."""
    assert (bad_set.dir / "paths.txt").read_text().split("\n") == bad_set.names + [""]


def test_dataset_path_names_each_sample(bad_set):
    """loader.dataset is still the name, and path(i) is sample i's recorded
    path; past the end is an IndexError naming the count."""
    with loader(bad_set, 1) as ld:
        assert ld.dataset == "bad" and isinstance(ld.dataset, str)
        assert [ld.dataset.path(i) for i in range(bad_set.n)] == bad_set.names
        with pytest.raises(IndexError, match=f"sample {bad_set.n} out of range"):
            ld.dataset.path(bad_set.n)


def test_dataset_path_none_recorded(feedpack, feedd_factory, tmp_path):
    """A dataset packed without paths says so, naming the dataset."""
    from conftest import pack
    np = pytest.importorskip("numpy")
    arr = tmp_path / "x.npy"
    np.save(arr, np.arange(12, dtype=np.uint8).reshape(4, 3))
    pack(feedpack, "npy", f"x={arr}", "-o", tmp_path / "plain")
    (tmp_path / "d").mkdir()
    d = feedd_factory(tmp_path / "d", "--dataset", f"plain={tmp_path / 'plain'}")
    with feedclient.Loader("plain", 2, socket=d.sock) as ld:
        with pytest.raises(feedclient.FeedError, match="'plain': no sample paths recorded"):
            ld.dataset.path(0)


def epoch(loader):
    """One epoch: per batch (indices, replaced, digest of the images)."""
    return [(tuple(b.indices.tolist()), b.replaced,
             hashlib.sha1(b["image"].tobytes()).hexdigest(), len(b.indices)) for b in loader]


def loader(bs, workers, **kw):
    kw.setdefault("on_error", "skip")
    if kw["on_error"] == "skip":
        kw.setdefault("max_bad", 10)  # the default, 0.1% of 19 samples, is 1
    return feedclient.Loader("bad", BATCH, pipeline=PIPE, seed=11, socket=bs.daemons[workers].sock,
                             **kw)


def test_skip_epoch_holds_every_good_sample_once_plus_replacements(bs_epochs, bad_set):
    n, bad = bad_set.n, bad_set.bad
    for e in bs_epochs[1]:
        order = [i for idx, _, _, _ in e for i in idx]
        replaced = [k * BATCH + p for k, (_, rep, _, _) in enumerate(e) for p in rep]
        assert len(order) == n and all(size == BATCH for *_, size in e[:-1])
        assert len(replaced) == len(bad)
        kept = [order[p] for p in range(n) if p not in replaced]
        assert sorted(kept) == sorted(set(range(n)) - bad)   # every good one, once
        for p in replaced:                                   # the next good one
            q = next((p + k) % n for k in range(1, n) if (p + k) % n not in replaced)
            assert order[p] == order[q] and order[p] not in bad


@pytest.fixture(scope="module")
def bs_epochs(bad_set):
    """Two epochs through each daemon."""
    out = {}
    for w in (1, 2):
        with loader(bad_set, w) as ld:
            out[w] = [epoch(ld), epoch(ld)]
    return out


def test_skip_same_for_1_and_2_workers(bs_epochs):
    assert bs_epochs[1] == bs_epochs[2]
    assert bs_epochs[1][0] != bs_epochs[1][1]  # a new order each epoch


def test_skip_same_after_resume(bs_epochs, bad_set):
    with loader(bad_set, 2) as ld:
        it = iter(ld)
        for _ in range(2):
            next(it)
        state = ld.state_dict()
    with loader(bad_set, 1) as ld:
        ld.load_state_dict(state)
        assert epoch(ld) == bs_epochs[1][0][2:]


def test_skip_counted_in_status_and_logged_by_file(bad_set, bs_epochs):
    with loader(bad_set, 1) as ld:
        got = epoch(ld)
        streams = feedclient.status(bad_set.daemons[1].sock)["streams"]
    assert got == bs_epochs[1][0]
    assert sum(len(r) for _, r, _, _ in got) == len(bad_set.bad)
    # counted as published: the stream runs on into epoch 1, up to its 4
    # credits ahead, whose first batches may hold replacements too
    ahead = [len(r) for _, r, _, _ in bs_epochs[1][1]]
    assert len(streams) == 1
    assert streams[0]["replaced"] in {len(bad_set.bad) + sum(ahead[:k]) for k in range(5)}
    log = bad_set.daemons[1].log_text()
    lines = [ln for ln in log.splitlines() if "on_error skip" in ln]
    assert lines, log
    for ln in lines:  # each names a file that failed, with the decoder's words (the
        # last batch's, when several were published before the loop looked)
        assert any(f"dataset 'bad': {bad_set.names[i]}: sample {i}: field 'image': JPEG: " in ln
                   for i in bad_set.bad), ln


def test_skip_counted_in_metrics(bad_set, bs_epochs, feedd_factory, tmp_path):
    """feedd_samples_replaced_total counts the replacements published, and
    keeps them once the stream has closed."""
    from promtext import fetch, metrics_base, samples
    (tmp_path / "d").mkdir()
    d = feedd_factory(tmp_path / "d", "--workers", 1, "--dataset", f"bad={bad_set.dir}",
                      "--metrics", "127.0.0.1:0")
    base = metrics_base(d)
    with feedclient.Loader("bad", BATCH, pipeline=PIPE, seed=11, socket=d.sock,
                           on_error="skip", max_bad=10) as ld:
        assert epoch(ld) == bs_epochs[1][0]
    text = fetch(base, timeout=10)
    got = [v for (name, labels), v in samples(text).items()
           if name == "feedd_samples_replaced_total" and ("dataset", "bad") in labels]
    ahead = [len(r) for _, r, _, _ in bs_epochs[1][1]]
    assert len(got) == 1, text
    assert got[0] in {len(bad_set.bad) + sum(ahead[:k]) for k in range(5)}


def test_skip_past_max_bad_stops_naming_them(bad_set):
    with loader(bad_set, 2, max_bad=None) as ld:  # the default: 1 here
        with pytest.raises(feedclient.StreamStopped) as e:
            epoch(ld)
    msg = str(e.value)
    assert "past max_bad 1" in msg, msg
    named = [n for i, n in enumerate(bad_set.names) if i in bad_set.bad and
             f"dataset 'bad': {n}: sample {i}: field 'image': JPEG: " in msg]
    assert len(named) >= 2, msg


def test_fail_is_the_default_and_names_the_sample(bad_set):
    with loader(bad_set, 1, on_error="fail") as ld:
        with pytest.raises(feedclient.StreamStopped) as e:
            epoch(ld)
    msg = str(e.value)  # "dataset 'bad': b_class/09_bad_truncated.jpg: sample 18: ..."
    assert any(f"dataset 'bad': {bad_set.names[i]}: sample {i}: field 'image': JPEG: " in msg
               for i in bad_set.bad), msg


def test_on_error_refused_by_name(bad_set):
    with pytest.raises(feedclient.InvalidArgument, match="on_error"):
        loader(bad_set, 1, on_error="ignore")
    with pytest.raises(feedclient.InvalidArgument, match="max_bad"):
        loader(bad_set, 1, on_error="fail", max_bad=3)


def feedbench(bad_set, *args):
    import json
    import subprocess
    from conftest import BIN
    cmd = [BIN / "feedbench", "--socket", bad_set.daemons[2].sock, "--dataset", "bad",
           "--pipeline", PIPE, "--batch", BATCH, "--epochs", 2, "--json", *args]
    r = subprocess.run(list(map(str, cmd)), capture_output=True, text=True, timeout=120)
    return r, [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]


@pytest.mark.parametrize("ranks", [[], ["--jobs", 2, "--world"]])
def test_feedbench_on_error_skip_verifies(bad_set, ranks):
    """--verify checks the rule from the slot headers alone: every sample
    once outside the replaced positions, each replaced one the next good."""
    r, jobs = feedbench(bad_set, "--on-error", "skip", "--max-bad", 10, "--verify", *ranks)
    assert r.returncode == 0, r.stderr
    assert all(j["verified"] is True for j in jobs)
    assert sum(j["replaced"] for j in jobs) == 2 * len(bad_set.bad)


def test_feedbench_on_error_fail_stops(bad_set):
    r, _ = feedbench(bad_set)
    assert r.returncode == 1 and "JPEG: " in r.stderr, r.stderr


def test_group_members_share_the_policy(bad_set):
    """A group's batches are built once: a member asking another policy is
    refused naming it."""
    with loader(bad_set, 1, group="g_bad") as first:
        next(iter(first))
        with pytest.raises(feedclient.InvalidArgument, match="on_error"):
            loader(bad_set, 1, group="g_bad", on_error="fail")
        with pytest.raises(feedclient.InvalidArgument, match="max_bad"):
            loader(bad_set, 1, group="g_bad", max_bad=3)
