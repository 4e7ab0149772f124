"""Every failure a user can meet, as the exception they can catch, with
the daemon's words: no daemon (the socket named), unknown dataset (the
served ones listed), access refused (as nobody), bad pipeline (op and key
named), bad options, a corrupt shard (shard and block named), the library
not found (every path tried listed). A Loader used after close(), from two
threads at once, or in a forked child raises instead of crashing; a forked
child never releases its parent's slots.
"""

import ctypes.util
import errno
import gc
import os
import pathlib
import pickle
import shutil
import signal
import socket as sk
import subprocess
import sys
import tempfile
import threading
import time

import pytest

import feedclient
from conftest import sigstop, CORRUPT_BLOCK, LIB, PYPKG

NOBODY = 65534


def test_errors_share_one_base_and_carry_the_code(fc):
    with pytest.raises(feedclient.FeedError) as e:
        feedclient.Loader("nope", 4, socket=fc.sock)
    err = e.value
    assert isinstance(err, feedclient.UnknownDataset)
    assert err.code == -errno.ENOENT and err.reason and err.detail in str(err)
    again = pickle.loads(pickle.dumps(err))
    assert type(again) is type(err) and str(again) == str(err) and again.code == err.code
    for cls in (feedclient.DaemonNotRunning, feedclient.UnknownDataset, feedclient.AccessDenied,
                feedclient.BadPipeline, feedclient.CreditsExhausted, feedclient.DaemonGone,
                feedclient.StreamStopped, feedclient.LoaderClosed, feedclient.ConcurrentUse,
                feedclient.ResumeRefused, feedclient.LimitReached, feedclient.InvalidArgument,
                feedclient.LibraryNotFound):
        assert issubclass(cls, feedclient.FeedError)
    assert issubclass(feedclient.InvalidArgument, ValueError)


def test_daemon_not_running_names_the_socket(tmp_path):
    path = str(tmp_path / "no.sock")
    for call in (lambda: feedclient.Loader("x", 4, socket=path),
                 lambda: feedclient.datasets(path)):
        with pytest.raises(feedclient.DaemonNotRunning) as e:
            call()
        assert path in str(e.value) and "No such file" in str(e.value)
        assert "is feedd running" in str(e.value)
        assert e.value.socket == path
    # a socket file nobody listens on (a daemon that died)
    stale = tmp_path / "stale.sock"
    s = sk.socket(sk.AF_UNIX, sk.SOCK_SEQPACKET)
    s.bind(str(stale))
    s.close()
    with pytest.raises(feedclient.DaemonNotRunning) as e:
        feedclient.datasets(str(stale))
    assert str(stale) in str(e.value) and "refused" in str(e.value)


def test_default_socket_from_the_environment(fc, monkeypatch):
    monkeypatch.setenv("FEEDD_SOCKET", fc.sock)
    assert "small" in [d.name for d in feedclient.datasets()]
    monkeypatch.setenv("FEEDD_SOCKET", "/nonexistent/feedd.sock")
    with pytest.raises(feedclient.DaemonNotRunning, match="/nonexistent/feedd.sock"):
        feedclient.Loader("small", 4)


def test_unknown_dataset_lists_the_served_ones(fc):
    with pytest.raises(feedclient.UnknownDataset) as e:
        feedclient.Loader("nope", 4, socket=fc.sock)
    msg = str(e.value)
    assert "'nope'" in msg and "no such dataset" in msg
    assert "feedd serves 'small', 'kinds'" in msg


@pytest.mark.parametrize("pipeline, words", [
    ("hflip(q=1)", ["op 1 'hflip'", "unknown key 'q'"]),
    ("center_crop(size=4) | bogus(x=1)", ["op 2 'bogus'", "unknown op"]),
    ("hflip(p=2)", ["'hflip'", "key 'p'", "2 not in [0, 1]"]),
    ("nosuch", ["no pipeline named 'nosuch'"]),
])
def test_bad_pipeline_names_op_and_key(fc, pipeline, words):
    with pytest.raises(feedclient.BadPipeline) as e:
        feedclient.Loader("small", 4, socket=fc.sock, pipeline=pipeline)
    for w in words:
        assert w in str(e.value), (w, str(e.value))
    assert isinstance(e.value, ValueError) and e.value.code == -errno.EINVAL


