"""Metrics and the live view through a real feedd (issue 19, section 3).

The Prometheus text at /metrics parses with prometheus_client's own
parser and matches a known load (feedbench reading E epochs of N samples
gives feedd_samples_total == N*E for that stream's labels); no counter
goes backwards while its series is there (a closed stream's leaves after
the next scrape, its counts kept per dataset); other paths are 404; without
--metrics (or a metrics: key) feedd listens on no TCP port. The job id
(FEED_JOB_ID, else SLURM_JOB_ID, else TORCHELASTIC_RUN_ID) shows in status
and metrics; the 10 s rates fall to zero when a stream idles while the
lifetime ones do not; a group is one series with its name and its
creator's job; `feedctl top --json` shows the NVML double's
utilisation for the client's pid, and null without NVML.
"""

import json
import os
import subprocess
import time
import urllib.error
import urllib.request

import pytest

import feedclient
from promtext import families, fetch, metrics_base, pack_images, samples

N = 600          # samples of 'm'
BLOCK = 10       # records a block
SAMPLE_BYTES = 8 * 8 + 8   # image u8[8,8] + label i64
WAIT_S = 30      # longest a condition below may take to hold


@pytest.fixture(scope="module")
def mdir(feedpack, tmp_path_factory):
    """The dataset 'm' (N samples), packed once."""
    d = tmp_path_factory.mktemp("metrics")
    pack_images(feedpack, d, "m", N, 8, BLOCK)
    return d


@pytest.fixture
def served(feedd_factory, mdir, tmp_path):
    """A fresh feedd serving 'm' with metrics on a free loopback port;
    returns (daemon, base URL)."""
    daemon = feedd_factory(tmp_path, "--dataset", f"m={mdir / 'm'}", "--workers", 2,
                           "--metrics", "127.0.0.1:0")
    return daemon, metrics_base(daemon)


def scrape(base, path="/metrics"):
    return fetch(base, path, WAIT_S)


def labels(job, group=""):
    return frozenset({"user": str(os.getuid()), "dataset": "m", "job": job,
                      "group": group}.items())


def until(cond, what):
    """Polls cond() until true or WAIT_S pass; the sleep is the poll interval only."""
    deadline = time.monotonic() + WAIT_S
    while not cond():
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {WAIT_S} s")
        time.sleep(0.05)


def feedbench(feed_bin, sock, env_extra, *args):
    env = {k: v for k, v in os.environ.items()
           if k not in ("FEED_JOB_ID", "SLURM_JOB_ID", "TORCHELASTIC_RUN_ID")}
    env.update(env_extra)
    return subprocess.run([str(feed_bin / "feedbench"), "--socket", sock, "--dataset", "m",
                           *map(str, args)], env=env, capture_output=True, text=True,
                          timeout=120)


def test_metrics_match_a_known_load(served, feed_bin):
    daemon, base = served
    epochs, batch = 3, 20
    res = feedbench(feed_bin, daemon.sock, {"FEED_JOB_ID": "known-load"},
                    "--batch", batch, "--epochs", epochs, "--json")
    assert res.returncode == 0, res.stderr
    # watched through status, not scrapes: a closed stream's series shows
    # in the first scrape after it closed, then leaves
    def closed():
        st = feedclient.status(socket=daemon.sock)
        return not [s for s in st["streams"] if s["job"] == "known-load"]
    until(closed, "the stream closed")
    text = scrape(base)
    fam = families(text)
    assert fam["feedd_samples"] == "counter" and fam["feedd_credits"] == "gauge"
    assert fam["feedd_cache_hits"] == "counter" and fam["feedd_build_info"] == "gauge"
    s = samples(text)
    key = labels("known-load")
    assert s[("feedd_samples_total", key)] == N * epochs
    assert s[("feedd_batches_total", key)] == N * epochs // batch
    assert s[("feedd_bytes_total", key)] == N * epochs * SAMPLE_BYTES
    assert s[("feedd_worker_seconds_total", key)] > 0
    assert s[("feedd_reader_wait_seconds_total", key)] >= 0
    assert s[("feedd_credits", key)] == 0 and s[("feedd_credits_in_use", key)] == 0
    ds = frozenset({"dataset": "m"}.items())
    assert s[("feedd_cache_misses_total", ds)] == N // BLOCK   # each block decoded once
    assert s[("feedd_cache_hits_total", ds)] > 0
    assert s[("feedd_cache_evictions_total", ds)] == 0
    assert s[("feedd_cache_bytes", ds)] > 0
    assert s[("feedd_build_info", frozenset({"version": feedclient.__version__}.items()))] == 1
    assert s[("feedd_workers", frozenset())] == 2
    assert 0 <= s[("feedd_workers_busy", frozenset())] <= 2
    until(lambda: samples(scrape(base))[("feedd_connections", frozenset())] == 0,
          "every connection closed")


