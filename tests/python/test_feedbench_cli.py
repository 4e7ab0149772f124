"""feedbench against a real feedd on a private socket.

What scripts and the README's figures rely on: --json prints one object per
job with the counts and a verdict; --verify checks that every epoch held
every sample exactly once (also split over ranks with --jobs K --world);
--no-touch counts the same batches without reading them; cpu_s and
own_p50_us measure the reader, --step-ms excluded from the latter;
a bad command line exits 2 with one "feedbench: ..." line naming the
problem; a dataset feedd does not serve exits 1 naming it.
"""

import json
import subprocess
import time

import numpy as np
import pytest

from conftest import built

N = 1000


@pytest.fixture(scope="module")
def daemon(feed_bin, feedpack, tmp_path_factory):
    """feedd --workers 2 serving N samples as 'small'; yields the socket."""
    d = tmp_path_factory.mktemp("feedbench")
    np.save(d / "image.npy", (np.arange(N * 64) % 251).astype(np.uint8).reshape(N, 8, 8, 1))
    np.save(d / "label.npy", np.arange(N, dtype=np.int64))
    res = subprocess.run([feedpack, "npy", f"image={d / 'image.npy'}",
                          f"label={d / 'label.npy'}", "-o", str(d / "small")],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    sock = str(d / "feedd.sock")
    log = open(d / "feedd.log", "w")
    proc = subprocess.Popen([built(feed_bin, "feedd"), "--socket", sock,
                             "--dataset", f"small={d / 'small'}", "--workers", "2"],
                            stdout=log, stderr=log)
    feedctl = built(feed_bin, "feedctl")
    # Waits until feedd answers, or exits, or 20 s pass; the sleep is the
    # poll interval only.
    deadline = time.monotonic() + 20
    while subprocess.run([feedctl, "--socket", sock, "status"],
                         capture_output=True).returncode != 0:
        assert proc.poll() is None, (d / "feedd.log").read_text()
        if time.monotonic() > deadline:
            pytest.fail("feedd did not answer within 20 s")
        time.sleep(0.05)
    yield sock
    proc.terminate()
    assert proc.wait(timeout=30) == 0
    log.close()


def bench(feed_bin, sock, *args):
    return subprocess.run([built(feed_bin, "feedbench"), "--socket", sock, *map(str, args)],
                          capture_output=True, text=True, timeout=120)


def test_json_verified_epochs(feed_bin, daemon):
    res = bench(feed_bin, daemon, "--dataset", "small", "--batch", 64, "--epochs", 2,
                "--pipeline", "hflip(p=0.5)", "--verify", "--json")
    assert res.returncode == 0, res.stderr
    rows = [json.loads(line) for line in res.stdout.splitlines()]
    assert len(rows) == 1
    r = rows[0]
    assert r["verified"] is True
    # 1000 = 15 x 64 + 40: the last batch holds 40, as DataLoader's does
    assert (r["samples"], r["epochs"], r["batches"]) == (2 * 1000, 2, 2 * 16)
    assert r["bytes"] == 2 * 1000 * (64 + 8)
    assert r["dataset"] == "small" and r["batch"] == 64
    assert r["samples_per_s"] > 0 and len(r["checksum"]) == 16
    # the reader's CPU time over the timed window: some, and no more than one
    # thread can spend in it (the window ends at the last batch, cpu_s just after)
    assert 0 < r["cpu_s"] <= r["wall_s"] + 0.05


def test_pad_last_fills_the_last_batch(feed_bin, daemon):
    res = bench(feed_bin, daemon, "--dataset", "small", "--batch", 64, "--epochs", 2,
                "--pad-last", "--verify", "--json")
    assert res.returncode == 0, res.stderr
    r = json.loads(res.stdout)
    # with --pad-last it wraps around to 64 (static shapes)
    assert (r["samples"], r["batches"], r["verified"]) == (2 * 16 * 64, 2 * 16, True)


def test_same_spec_same_checksum(feed_bin, daemon):
    args = ("--dataset", "small", "--batch", 100, "--seed", 7, "--json")
    sums = {json.loads(bench(feed_bin, daemon, *args).stdout)["checksum"] for _ in range(2)}
    other = json.loads(bench(feed_bin, daemon, *args[:-1], "--seed", 8, "--json").stdout)
    assert len(sums) == 1
    assert other["checksum"] not in sums


def test_no_touch_counts_the_same_but_reads_no_byte(feed_bin, daemon):
    args = ("--dataset", "small", "--batch", 100, "--verify", "--json", "--no-touch")
    a = json.loads(bench(feed_bin, daemon, *args, "--seed", 7).stdout)
    b = json.loads(bench(feed_bin, daemon, *args, "--seed", 8).stdout)
    touched = json.loads(bench(feed_bin, daemon, *args[:-1], "--seed", 7).stdout)
    assert a["verified"] is True
    assert (a["samples"], a["batches"], a["bytes"]) == \
        (touched["samples"], touched["batches"], touched["bytes"])
    # other bytes (another seed's order), same sum: none of them was read
    assert a["checksum"] == b["checksum"] != touched["checksum"]


def test_own_time_leaves_out_the_step(feed_bin, daemon):
    res = bench(feed_bin, daemon, "--dataset", "small", "--batch", 100, "--step-ms", 3,
                "--json")
    assert res.returncode == 0, res.stderr
    r = json.loads(res.stdout)
    # the window holds 9 steps of 3 ms; a batch's own time holds none of them
    assert r["wall_s"] >= 9 * 0.003
    assert 0 < r["own_p50_us"] < 3000


def test_group_jobs_share_one_stream(feed_bin, daemon):
    res = bench(feed_bin, daemon, "--dataset", "small", "--batch", 50, "--jobs", 3,
                "--group", "bench", "--epochs", 2, "--verify", "--json")
    assert res.returncode == 0, res.stderr
    rows = [json.loads(line) for line in res.stdout.splitlines()]
    assert len(rows) == 3
    # every job verified what it read: whole epochs (a late joiner's first
    # one is partial), and the same bytes as the others where they overlap
    assert all(r["verified"] and r["epochs"] == 2 for r in rows), rows


def test_ranks_split_the_epoch(feed_bin, daemon):
    res = bench(feed_bin, daemon, "--dataset", "small", "--batch", 50, "--jobs", 2, "--world",
                "--verify", "--json")
    assert res.returncode == 0, res.stderr
    rows = sorted((json.loads(line) for line in res.stdout.splitlines()),
                  key=lambda r: r["rank"])
    assert [(r["rank"], r["world"], r["verified"]) for r in rows] == [(0, 2, True), (1, 2, True)]
    assert [r["samples"] for r in rows] == [N // 2, N // 2]


@pytest.mark.parametrize("extra", [[], ["--pad-last"]])
def test_node_order_ranks_split_the_epoch(feed_bin, daemon, extra):
    # one node of 3 ranks: node order's partition verified like the others
    res = bench(feed_bin, daemon, "--dataset", "small", "--batch", 50, "--jobs", 3, "--world",
                "--order", "node", "--node-deal", "fixed", "--epochs", 2, "--verify", "--json",
                *extra)
    assert res.returncode == 0, res.stderr
    rows = [json.loads(line) for line in res.stdout.splitlines()]
    assert sorted((r["rank"], r["world"], r["verified"]) for r in rows) == \
        [(0, 3, True), (1, 3, True), (2, 3, True)]


def test_node_order_one_node_of_several(feed_bin, daemon):
    # node 1 of 2 with 2 ranks: ranks 2 and 3 of 4, half the dataset
    res = bench(feed_bin, daemon, "--dataset", "small", "--batch", 50, "--jobs", 2, "--world",
                "--order", "node", "--nodes", 2, "--node", 1, "--json")
    assert res.returncode == 0, res.stderr
    rows = [json.loads(line) for line in res.stdout.splitlines()]
    assert sorted((r["rank"], r["world"], r["samples"]) for r in rows) == \
        [(2, 4, N // 4), (3, 4, N // 4)]


@pytest.mark.parametrize("args, words", [
    (["--dataset", "small", "--bogus"], ["unknown option", "--bogus"]),
    (["--batch", "4"], ["--dataset NAME is required"]),
    (["--dataset", "small", "--order", "random"], ["--order 'random'"]),
    (["--dataset", "small", "--world"], ["--world", "at least 2"]),
    (["--dataset", "small", "--wake", "--credits", "3"], ["--wake", "--credits 3"]),
    (["--dataset", "small", "--step-ms", "-1"], ["--step-ms '-1'"]),
    (["--dataset", "small", "--group", ""], ["--group ''", "1 to 63 bytes"]),
    (["--dataset", "small", "--group", "g", "--jobs", "2", "--world"], ["--group", "--world"]),
    (["--dataset", "small", "--order", "node", "--nodes", "2", "--node", "2"], ["--nodes 2 --node 2", "K < M"]),
    (["--dataset", "small", "--order", "node", "--nodes", "2", "--verify"],
     ["--verify", "--nodes 2"]),
    (["--dataset", "small", "--order", "node", "--node-deal", "x"], ["--node-deal 'x'"]),
])
def test_bad_command_line(feed_bin, daemon, args, words):
    res = bench(feed_bin, daemon, *args)
    assert res.returncode == 2, (res.returncode, res.stderr)
    first = res.stderr.splitlines()[0]
    assert first.startswith("feedbench: "), res.stderr
    for w in words:
        assert w in first, (w, first)
    assert res.stdout == ""


def test_unknown_dataset_named(feed_bin, daemon):
    res = bench(feed_bin, daemon, "--dataset", "nope", "--json")
    assert res.returncode == 1, (res.returncode, res.stderr)
    assert "nope" in res.stderr