@pytest.mark.parametrize("kw, words", [
    (dict(batch_size=0), ["batch_size: 0 is out of range"]),
    (dict(credits=0), ["credits: 0"]),
    (dict(credits=1000), ["credits=1000", "1..63", "max_credits is 64"]),
    (dict(rank=2, world_size=2), ["rank=2 must be below world_size=2"]),
    (dict(window=4, shuffle=False), ["window", "shuffle=True"]),
    (dict(drop_last=True, pad_last=True), ["drop_last and pad_last"]),
    (dict(eval=True, pad_last=True), ["pad_last", "eval"]),
    (dict(seed=-1), ["seed: -1"]),
    (dict(batch_size=2.5), ["batch_size: an int is required"]),
    (dict(reconnect_s=-1), ["reconnect_s"]),
    (dict(dataset=""), ["dataset"]),
])
def test_bad_options_are_named(fc, kw, words):
    args = {"dataset": "small", "batch_size": 4, "socket": fc.sock, **kw}
    with pytest.raises(feedclient.InvalidArgument) as e:
        feedclient.Loader(args.pop("dataset"), args.pop("batch_size"), **args)
    for w in words:
        assert w in str(e.value), (w, str(e.value))


def test_corrupt_shard_stops_the_stream_naming_shard_and_block(fc):
    src = fc.src["small"]["label"]
    with feedclient.Loader("corrupt", 10, socket=fc.sock, shuffle=False) as loader:
        it = iter(loader)
        for i in range(CORRUPT_BLOCK):   # the blocks before it are served
            assert next(it)["label"].tolist() == src[10 * i:10 * i + 10].tolist()
        with pytest.raises(feedclient.StreamStopped) as e:
            next(it)
        msg = str(e.value)
        assert "shard-00000.fsh" in msg and f"block {CORRUPT_BLOCK}" in msg, msg
        assert e.value.code == -errno.EBADMSG
        with pytest.raises(feedclient.StreamStopped):   # and it stays stopped
            next(it)
    with feedclient.Loader("small", 10, socket=fc.sock) as loader:   # others go on
        assert sum(1 for _ in loader) == len(loader)


# ---- access ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def guarded(fc, feedd_factory):
    """A feedd whose socket nobody may reach (group nogroup), serving 'secret'
    to root only and 'open' to everyone; in a directory of mode 0755."""
    d = tempfile.mkdtemp(prefix="feedclient-access-")
    os.chmod(d, 0o755)
    cfg = os.path.join(d, "feedd.yaml")
    with open(cfg, "w") as f:
        f.write(f"socket_group: nogroup\ndatasets:\n"
                f"  - name: secret\n    path: {fc.dir / 'small'}\n    allow_users: [root]\n"
                f"  - name: open\n    path: {fc.dir / 'small'}\n    allow_users: [\"*\"]\n")
    daemon = feedd_factory(d, "--config", cfg)
    yield daemon
    daemon.stop()
    shutil.rmtree(d)


AS_NOBODY = r"""
import json, sys
import feedclient
sock = sys.argv[1]
out = {"listed": [d.name for d in feedclient.datasets(sock)]}
try:
    feedclient.Loader("secret", 4, socket=sock)
except feedclient.AccessDenied as e:
    out["refused"] = [str(e), e.code]
with feedclient.Loader("open", 4, socket=sock) as loader:
    out["open"] = len(next(iter(loader))["label"])
print(json.dumps(out))
"""


