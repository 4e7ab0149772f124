"""Metrics an SRE can alert on (issue 32 item 2), through a real feedd.

`promtool check metrics` (Debian's prometheus package) finds nothing to
say about a rich exposition (open streams, a group, a closed stream, a
dataset left out, a refused reload). process_* agree with /proc for the
daemon's pid; feedd_config_last_reload_successful and its timestamp
follow SIGHUP reloads that apply and that are refused; datasets
configured, open and left out carry the reason; readers count a group's
members; shm and slot bytes, cache capacity and the oldest worker job are
there; status carries each stream's rank and epochs; feedd's own memory
on each GPU comes from NVML (the test double, where no GPU is), and the
family is absent without NVML.
"""

import os
import shutil
import signal
import subprocess
import time

import pytest

import feedclient
from promtext import families, fetch, metrics_base, pack_images, samples

N = 120
WAIT_S = 60
CACHE_BYTES = 64 << 20


@pytest.fixture(scope="module")
def sdir(feedpack, tmp_path_factory):
    d = tmp_path_factory.mktemp("sre")
    pack_images(feedpack, d, "s", N, 4, 10)
    (d / "junk").mkdir()
    (d / "junk" / "manifest.pb").write_bytes(b"not a manifest")
    return d


def config(path, sdir, extra=()):
    uid = os.getuid()
    lines = ["datasets:",
             f"  - {{name: s, path: {sdir / 's'}, allow_users: ['{uid}']}}",
             f"  - {{name: gone, path: {sdir / 'no-such-dir'}, allow_users: ['{uid}']}}",
             f"  - {{name: junk, path: {sdir / 'junk'}, allow_users: ['{uid}']}}",
             *extra]
    path.write_text("\n".join(lines) + "\n")


@pytest.fixture
def served(feedd_factory, sdir, tmp_path):
    cfg = tmp_path / "feedd.yaml"
    config(cfg, sdir)
    daemon = feedd_factory(tmp_path, "--config", cfg, "--workers", 2, "--metrics",
                           "127.0.0.1:0", "--cache-bytes", CACHE_BYTES)
    return daemon, metrics_base(daemon), cfg


def scrape(base):
    return fetch(base, timeout=WAIT_S)


def one(s, name, **labels):
    return s[(name, frozenset(labels.items()))]


def until(cond, what):
    deadline = time.monotonic() + WAIT_S
    while not cond():
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {WAIT_S} s")
        time.sleep(0.05)


def promtool():
    path = shutil.which("promtool")
    assert path, "promtool not found: Debian's prometheus package (scripts/setup.sh) has it"
    return path


