"""test_install_wheel.py: `pip install client/python` in a fresh virtual
environment gives a platform wheel carrying libfeedclient (and libfeedpack,
which feedclient.pack writes through), and the package
finds that copy with FEEDCLIENT_LIB unset, outside the source tree; and a
package with no library anywhere says where it looked and how to fix it.

The wheel carries a release library (NDEBUG, no lock checks): from a
checkout, pip takes build/release/lib (the release twin of a checked
build/) or a release build/lib, and refuses a checked one.

Run by ctest (python_wheel) with FEED_SRC, FEED_LIB (the checked build the
tests run), FEED_RELEASE_LIB (its release twin) and FEED_VERSION set; offline: the
venv sees Debian's numpy and setuptools (--system-site-packages) and pip
runs with --no-build-isolation --no-deps --no-index.
"""
import ctypes.util
import os
import pathlib
import shutil
import subprocess

import pytest

SRC = pathlib.Path(os.environ["FEED_SRC"])
LIB = pathlib.Path(os.environ["FEED_LIB"])
RELEASE_LIB = pathlib.Path(os.environ["FEED_RELEASE_LIB"])


def clean_env():
    """The environment of a user on the node: no FEEDCLIENT_LIB, no PYTHONPATH."""
    return {k: v for k, v in os.environ.items() if k not in ("FEEDCLIENT_LIB", "PYTHONPATH")}


def run(args, **kw):
    res = subprocess.run(args, capture_output=True, text=True, timeout=120, **kw)
    assert res.returncode == 0, f"{args}:\n{res.stdout}\n{res.stderr}"
    return res.stdout


def pip_install(py, src, cwd, **env):
    """pip install src (offline) with the user's environment plus env."""
    return subprocess.run([str(py), "-m", "pip", "install", "--no-build-isolation", "--no-deps",
                           "--no-index", "--no-cache-dir", "-q", str(src)],
                          env=dict(clean_env(), **env), cwd=cwd, capture_output=True,
                          text=True, timeout=120)


def make_venv(tmp_path):
    venv = tmp_path / "venv"
    run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", str(venv)])
    return venv / "bin" / "python"


def test_install_wheel_carries_the_library(tmp_path):
    py = make_venv(tmp_path)
    res = pip_install(py, SRC / "client" / "python", tmp_path,
                      FEEDCLIENT_LIB=str(RELEASE_LIB / "libfeedclient.so.0"))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "warning" not in res.stdout + res.stderr

    site = pathlib.Path(run([str(py), "-c", "import sysconfig; print(sysconfig.get_path('platlib'))"],
                            env=clean_env()).strip())
    carried = site / "feedclient" / "libfeedclient.so.0"
    assert carried.is_file(), "the wheel does not carry libfeedclient.so.0"
    assert carried.read_bytes() == (RELEASE_LIB / "libfeedclient.so.0").resolve().read_bytes()
    assert b"feed-build-kind=release" in carried.read_bytes()
    wheel = next(site.glob("feedclient-*.dist-info")) / "WHEEL"
    meta = wheel.read_text()
    assert "Root-Is-Purelib: false" in meta, meta
    assert f"Tag: py3-none-linux_{os.uname().machine}" in meta, meta

    out = run([str(py), "-c", "import feedclient; print(feedclient.library_path); "
               "print(feedclient.library_version)"], env=clean_env(), cwd=tmp_path).split("\n")
    assert pathlib.Path(out[0]) == carried
    assert out[1] == os.environ["FEED_VERSION"]
    # libfeedpack travels too, and feedclient.pack writes through that copy
    pack_lib = site / "feedclient" / "libfeedpack.so.0"
    assert pack_lib.read_bytes() == (RELEASE_LIB / "libfeedpack.so.0").resolve().read_bytes()
    run([str(py), "-c", "from feedclient import pack; w = pack.Writer('ds', {'n': ('int64', ())}); "
         "w.write({'n': 7}); w.close()"], env=clean_env(), cwd=tmp_path)
    assert (tmp_path / "ds" / "manifest.pb").is_file()
    # and feedclient._fastiter (next() in C), which the package loads from itself
    ext = site / "feedclient" / "_fastiter.abi3.so"
    assert ext.read_bytes() == (RELEASE_LIB / "_fastiter.abi3.so").read_bytes()
    out = run([str(py), "-c", "import feedclient._native as n; print(n.where)"],
              env=clean_env(), cwd=tmp_path).strip()
    assert pathlib.Path(out) == ext


def test_install_wheel_missing_library_names_each_fix(tmp_path):
    """A package with no library anywhere says where it looked and what to do."""
    if ctypes.util.find_library("feedclient"):
        pytest.skip("a libfeedclient is installed system-wide; the system loader finds it")
    shutil.copytree(SRC / "client" / "python" / "feedclient", tmp_path / "feedclient")
    res = subprocess.run(["/usr/bin/python3", "-c", "import feedclient"], cwd=tmp_path,
                         env=dict(clean_env(), PYTHONPATH=str(tmp_path)),
                         capture_output=True, text=True, timeout=120)
    assert res.returncode != 0
    err = res.stderr
    assert "LibraryNotFound" in err
    for tried in ("$FEEDCLIENT_LIB: not set",
                  f"{tmp_path}/feedclient/libfeedclient.so.0 (inside the package): does not exist",
                  "not in a feedd source checkout",
                  "cmake --install: none",
                  "(system loader)"):
        assert tried in err, f"{tried!r} not in:\n{err}"
    for fix in ("then pip install client/python again", "build it (cmake --build build)",
                "dpkg -i feedd_*.deb", "set FEEDCLIENT_LIB"):
        assert fix in err, f"{fix!r} not in:\n{err}"


def fake_checkout(tmp_path, build_lib, release_lib):
    """A checkout of client/python whose build/lib (and build/release/lib,
    unless None) hold copies of the libraries given."""
    root = tmp_path / "checkout"
    shutil.copytree(SRC / "client" / "python", root / "client" / "python",
                    ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
    for lib, where in ((build_lib, root / "build" / "lib"),
                       (release_lib, root / "build" / "release" / "lib")):
        if lib is not None:
            where.mkdir(parents=True)
            for so in ("libfeedclient.so.0", "libfeedpack.so.0"):
                shutil.copyfile((lib / so).resolve(), where / so)
    return root


def test_install_wheel_takes_the_release_twin(tmp_path):
    """From a checkout whose build/ is checked, the wheel carries build/release/lib's."""
    root = fake_checkout(tmp_path, LIB, RELEASE_LIB)
    py = make_venv(tmp_path)
    res = pip_install(py, root / "client" / "python", tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    site = pathlib.Path(run([str(py), "-c", "import sysconfig; print(sysconfig.get_path('platlib'))"],
                            env=clean_env()).strip())
    carried = (site / "feedclient" / "libfeedclient.so.0").read_bytes()
    assert carried == (RELEASE_LIB / "libfeedclient.so.0").resolve().read_bytes()


def test_install_wheel_refuses_a_checked_library(tmp_path):
    """A checkout with only a checked build: no wheel, and the error says why and what to do."""
    assert b"feed-build-kind=checked" in (LIB / "libfeedclient.so.0").resolve().read_bytes()
    root = fake_checkout(tmp_path, LIB, None)
    py = make_venv(tmp_path)
    res = pip_install(py, root / "client" / "python", tmp_path)
    out = res.stdout + res.stderr
    assert res.returncode != 0, out
    assert f"{root}/build/lib/libfeedclient.so.0 (the checkout's build tree): a checked build, " \
           "not a release build" in out, out
    assert "--target feed_release" in out, out
