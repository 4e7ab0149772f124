"""`feedctl top` as a person sees it: run on a pseudo-terminal of a chosen
size (issue 32 item 5).

One row per rank of a job (rank and pid keys in --json); names fitted to
the terminal (no line longer than it, a cut name ends in '+') or never cut
with --wide; a group's row with a line per member; stream age, epoch
progress, ETA and memory columns and a totals line; --sort orders rows and
refuses an unknown key.
"""

import fcntl
import json
import os
import re
import struct
import subprocess
import termios

import numpy as np
import pytest

import feedclient
from conftest import pack

N = 240
JOB = "train-resnet50-imagenet-on-a-long-job-name"
DATASET = "a-dataset-with-a-long-name"
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@pytest.fixture(scope="module")
def tdir(feedpack, tmp_path_factory):
    d = tmp_path_factory.mktemp("top")
    np.save(d / "image.npy", (np.arange(N * 16) % 251).astype(np.uint8).reshape(N, 4, 4))
    np.save(d / "label.npy", np.arange(N, dtype=np.int64))
    pack(feedpack, "npy", f"image={d / 'image.npy'}", f"label={d / 'label.npy'}",
         "--block-records", 10, "-o", d / "t")
    return d


@pytest.fixture
def ranks(feedd_factory, tdir, tmp_path, monkeypatch):
    """A feedd with two ranks of JOB open in this process, and a group of two."""
    daemon = feedd_factory(tmp_path, "--dataset", f"{DATASET}={tdir / 't'}", "--workers", 2)
    monkeypatch.setenv("FEED_JOB_ID", JOB)
    kw = dict(socket=daemon.sock, shuffle=False, credits=2)
    loaders = [feedclient.Loader(DATASET, 4, rank=r, world_size=2, **kw) for r in (1, 0)]
    monkeypatch.setenv("FEED_JOB_ID", "grouped")
    loaders += [feedclient.Loader(DATASET, 6, group="g", **kw) for _ in range(2)]
    its = [iter(x) for x in loaders]
    for it in its:
        next(it)
    yield daemon
    del its
    for x in loaders:
        x.close()


def on_tty(feed_bin, sock, cols, *args):
    """feedctl top --once on a pty cols wide: (exit code, what the screen got)."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, cols, 0, 0))
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    env["FEED_NVML_LIBRARY"] = "/nonexistent/libnvidia-ml.so.1"
    proc = subprocess.Popen([str(feed_bin / "feedctl"), "--socket", sock, "top", "--once",
                             *args], stdin=slave, stdout=slave, stderr=slave, env=env)
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:      # EIO: the other side closed
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    code = proc.wait(timeout=60)
    text = ANSI.sub("", out.decode()).replace("\r\n", "\n")
    return code, text


def table(text):
    """The header's columns and the rows of JOB/grouped, split on blanks."""
    lines = text.splitlines()
    head = next(ln.split() for ln in lines if ln.startswith("JOB "))
    rows = [ln.split() for ln in lines if ln.startswith(("train-", "grouped"))]
    return head, rows


def test_one_row_per_rank_with_rank_and_pid(ranks, feed_bin):
    code, text = on_tty(feed_bin, ranks.sock, 200)
    assert code == 0, text
    head, rows = table(text)
    rank, pid = head.index("RANK"), head.index("PID")
    mine = [r for r in rows if r[0] == JOB]          # 200 columns: the full name fits
    assert sorted(r[rank] for r in mine) == ["0/2", "1/2"]
    assert all(r[pid] == str(os.getpid()) for r in mine)
    assert [r[rank] for r in mine] == ["0/2", "1/2"]  # a job's ranks in order
    assert all(len(ln) <= 200 for ln in text.splitlines())
    res = subprocess.run([str(feed_bin / "feedctl"), "--socket", ranks.sock, "top", "--once",
                          "--json"], capture_output=True, text=True, timeout=60)
    view = json.loads(res.stdout)
    streams = [s for s in view["streams"] if s["job"] == JOB]
    assert sorted((s["rank"], s["world"], s["pid"]) for s in streams) == \
        [(0, 2, os.getpid()), (1, 2, os.getpid())]