def test_promtool_finds_nothing_to_lint(served, monkeypatch):
    daemon, base, _ = served
    monkeypatch.setenv("FEED_JOB_ID", "lint")
    with feedclient.Loader("s", 4, socket=daemon.sock, shuffle=False) as gone:
        next(iter(gone))
    kw = dict(socket=daemon.sock, shuffle=False, credits=2, group="lint-g")
    with feedclient.Loader("s", 4, **kw) as a, feedclient.Loader("s", 4, **kw) as b, \
            feedclient.Loader("s", 8, socket=daemon.sock, rank=1, world_size=2) as c:
        its = [iter(x) for x in (a, b, c)]
        for it in its:
            next(it)
        text = scrape(base)
        del its
    res = subprocess.run([promtool(), "check", "metrics"], input=text, capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 0 and not res.stdout.strip() and not res.stderr.strip(), \
        res.stdout + res.stderr
    fam = families(text)
    for name in ("process_cpu_seconds", "feedd_dataset_samples"):
        assert fam[name] == "counter", name
    for name in ("process_resident_memory_bytes", "process_open_fds",
                 "process_start_time_seconds", "feedd_config_last_reload_successful",
                 "feedd_config_last_reload_success_timestamp_seconds", "feedd_readers",
                 "feedd_shm_bytes", "feedd_slot_bytes", "feedd_cache_capacity_bytes",
                 "feedd_worker_oldest_job_seconds", "feedd_datasets_configured",
                 "feedd_datasets_open", "feedd_dataset_left_out", "feedd_memory_bytes"):
        assert fam[name] == "gauge", name


def test_process_metrics_agree_with_proc(served):
    daemon, base, _ = served
    pid = daemon.proc.pid
    s = samples(scrape(base))
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    assert abs(one(s, "process_open_fds") - fds) <= 4   # a scrape's own socket comes and goes
    with open(f"/proc/{pid}/stat") as f:
        start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/stat") as f:
        btime = int(next(ln for ln in f if ln.startswith("btime")).split()[1])
    assert one(s, "process_start_time_seconds") == pytest.approx(
        btime + start_ticks / os.sysconf("SC_CLK_TCK"), abs=0.02)
    page = os.sysconf("SC_PAGE_SIZE")
    with open(f"/proc/{pid}/statm") as f:
        rss = int(f.read().split()[1]) * page
    assert 0.5 * rss < one(s, "process_resident_memory_bytes") < 2 * rss
    assert one(s, "process_cpu_seconds_total") > 0
    assert one(s, "process_max_fds") == \
        int(open(f"/proc/{pid}/limits").read().split("Max open files")[1].split()[0])
    assert 0 < one(s, "feedd_memory_bytes") <= one(s, "process_resident_memory_bytes")


def test_datasets_left_out_by_reason(served):
    _, base, _ = served
    s = samples(scrape(base))
    assert one(s, "feedd_datasets_configured") == 3
    assert one(s, "feedd_datasets_open") == 1
    assert one(s, "feedd_dataset_left_out", dataset="gone", reason="missing") == 1
    assert one(s, "feedd_dataset_left_out", dataset="junk", reason="invalid") == 1
    assert ("feedd_dataset_left_out", frozenset({"dataset": "s", "reason": "missing"}.items())) \
        not in s
    assert one(s, "feedd_datasets_left_out", reason="missing") == 1
    assert one(s, "feedd_datasets_left_out", reason="invalid") == 1
    assert one(s, "feedd_datasets_left_out", reason="pending") == 0
    assert one(s, "feedd_cache_capacity_bytes") == CACHE_BYTES
    assert one(s, "feedd_worker_oldest_job_seconds") >= 0


def test_reload_outcome_and_time(served, sdir):
    daemon, base, cfg = served
    s = samples(scrape(base))
    assert one(s, "feedd_config_last_reload_successful") == 1
    started = one(s, "feedd_config_last_reload_success_timestamp_seconds")
    assert abs(started - time.time()) < 600
    daemon.proc.send_signal(signal.SIGHUP)   # the same file: applied
    until(lambda: one(samples(scrape(base)), "feedd_config_reloads_total") == 1, "the reload")
    s = samples(scrape(base))
    assert one(s, "feedd_config_last_reload_successful") == 1
    applied = one(s, "feedd_config_last_reload_success_timestamp_seconds")
    assert applied > started
    cfg.write_text("datasets: [\n")   # broken: refused, the old config stays
    daemon.proc.send_signal(signal.SIGHUP)
    until(lambda: one(samples(scrape(base)), "feedd_config_reloads_total") == 2, "the reload")
    s = samples(scrape(base))
    assert one(s, "feedd_config_last_reload_successful") == 0
    assert one(s, "feedd_config_reload_failures_total") == 1
    assert one(s, "feedd_config_last_reload_success_timestamp_seconds") == applied
    assert one(s, "feedd_datasets_open") == 1
    config(cfg, sdir)
    daemon.proc.send_signal(signal.SIGHUP)
    until(lambda: one(samples(scrape(base)), "feedd_config_reloads_total") == 3, "the reload")
    assert one(samples(scrape(base)), "feedd_config_last_reload_successful") == 1


def test_readers_shm_and_slots_per_series(served, monkeypatch):
    daemon, base, _ = served
    monkeypatch.setenv("FEED_JOB_ID", "readers")
    kw = dict(socket=daemon.sock, shuffle=False, credits=2, group="rg")
    labels = {"user": str(os.getuid()), "dataset": "s", "job": "readers", "group": "rg"}
    with feedclient.Loader("s", 4, **kw) as a, feedclient.Loader("s", 4, **kw) as b:
        ia, ib = iter(a), iter(b)
        next(ia)
        next(ib)
        s = samples(scrape(base))
        assert one(s, "feedd_readers", **labels) == 2
        assert one(s, "feedd_shm_bytes", **labels) > 0
        slot = one(s, "feedd_slot_bytes", **labels)
        assert slot >= 4 * (16 + 8)   # 4 samples of u8[4,4] + i64
        (g,) = [x for x in feedclient.status(socket=daemon.sock)["streams"]
                if x["group"] == "rg"]
        assert g["slot_bytes"] == slot and g["members"] == 2
        del ia, ib


def test_status_carries_rank_and_epochs(served, feed_bin):
    daemon, _, _ = served
    with feedclient.Loader("s", 5, socket=daemon.sock, rank=1, world_size=3,
                           drop_last=True) as loader:
        it = iter(loader)
        next(it)
        (st,) = [x for x in feedclient.status(socket=daemon.sock)["streams"]
                 if x["pid"] == os.getpid() and x["batch"] == 5]
        assert (st["rank"], st["world"], st["epochs"]) == (1, 3, 0)   # 0: no end
        assert st["batches_per_epoch"] == N // 3 // 5
        assert st["slot_bytes"] > 0 and st["start_epoch"] == 0
        del it
    bench = subprocess.Popen([str(feed_bin / "feedbench"), "--socket", daemon.sock,
                              "--dataset", "s", "--batch", "6", "--epochs", "3",
                              "--step-ms", "20"], stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE)
    try:
        def mine():
            return [x for x in feedclient.status(socket=daemon.sock)["streams"]
                    if x["pid"] == bench.pid]
        until(mine, "feedbench's stream")
        (st,) = mine()
        assert st["epochs"] == 3 and st["batches_per_epoch"] == N // 6
    finally:
        bench.kill()
        bench.wait()


def gpu_feedd(feedd_factory, sdir, tmp_path, monkeypatch, lib, **env):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("FEED_NVML_LIBRARY", str(lib))
    daemon = feedd_factory(tmp_path, "--dataset", f"s={sdir / 's'}", "--metrics",
                           "127.0.0.1:0")
    return samples(scrape(metrics_base(daemon)))


def test_gpu_memory_per_gpu_from_nvml(feedd_factory, sdir, tmp_path, monkeypatch, feed_bin):
    fake = feed_bin.parent / "lib" / "libfake_nvml.so"
    assert fake.exists(), f"{fake}: not built"
    s = gpu_feedd(feedd_factory, sdir, tmp_path, monkeypatch, fake,
                  FAKE_NVML_GPUS="10,20,30", FAKE_NVML_PROCS="self@1,4242@2")
    assert one(s, "feedd_gpu_memory_bytes", gpu="0") == 0
    assert one(s, "feedd_gpu_memory_bytes", gpu="1") == 1 << 30   # feedd's own
    assert one(s, "feedd_gpu_memory_bytes", gpu="2") == 0         # another process's
    (tmp_path / "none").mkdir()
    s = gpu_feedd(feedd_factory, sdir, tmp_path / "none", monkeypatch,
                  tmp_path / "no-such-libnvidia-ml.so.1")
    assert not [k for k in s if k[0] == "feedd_gpu_memory_bytes"]


def test_oldest_worker_job_age(feedd_factory, sdir, tmp_path, monkeypatch, feed_bin):
    """A batch job held at its start (the test seam FEEDD_TEST_STALL, as a
    read that never returns would hold it) shows as the oldest job, its
    age growing; it falls to 0 once the workers are idle again."""
    stall = tmp_path / "stall"
    stall.touch()
    monkeypatch.setenv("FEEDD_TEST_STALL", str(stall))
    daemon = feedd_factory(tmp_path, "--dataset", f"s={sdir / 's'}", "--workers", 1,
                           "--metrics", "127.0.0.1:0")
    base = metrics_base(daemon)
    bench = subprocess.Popen([str(feed_bin / "feedbench"), "--socket", daemon.sock,
                              "--dataset", "s", "--batch", "4", "--epochs", "1"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        until(lambda: one(samples(scrape(base)), "feedd_worker_oldest_job_seconds") >= 1.0,
              "a job held for a second")
        s = samples(scrape(base))
        assert one(s, "feedd_workers_busy") == 1
    finally:
        stall.unlink()
    assert bench.wait(timeout=WAIT_S) == 0, bench.stderr.read()
    until(lambda: one(samples(scrape(base)), "feedd_worker_oldest_job_seconds") == 0,
          "every worker idle")
