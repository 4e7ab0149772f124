"""Shared pytest fixtures for tests/python.

ctest runs these with FEED_BIN (the build's bin directory) and FEED_SRC (the
source tree) in the environment; run by hand, they fall back to
<source>/build/bin.
"""

import os
import pathlib

import pytest

SRC = pathlib.Path(os.environ.get("FEED_SRC", pathlib.Path(__file__).resolve().parents[2]))
BIN = pathlib.Path(os.environ.get("FEED_BIN", SRC / "build" / "bin"))


@pytest.fixture(scope="session")
def feed_bin():
    """The build's bin directory."""
    return BIN


def built(feed_bin, name):
    """Path (str) of the build's program `name`; fails the test, naming the
    path, when it is not there."""
    path = feed_bin / name
    if not os.access(path, os.X_OK):
        pytest.fail(f"{path}: not built (set FEED_BIN to the build's bin directory)")
    return str(path)


@pytest.fixture(scope="session")
def feedpack(feed_bin):
    """Path (str) of the feedpack binary."""
    return built(feed_bin, "feedpack")


@pytest.fixture(scope="session")
def augment_probe(feed_bin):
    """Path (str) of check_augment, whose probe modes (--probe, --pixel,
    --pixel-params, --decode, --rrc: tests/unit/check_augment.c) run core's
    pipeline ops on what a test hands them, for comparison with torchvision."""
    return built(feed_bin, "check_augment")


@pytest.fixture(scope="session")
def convert_probe(feed_bin):
    """Path (str) of check_convert, whose --probe mode runs the conversions'
    CPU twin (tests/unit/check_convert.c)."""
    return built(feed_bin, "check_convert")


# ---- feedd and the Python client -------------------------------------------

import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

LIB = pathlib.Path(os.environ.get("FEED_LIB", SRC / "build" / "lib"))
PYPKG = SRC / "client" / "python"

# The client package under test is this tree's, over this build's library
# (ctest's FEED_LIB wins over whatever the caller's environment says).
sys.path.insert(0, str(PYPKG))
if "FEED_LIB" in os.environ or "FEEDCLIENT_LIB" not in os.environ:
    os.environ["FEEDCLIENT_LIB"] = str(LIB / "libfeedclient.so")

READY_S = 60  # longest a daemon may take to answer (sanitizer builds are slow)


def _die_with_parent():
    """In the child before exec: SIGKILL when pytest dies first (an abort
    skips the fixtures' teardown), as feedd_harness.c does for C tests."""
    import ctypes
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


class FeedDaemon:
    """A feedd process on a private socket, its log in a file beside it."""

    def __init__(self, feed_bin, directory, args):
        self.bin = feed_bin
        self.dir = pathlib.Path(directory)
        self.sock = str(self.dir / "feedd.sock")
        self.log = self.dir / "feedd.log"
        self.args = list(map(str, args))
        self.proc = None

    def start(self):
        """Starts it and returns once it answers on its socket."""
        with open(self.log, "a") as log:
            self.proc = subprocess.Popen([str(self.bin / "feedd"), "--socket", self.sock,
                                          *self.args], stdout=log, stderr=log,
                                         preexec_fn=_die_with_parent)
        # Polls until feedd answers, or exits, or READY_S pass; the sleep is
        # the poll interval only.
        deadline = time.monotonic() + READY_S
        while subprocess.run([str(self.bin / "feedctl"), "--socket", self.sock, "status"],
                             capture_output=True).returncode != 0:
            if self.proc.poll() is not None:
                pytest.fail(f"feedd exited with {self.proc.returncode}:\n{self.log_text()}")
            if time.monotonic() > deadline:
                pytest.fail(f"feedd did not answer within {READY_S} s:\n{self.log_text()}")
            time.sleep(0.02)
        return self

    def stop(self):
        """SIGTERM; asserts a clean exit."""
        if self.proc is None:
            return
        proc, self.proc = self.proc, None
        if proc.poll() is None:
            proc.terminate()
        code = proc.wait(timeout=60)
        assert code == 0, f"feedd exited with {code}:\n{self.log_text()}"

    def kill(self):
        """SIGKILL, as a crash would; returns once it is gone."""
        proc, self.proc = self.proc, None
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)

    def log_text(self):
        return self.log.read_text() if self.log.exists() else ""


def sigstop(proc):
    """Stops proc (SIGSTOP) and returns once every thread of it is stopped:
    kill() returns before a thread on another CPU has stopped, which could
    still publish a batch. Raises after 20 s."""
    proc.send_signal(signal.SIGSTOP)
    deadline = time.monotonic() + 20
    task = pathlib.Path(f"/proc/{proc.pid}/task")
    while time.monotonic() < deadline:
        states = []
        for t in task.iterdir():
            try:
                states.append((t / "stat").read_text().rsplit(")", 1)[1].split()[0])
            except (OSError, IndexError):
                pass  # a thread that just ended
        if states and all(st in ("T", "t") for st in states):
            return
        time.sleep(0.001)
    raise AssertionError(f"pid {proc.pid} did not stop within 20 s of SIGSTOP")


@pytest.fixture(scope="session")
def feedd_factory(feed_bin):
    """start(directory, *args): a running FeedDaemon (stopped, cleanly, at the
    end of the session unless the test stopped it)."""
    started = []

    def start(directory, *args):
        d = FeedDaemon(feed_bin, directory, args).start()
        started.append(d)
        return d

    yield start
    for d in started:
        if d.proc is not None and d.proc.poll() is None:
            d.stop()



