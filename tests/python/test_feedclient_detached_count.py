"""Held views counted (issue 31 item 7): a batch the client moves off its
slot into private memory (a view of it still held when the loop needs the
slot, feed_batch_detach) is counted by the client in its release region;
feedd shows that count, clamped, per stream in status (feedclient.status(),
`feedctl status --json`) and as the Prometheus counters
feedd_batches_detached_total (per stream labels) and
feedd_dataset_batches_detached_total (per dataset, kept after close).

Uses test_feedclient_metrics' dataset 'm' and daemon with metrics on.
"""

import gc
import json
import os
import subprocess

import feedclient
from test_feedclient_metrics import labels, mdir, samples, scrape, served, until  # noqa: F401

BATCH = 50


def mine(sock):
    """This process's stream over 'm' in feedclient.status()."""
    st = feedclient.status(socket=sock)
    got = [s for s in st["streams"] if s["dataset"] == "m" and s["pid"] == os.getpid()]
    assert len(got) == 1, st["streams"]
    return got[0]


def test_one_row_views_counted_in_status_and_metrics(served, feed_bin):  # noqa: F811
    daemon, base = served
    kept = []
    with feedclient.Loader("m", BATCH, socket=daemon.sock, credits=2, seed=1) as ld:
        for b in ld:
            kept.append(b["image"][:1])  # a 1-row view of every batch, kept
        moved = ld.detached
        assert moved >= len(kept) - 3 > 0  # all but those still on their slots
        s = mine(daemon.sock)
        assert s["detached_batches"] == moved
        res = subprocess.run([str(feed_bin / "feedctl"), "--socket", daemon.sock, "status",
                              "--json"], capture_output=True, text=True, check=True)
        js = [x for x in json.loads(res.stdout)["streams"] if x["pid"] == os.getpid()]
        assert [x["detached_batches"] for x in js] == [moved]
        ds = frozenset({"dataset": "m"}.items())
        got = samples(scrape(base))
        assert got[("feedd_batches_detached_total", labels(s["job"]))] == moved
        assert got[("feedd_dataset_batches_detached_total", ds)] == moved
    # closed (the detached copies hold the stream until they go): the
    # per-dataset total keeps the count
    del kept, b
    gc.collect()
    until(lambda: not feedclient.status(socket=daemon.sock)["streams"], "the close")
    got = samples(scrape(base))
    assert got[("feedd_dataset_batches_detached_total", ds)] == moved


def test_batches_released_in_time_count_nothing(served):  # noqa: F811
    daemon, _ = served
    with feedclient.Loader("m", BATCH, socket=daemon.sock, credits=2, seed=1) as ld:
        n = sum(1 for _ in ld)
        assert n > 0 and ld.detached == 0
        assert mine(daemon.sock)["detached_batches"] == 0