def test_access_denied_with_the_daemons_words(guarded):
    import json
    if os.geteuid() != 0:
        with pytest.raises(feedclient.AccessDenied) as e:
            feedclient.Loader("secret", 4, socket=guarded.sock)
        assert "'secret'" in str(e.value) and "not allowed" in str(e.value)
        return

    def become_nobody():
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)

    env = {"PATH": os.environ.get("PATH", "/usr/bin"), "PYTHONPATH": str(PYPKG),
           "FEEDCLIENT_LIB": os.environ["FEEDCLIENT_LIB"], "HOME": "/"}
    for k in ("LD_PRELOAD", "ASAN_OPTIONS", "UBSAN_OPTIONS"):
        if k in os.environ:
            env[k] = os.environ[k]
    res = subprocess.run([sys.executable, "-c", AS_NOBODY, guarded.sock], env=env, cwd="/",
                         preexec_fn=become_nobody, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["listed"] == ["open"]
    msg, code = out["refused"]
    assert "dataset 'secret': user 65534" in msg and "not allowed" in msg, msg
    assert code == -errno.EACCES
    assert out["open"] == 4


# ---- use after close, from two threads, after fork -------------------------------

def test_use_after_close_raises(fc):
    loader = feedclient.Loader("small", 10, socket=fc.sock)
    it = iter(loader)
    batch = next(it)
    loader.close()
    for call in (lambda: next(it), lambda: iter(loader), lambda: len(loader),
                 loader.state_dict, lambda: loader.set_epoch(1),
                 lambda: loader.load_state_dict({"feedclient": 1, "dataset": "small",
                                                 "epoch": 0, "token": None}),
                 lambda: loader.fields, lambda: loader.__enter__()):
        with pytest.raises(feedclient.LoaderClosed, match="'small' is closed"):
            call()
    loader.close()
    assert batch["label"].tolist() == batch.indices.tolist()   # still valid


@pytest.fixture
def own_daemon(fc, feedd_factory, tmp_path_factory):
    d = tmp_path_factory.mktemp("threads")
    daemon = feedd_factory(d, "--workers", "2", "--dataset", f"small={fc.dir / 'small'}")
    yield daemon
    if daemon.proc is not None:
        daemon.proc.send_signal(signal.SIGCONT)


def test_two_threads_at_once_raise(own_daemon):
    """Thread A waits in next() for a batch that cannot come (feedd is
    stopped with SIGSTOP); meanwhile the main thread's calls raise."""
    loader = feedclient.Loader("small", 10, socket=own_daemon.sock, shuffle=False, credits=2)
    it = iter(loader)
    sigstop(own_daemon.proc)
    stop = threading.Event()
    taken = []
    failures = []

    def consume():
        try:
            while not stop.is_set():
                taken.append(next(it).index)
        except BaseException as e:   # noqa: B902 - reported below
            failures.append(e)

    a = threading.Thread(target=consume)
    a.start()
    # A drains what was built, then waits in next(), holding the Loader:
    # poll until a call of ours finds it so (bounded; the wait is A's).
    deadline = time.monotonic() + 60
    while True:
        try:
            loader.state_dict()
        except feedclient.ConcurrentUse as e:
            assert "two threads at once" in str(e)
            break
        assert time.monotonic() < deadline, "thread A never held the Loader"
        time.sleep(0.001)
    with pytest.raises(feedclient.ConcurrentUse):
        next(it)
    with pytest.raises(feedclient.ConcurrentUse):
        iter(loader)
    with pytest.raises(feedclient.ConcurrentUse):
        loader.close()
    stop.set()
    own_daemon.proc.send_signal(signal.SIGCONT)
    a.join(timeout=60)
    assert not a.is_alive() and failures == []
    assert taken == list(range(len(taken)))
    assert next(it).index == len(taken)        # usable again from here
    loader.close()


def test_forked_child_cannot_use_it_nor_release_the_parents_slots(fc):
    loader = feedclient.Loader("small", 10, socket=fc.sock, shuffle=False, credits=1)
    it = iter(loader)
    first = next(it)
    batch = next(it)   # credits=1: the second held exhausts the credits
    pid = os.fork()
    if pid == 0:   # the child: report through the exit code only
        code = 0
        try:
            next(it)
            code = 1
        except feedclient.FeedError as e:
            code = 0 if "forked" in str(e) else 2
        except BaseException:
            code = 3
        del batch, first
        gc.collect()
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    # the parent's batches are still held: the next detaches the oldest of
    # them from its slot (issue 31) rather than finding a slot the child freed
    assert next(it).index == 2
    assert loader.detached == 1
    assert batch["label"].tolist() == list(range(10, 20))
    assert first["label"].tolist() == list(range(10))
    del batch
    assert next(it).index == 3
    del first
    loader.close()


# ---- the library ----------------------------------------------------------------

def import_feedclient(pkg_parent, **env):
    e = {k: v for k, v in os.environ.items() if k != "FEEDCLIENT_LIB"}
    e.update(PYTHONPATH=str(pkg_parent), **env)
    return subprocess.run([sys.executable, "-c",
                           "import feedclient; print(feedclient.library_path); "
                           "print(feedclient.library_version)"],
                          env=e, capture_output=True, text=True, timeout=120, cwd="/")


def test_library_lookup_lists_every_path_tried(tmp_path):
    shutil.copytree(PYPKG / "feedclient", tmp_path / "feedclient")   # not in a checkout
    res = import_feedclient(tmp_path, FEEDCLIENT_LIB="/nonexistent/libfeedclient.so")
    system = ctypes.util.find_library("feedclient")
    if system:
        # A node with the .deb (or any system-wide install): the system
        # loader, last in the order, finds that copy once the others fail.
        assert res.returncode == 0, res.stderr
        assert pathlib.Path(res.stdout.split()[0]).name.startswith("libfeedclient.so")
        assert not res.stdout.split()[0].startswith("/nonexistent")
    else:
        assert res.returncode != 0
        assert "LibraryNotFound" in res.stderr
        assert "/nonexistent/libfeedclient.so ($FEEDCLIENT_LIB)" in res.stderr
        assert "not in a feedd source checkout" in res.stderr
        assert "(system loader)" in res.stderr
        assert "set FEEDCLIENT_LIB" in res.stderr
    # a directory holding the library works, and so does the file itself
    for value in (str(LIB), str(LIB / "libfeedclient.so")):
        res = import_feedclient(tmp_path, FEEDCLIENT_LIB=value)
        assert res.returncode == 0, res.stderr
        assert res.stdout.split()[0] == str(LIB / "libfeedclient.so")


def test_library_from_the_build_tree(tmp_path):
    built = PYPKG.parents[1] / "build" / "lib" / "libfeedclient.so"
    if not built.exists():
        pytest.skip(f"{built}: no build there")
    res = import_feedclient(PYPKG)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split()[0] == str(built)