def pack(feedpack, *args):
    """Runs feedpack with args; fails the test with its stderr if it fails."""
    res = subprocess.run([feedpack, *map(str, args)], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, f"feedpack {' '.join(map(str, args))}: {res.stderr}"


def flip_block_byte(shard, block):
    """Flips one bit in the middle of a block's compressed bytes (the footer
    index, read from the shard's last 64 bytes, stays intact)."""
    import struct
    data = open(shard, "rb").read()
    index_offset, nblocks = struct.unpack_from("<QQ", data, len(data) - 64)
    assert block < nblocks
    off, _, _, comp, _ = struct.unpack_from("<QQIII", data, index_offset + 40 * block)
    with open(shard, "r+b") as f:
        f.seek(off + comp // 2)
        b = f.read(1)
        f.seek(off + comp // 2)
        f.write(bytes([b[0] ^ 0x10]))


N_SMALL = 1000       # samples of 'small'
CORRUPT_BLOCK = 3    # the block of 'corrupt' with a flipped bit (10 records a block)


@pytest.fixture(scope="session")
def fc(feedpack, feedd_factory, tmp_path_factory):
    """One feedd (2 workers) serving the client tests' datasets, and their
    sources. Returns a namespace: sock, daemon, dir, src (dataset name ->
    field name -> what was packed: an array, or a list for variable fields).

    small: image u8[8,8,1] (a pattern of the index), label i64 = index;
      N_SMALL samples, 10 records a block.
    kinds: one field of every npy dtype and several shapes, 37 samples.
    tokens: u16 sequences of 16, 50 samples.
    files: variable u8 'data' and str 'name' fields (an empty file too),
      2 records a block.
    corrupt: 'small' with one bit flipped in block CORRUPT_BLOCK."""
    import numpy as np
    from types import SimpleNamespace

    d = tmp_path_factory.mktemp("fc")
    src = {}
    n = N_SMALL
    image = ((np.arange(n * 64) + np.arange(n * 64) // 64 * 7) % 251).astype(np.uint8)
    src["small"] = {"image": image.reshape(n, 8, 8, 1), "label": np.arange(n, dtype=np.int64)}
    for k, a in src["small"].items():
        np.save(d / f"small_{k}.npy", a)
    for name in ("small", "corrupt"):
        pack(feedpack, "npy", *(f"{k}={d / f'small_{k}.npy'}" for k in src["small"]),
             "--block-records", 10, "-o", d / name)
    flip_block_byte(d / "corrupt" / "shard-00000.fsh", CORRUPT_BLOCK)

    m = 37
    rng = np.random.default_rng(5)
    kinds = {
        "img": rng.integers(0, 256, (m, 5, 4, 3), dtype=np.uint8),
        "i8": np.arange(m, dtype=np.int8) - 18,
        "u16": np.arange(m * 2, dtype="<u2").reshape(m, 2) * 1000,
        "i16": -np.arange(m, dtype="<i2"),
        "u32": np.arange(m, dtype="<u4") * 100000,
        "i32": np.arange(m * 6, dtype="<i4").reshape(m, 2, 3) - 50,
        "u64": np.arange(m, dtype="<u8") << np.uint64(40),
        "i64": -(np.arange(m, dtype="<i8") << 35),
        "f16": np.linspace(-2, 2, m).astype("<f2"),
        "f32": rng.standard_normal((m, 3)).astype("<f4"),
        "f64": np.linspace(0, 1, m),
        "mask": np.arange(m) % 3 == 0,
    }
    src["kinds"] = kinds
    for k, a in kinds.items():
        np.save(d / f"kinds_{k}.npy", a)
    pack(feedpack, "npy", *(f"{k}={d / f'kinds_{k}.npy'}" for k in kinds), "-o", d / "kinds")

    toks = (np.arange(50 * 16 + 5) * 37 % 65521).astype("<u2")
    toks.tofile(d / "tokens.bin")
    pack(feedpack, "tokens", d / "tokens.bin", "--dtype", "uint16", "--seq-len", 16,
         "-o", d / "tokens")
    src["tokens"] = {"tokens": toks[:50 * 16].reshape(50, 16)}

    files = {f"f{i:02d}": bytes(rng.integers(0, 256, i * 13 % 40, dtype=np.uint8))
             for i in range(9)}
    files["dir/ü.txt"] = "grüße".encode()
    (d / "files_in" / "dir").mkdir(parents=True)
    for rel, content in files.items():
        (d / "files_in" / rel).write_bytes(content)
    pack(feedpack, "files", d / "files_in", "--block-records", 2, "-o", d / "files")
    order = sorted(files, key=lambda k: k.encode())  # feedpack's order: bytewise paths
    src["files"] = {"data": [np.frombuffer(files[k], np.uint8) for k in order],
                    "name": order}

    names = ["small", "kinds", "tokens", "files", "corrupt"]
    args = [a for k in names for a in ("--dataset", f"{k}={d / k}")]
    daemon = feedd_factory(d, "--workers", 2, *args)
    return SimpleNamespace(sock=daemon.sock, daemon=daemon, dir=d, src=src)