def test_metrics_counters_never_go_backwards(served, feed_bin):
    """Scraped while a slow stream runs and after it closes: every counter
    series only grows, and the closed stream's series stays with its labels."""
    daemon, base = served
    env = {k: v for k, v in os.environ.items() if k != "FEED_JOB_ID"}
    env["FEED_JOB_ID"] = "mono"
    proc = subprocess.Popen([str(feed_bin / "feedbench"), "--socket", daemon.sock,
                             "--dataset", "m", "--batch", "10", "--epochs", "2",
                             "--step-ms", "2"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    seen = []
    while proc.poll() is None:
        seen.append(samples(scrape(base)))
    assert proc.wait() == 0, proc.stderr.read()
    until(lambda: not feedclient.status(socket=daemon.sock)["streams"], "the close")
    seen.append(samples(scrape(base)))  # the first scrape since: the series is still there
    # a closed stream's series leaves after one scrape showed it: a counter
    # never goes backwards while its series is there, and the per-dataset
    # total keeps what it counted
    for before, after in zip(seen, seen[1:]):
        for k in after:
            if k[0].endswith("_total") and k in before:
                assert after[k] >= before[k], (k, before[k], after[k])
    key = ("feedd_samples_total", labels("mono"))
    assert [s[key] for s in seen if key in s][-1] == 2 * N
    ds = frozenset({"dataset": "m"}.items())
    assert seen[-1][("feedd_dataset_samples_total", ds)] == 2 * N
    assert len(seen) >= 2


def test_metrics_other_paths_404(served):
    _, base = served
    for path in ("/", "/metric", "/metrics/x"):
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(base + path, timeout=WAIT_S)
        assert e.value.code == 404, path
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(urllib.request.Request(base + "/metrics", data=b"x"),
                               timeout=WAIT_S)
    assert e.value.code == 405


def test_metrics_count_refusals_by_reason(served):
    daemon, base = served
    before = samples(scrape(base))[("feedd_refusals_total",
                                    frozenset({"reason": "not_found"}.items()))]
    with pytest.raises(feedclient.FeedError):
        feedclient.Loader("nosuch", 4, socket=daemon.sock)
    after = samples(scrape(base))[("feedd_refusals_total",
                                   frozenset({"reason": "not_found"}.items()))]
    assert after == before + 1


def tcp_listening_inodes():
    inodes = set()
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(name) as f:
            for line in list(f)[1:]:
                cols = line.split()
                if cols[3] == "0A":   # LISTEN
                    inodes.add(cols[9])
    return inodes


def socket_inodes(pid):
    out = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            out.add(link[8:-1])
    return out


def test_metrics_off_by_default(feedd_factory, mdir, tmp_path, served):
    (tmp_path / "plain").mkdir()
    plain = feedd_factory(tmp_path / "plain", "--dataset", f"m={mdir / 'm'}")
    assert "metrics: serving" not in plain.log_text()
    assert not socket_inodes(plain.proc.pid) & tcp_listening_inodes()
    # the check can see a port: the daemon with --metrics has one
    with_metrics, _ = served
    assert socket_inodes(with_metrics.proc.pid) & tcp_listening_inodes()


def mine(sock, batch):
    """This process's streams of batch size `batch`."""
    return [s for s in feedclient.status(socket=sock)["streams"]
            if s["pid"] == os.getpid() and s["batch"] == batch]


@pytest.mark.parametrize("env,job", [
    ({"FEED_JOB_ID": "feed-1", "SLURM_JOB_ID": "4242", "TORCHELASTIC_RUN_ID": "te"}, "feed-1"),
    ({"SLURM_JOB_ID": "4242", "TORCHELASTIC_RUN_ID": "te"}, "4242"),
    ({"TORCHELASTIC_RUN_ID": "te-run"}, "te-run"),
    ({}, ""),
])
def test_job_id_shows_in_status_and_metrics(served, monkeypatch, env, job):
    daemon, base = served
    for k in ("FEED_JOB_ID", "SLURM_JOB_ID", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with feedclient.Loader("m", 6, socket=daemon.sock, shuffle=False, credits=2) as loader:
        it = iter(loader)
        next(it)
        (s,) = mine(daemon.sock, 6)
        assert s["job"] == job
        live = samples(scrape(base))
        assert live[("feedd_credits", labels(job))] == 3   # credits + the one being fetched
        del it


def test_status_10s_rates_fall_to_zero_when_idle(served):
    """A stream that read and then stopped: its lifetime rate stays above
    zero while its rate over the last 10 s falls to zero."""
    daemon, _ = served
    with feedclient.Loader("m", 5, socket=daemon.sock, shuffle=False, credits=2) as loader:
        it = iter(loader)
        for _ in range(10):
            next(it)
        # a rate needs a clock that moved (the loop's, in ms) since it opened
        until(lambda: mine(daemon.sock, 5)[0]["age_ms"] > 0, "the stream's age above 0 ms")
        (s,) = mine(daemon.sock, 5)
        assert s["samples_per_s_10s"] > 0 and s["mb_per_s_10s"] > 0
        until(lambda: mine(daemon.sock, 5)[0]["samples_per_s_10s"] == 0, "the 10 s rate at zero")
        (s,) = mine(daemon.sock, 5)
        assert s["samples_per_s"] > 0 and s["mb_per_s"] > 0
        assert s["mb_per_s_10s"] == 0 and s["reader_wait_share_10s"] == 0
        del it


def top_json(feed_bin, sock, env_extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FEED_NVML", "FAKE_NVML"))}
    env.update(env_extra)
    res = subprocess.run([str(feed_bin / "feedctl"), "--socket", sock, "top", "--json",
                          "--once"], env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert len(lines) == 1
    return json.loads(lines[0])


def test_top_json_shows_the_clients_gpu_from_nvml(served, feed_bin, monkeypatch):
    daemon, _ = served
    fake = feed_bin.parent / "lib" / "libfake_nvml.so"
    assert fake.exists(), f"{fake}: not built"
    monkeypatch.setenv("FEED_JOB_ID", "top-job")
    with feedclient.Loader("m", 3, socket=daemon.sock, shuffle=False, credits=2) as loader:
        it = iter(loader)
        next(it)
        pid = os.getpid()
        view = top_json(feed_bin, daemon.sock, {
            "FEED_NVML_LIBRARY": str(fake), "FAKE_NVML_GPUS": "10,77",
            "FAKE_NVML_PROCS": f"{pid + 100000}@0,{pid}@1"})
        assert view["nvml"] is True
        (row,) = [r for r in view["streams"] if r["pid"] == pid]
        assert row["job"] == "top-job" and row["dataset"] == "m"
        assert row["gpu_util_pct"] == 77 and row["gpu_index"] == 1
        assert row["credits"] == 3 and 0 <= row["worker_share"] <= 1  # credits=2, + 1
        # NVML there, but the client runs on no GPU it lists: null
        view = top_json(feed_bin, daemon.sock, {"FEED_NVML_LIBRARY": str(fake),
                                                "FAKE_NVML_PROCS": f"{pid + 1}@0"})
        (row,) = [r for r in view["streams"] if r["pid"] == pid]
        assert row["gpu_util_pct"] is None
        # no NVML at all: null, and the reason
        view = top_json(feed_bin, daemon.sock,
                        {"FEED_NVML_LIBRARY": str(fake.parent / "no-such-nvml.so")})
        assert view["nvml"] is False and "no-such-nvml.so" in view["nvml_reason"]
        (row,) = [r for r in view["streams"] if r["pid"] == pid]
        assert row["gpu_util_pct"] is None and row["gpu_index"] is None
        del it


def test_top_text_marks_absent_gpu_with_a_dash(served, feed_bin, monkeypatch):
    daemon, _ = served
    monkeypatch.setenv("FEED_JOB_ID", "dash")   # one word: the columns split on spaces
    with feedclient.Loader("m", 4, socket=daemon.sock, shuffle=False, credits=2) as loader:
        it = iter(loader)
        next(it)
        env = dict(os.environ, FEED_NVML_LIBRARY="/nonexistent/libnvidia-ml.so.1")
        res = subprocess.run([str(feed_bin / "feedctl"), "--socket", daemon.sock, "top",
                              "--iterations", "2"], env=env, capture_output=True, text=True,
                             timeout=60)
        assert res.returncode == 0, res.stderr
        views = [ln for ln in res.stdout.splitlines() if ln.startswith("feedd ")]
        assert len(views) == 2
        head = next(ln.split() for ln in res.stdout.splitlines() if ln.startswith("JOB "))
        rows = [ln.split() for ln in res.stdout.splitlines() if ln.startswith("dash ")]
        gpu, ds = head.index("GPU%"), head.index("DATASET")
        assert len(rows) == 2 and all(r[ds] == "m" and r[gpu] == "-" for r in rows)
        del it


def test_group_series_carries_group_and_creators_job(served, monkeypatch):
    """A group is one series, labelled with its name and its creator's job;
    a member from another job adds to it rather than making its own."""
    daemon, base = served
    kw = dict(socket=daemon.sock, shuffle=False, credits=2, group="gm")
    monkeypatch.setenv("FEED_JOB_ID", "creator")
    with feedclient.Loader("m", 8, **kw) as a:
        monkeypatch.setenv("FEED_JOB_ID", "joiner")
        with feedclient.Loader("m", 8, **kw) as b:
            ia, ib = iter(a), iter(b)
            next(ia)
            next(ib)
            (g,) = [s for s in feedclient.status(socket=daemon.sock)["streams"]
                    if s["kind"] == "group" and s["group"] == "gm"]
            assert g["job"] == "creator"
            s = samples(scrape(base))
            assert s[("feedd_samples_total", labels("creator", "gm"))] >= 8
            assert ("feedd_samples_total", labels("joiner", "gm")) not in s
            del ia, ib