def test_names_fit_a_narrow_terminal(ranks, feed_bin):
    code, text = on_tty(feed_bin, ranks.sock, 80)
    assert code == 0, text
    lines = text.splitlines()
    assert all(len(ln) <= 80 for ln in lines), [ln for ln in lines if len(ln) > 80]
    head, rows = table(text)
    assert {"JOB", "RANK", "PID", "SAMPLES/S", "WAIT%"} <= set(head)
    cut = [r[0] for r in rows if r[0].startswith("train-")]
    assert len(cut) == 2 and all(c.endswith("+") and JOB.startswith(c[:-1]) for c in cut)


def test_wide_never_cuts_a_name(ranks, feed_bin):
    code, text = on_tty(feed_bin, ranks.sock, 80, "--wide")
    assert code == 0, text
    head, rows = table(text)
    ds = head.index("DATASET")
    mine = [r for r in rows if r[0] == JOB]
    assert len(mine) == 2 and all(r[ds] == DATASET for r in mine)
    assert not any(c.endswith("+") for r in rows for c in r[:4])


def test_a_group_row_lists_its_members(ranks, feed_bin):
    code, text = on_tty(feed_bin, ranks.sock, 160)
    assert code == 0, text
    lines = text.splitlines()
    (at,) = [i for i, ln in enumerate(lines) if ln.startswith("grouped ")]
    head, _ = table(text)
    assert lines[at].split()[head.index("GROUP")] == "g"
    members = lines[at + 1:at + 3]
    assert all(re.match(rf"  member pid {os.getpid()}: waited \d+\.\d% since it joined$", m)
               for m in members), members


def test_age_epoch_eta_memory_and_totals(ranks, feed_bin):
    code, text = on_tty(feed_bin, ranks.sock, 200)
    assert code == 0, text
    head, rows = table(text)
    for col in ("AGE", "EPOCH", "DONE%", "ETA", "MEM"):
        assert col in head, col
    mine = [r for r in rows if r[0] == JOB]
    assert all(r[head.index("EPOCH")] == "1" for r in mine)   # no end: the epoch alone
    assert all(re.match(r"^\d+(\.\d)?[BKMG]$", r[head.index("MEM")]) for r in mine)
    (total,) = [ln for ln in text.splitlines() if ln.startswith("TOTAL ")]
    assert total.startswith("TOTAL 3 streams and groups, 4 readers:")
    res = subprocess.run([str(feed_bin / "feedctl"), "--socket", ranks.sock, "top", "--once",
                          "--json"], capture_output=True, text=True, timeout=60)
    view = json.loads(res.stdout)
    for s in view["streams"]:
        assert s["age_ms"] >= 0 and s["mem_bytes"] > 0 and s["epoch"] == 0
        assert 0 <= s["epoch_progress"] < 1
    assert view["totals"]["streams"] == 3 and view["totals"]["readers"] == 4
    assert view["totals"]["mem_bytes"] == sum(s["mem_bytes"] for s in view["streams"])


def test_sort_orders_rows_and_refuses_unknown_keys(ranks, feed_bin):
    code, text = on_tty(feed_bin, ranks.sock, 200, "--sort", "mem")
    assert code == 0, text
    head, rows = table(text)
    res = subprocess.run([str(feed_bin / "feedctl"), "--socket", ranks.sock, "top", "--once",
                          "--json", "--sort", "mem"], capture_output=True, text=True, timeout=60)
    mem = [s["mem_bytes"] for s in json.loads(res.stdout)["streams"]]
    assert mem == sorted(mem, reverse=True)
    assert rows[0][0] == "grouped"      # the group's region is the largest
    res = subprocess.run([str(feed_bin / "feedctl"), "--socket", ranks.sock, "top", "--once",
                          "--sort", "colour"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "--sort colour: not a key" in res.stderr
