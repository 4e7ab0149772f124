"""feedclient.Loader next to torch.utils.data.DataLoader and pip.

A Loader wrapped in a DataLoader (as frameworks do) must not have workers
read the data again: it says, in the error, to use the Loader itself in
the DataLoader's place; with worker processes, the workers' error says the
same; a Loader cannot be pickled into a spawned worker. Used directly it
stands in for a DataLoader in a training loop: len(), one epoch per
iteration, tensors. And `pip install client/python` installs a package
that imports and finds the library.
"""

import os
import pickle
import shutil
import subprocess
import sys

import pytest

import feedclient
from conftest import LIB, PYPKG

torch = pytest.importorskip("torch")
data = torch.utils.data


@pytest.mark.parametrize("kw", [{}, {"batch_size": None}, {"num_workers": 2},
                                {"batch_size": None, "num_workers": 2}])
def test_wrapped_in_a_dataloader_says_what_to_do(fc, kw):
    with feedclient.Loader("small", 10, socket=fc.sock) as loader:
        with pytest.raises(TypeError) as e:
            for _ in data.DataLoader(loader, **kw):
                pass
        msg = str(e.value)
        assert "feedclient.Loader is not a Dataset" in msg
        assert "for batch in loader" in msg and "needs no worker processes" in msg


class Wrapper(data.IterableDataset):
    """What a user might write: a Loader behind an IterableDataset."""

    def __init__(self, loader):
        self.loader = loader

    def __iter__(self):
        return iter(self.loader)


def test_iterated_in_a_worker_says_what_to_do(fc):
    with feedclient.Loader("small", 10, socket=fc.sock) as loader:
        with pytest.raises(Exception) as e:
            for _ in data.DataLoader(Wrapper(loader), batch_size=None, num_workers=2):
                pass
        msg = str(e.value)
        assert "DataLoader worker" in msg and "read the data again" in msg
        # the parent's Loader is untouched by the workers
        assert sum(1 for _ in loader) == len(loader)


def test_cannot_be_pickled(fc):
    with feedclient.Loader("small", 10, socket=fc.sock) as loader:
        with pytest.raises(TypeError, match="cannot be pickled"):
            pickle.dumps(loader)


def test_stands_in_for_a_dataloader(fc):
    """The loop a trainer writes for a DataLoader works unchanged."""
    ref = data.DataLoader(data.TensorDataset(torch.from_numpy(fc.src["small"]["image"]),
                                             torch.from_numpy(fc.src["small"]["label"])),
                          batch_size=64)
    with feedclient.Loader("small", 64, socket=fc.sock, shuffle=False, as_torch=True) as loader:
        assert len(loader) == len(ref)
        for epoch in range(2):
            n = 0
            for batch, (x, y) in zip(loader, ref):
                assert torch.equal(batch["image"], x) and torch.equal(batch["label"], y)
                assert batch["image"].float().div(255).shape == x.shape
                n += 1
            assert n == len(ref)


def test_pip_install(tmp_path):
    """pip installs the package from a copy of client/python (no compile
    step; the system's setuptools, so no network), and it imports from
    there, loading the library named by FEEDCLIENT_LIB."""
    src = tmp_path / "src"
    shutil.copytree(PYPKG, src, ignore=shutil.ignore_patterns("__pycache__", "build",
                                                              "*.egg-info"))
    target = tmp_path / "site"
    res = subprocess.run([sys.executable, "-m", "pip", "install", "--no-build-isolation",
                          "--no-deps", "--no-index", "--target", str(target), str(src)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    assert (target / "feedclient" / "loader.py").exists()
    # nothing compiled: the one .so it may hold is CMake's _fastiter, copied
    built = {p.read_bytes() for p in (LIB / "_fastiter.abi3.so",
                                       LIB.parent / "release" / "lib" / "_fastiter.abi3.so")
             if p.exists()}
    for so in target.rglob("*.so"):
        assert so.name == "_fastiter.abi3.so" and so.read_bytes() in built, so
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(PYTHONPATH=str(target), FEEDCLIENT_LIB=str(LIB / "libfeedclient.so"))
    res = subprocess.run([sys.executable, "-c", "import feedclient; print(feedclient.__file__); "
                          "print(feedclient.library_path)"], env=env, cwd="/",
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    where, lib = res.stdout.split()
    assert where == str(target / "feedclient" / "__init__.py")
    assert lib == str(LIB / "libfeedclient.so")
