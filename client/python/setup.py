"""setup.py: makes the feedclient wheel carry libfeedclient.

The package is Python over ctypes (with one optional C extension,
feedclient/_fastiter.abi3.so, next() in C, copied in when CMake built it);
what makes the wheel a platform wheel is the C library copied into it
(feedclient/libfeedclient.so.0), so
`import feedclient` works in any virtual environment on the node with no
FEEDCLIENT_LIB. The library is the one already built by CMake, taken from
$FEEDCLIENT_LIB (the file or its directory) or else the checkout's release
build: build/release/lib (the release twin a checked build/ makes with
`cmake --build build --target feed_release`), or build/lib when build/ is
itself a release build. A wheel carries a release library (NDEBUG, no lock
checks): a checked one from the checkout is refused, and one named by
$FEEDCLIENT_LIB is taken with a warning. It is not rebuilt here, so a pip
install needs no compiler, no CMake and no network (pip install
--no-build-isolation client/python).
Metadata is in pyproject.toml.
"""
import os
import pathlib
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

try:
    from wheel.bdist_wheel import bdist_wheel
except ImportError:  # no wheel package: pip falls back to a plain install
    bdist_wheel = None

HERE = pathlib.Path(__file__).resolve().parent
SONAME = "libfeedclient.so.0"
# libfeedpack (the dataset writer feedclient.pack binds) travels beside it.
PACK_SONAME = "libfeedpack.so.0"
FASTITER = "_fastiter.abi3.so"


def build_kind(path):
    """'release' or 'checked', as CMake marked the library (feed-build-kind=...), or None."""
    data = path.read_bytes()
    for kind in ("release", "checked"):
        if b"feed-build-kind=" + kind.encode() in data:
            return kind
    return None


def built_library(soname=SONAME):
    """The built library soname (libfeedclient or libfeedpack), its real file;
    SystemExit naming every place tried."""
    tried = []
    env = os.environ.get("FEEDCLIENT_LIB")
    if env:
        p = pathlib.Path(env)
        # a directory, or libfeedclient's file: libfeedpack lies beside it
        path = p / soname if p.is_dir() else p if soname == SONAME else p.parent / soname
        if path.is_file():
            if build_kind(path) != "release":
                print(f"feedclient: warning: {path} ($FEEDCLIENT_LIB) is not a release build "
                      "(asserts, lock checks): the wheel carries it as asked")
            return path.resolve()
        tried.append(f"{path} ($FEEDCLIENT_LIB): does not exist")
    build = HERE.parents[1] / "build"
    for path, where in ((build / "release" / "lib" / soname, "the checkout's release twin"),
                        (build / "lib" / soname, "the checkout's build tree")):
        if not path.is_file():
            tried.append(f"{path} ({where}): does not exist")
        elif build_kind(path) != "release":
            tried.append(f"{path} ({where}): a {build_kind(path) or 'unmarked'} build, "
                         "not a release build")
        else:
            return path.resolve()
    raise SystemExit(f"feedclient: no release {soname} to put in the wheel; tried:\n  " +
                     "\n  ".join(tried) +
                     "\nBuild one first (cmake --build build --target feed_release in a "
                     "checked checkout, or cmake -B build -DCMAKE_BUILD_TYPE=Release && "
                     "cmake --build build), or set FEEDCLIENT_LIB to the built library.")


class BuildPyWithLibrary(build_py):
    """build_py, then the built library copied into the package as libfeedclient.so.0."""

    def run(self):
        super().run()
        for soname in (SONAME, PACK_SONAME):
            lib = built_library(soname)
            dest = pathlib.Path(self.build_lib) / "feedclient" / soname
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(lib, dest)
            os.chmod(dest, 0o755)
        # feedclient._fastiter (next() in C, CPython >= 3.11), built beside
        # the library when Python's headers were there; optional
        ext = built_library(SONAME).parent / FASTITER
        if ext.is_file():
            dest = pathlib.Path(self.build_lib) / "feedclient" / FASTITER
            shutil.copyfile(ext, dest)
            os.chmod(dest, 0o755)


class PlatformDistribution(Distribution):
    """Says the package holds native code, so the wheel is tagged for this platform."""

    def has_ext_modules(self):
        return True


cmdclass = {"build_py": BuildPyWithLibrary}
if bdist_wheel is not None:
    class PlatformWheel(bdist_wheel):
        """py3-none-<platform>: the library is called through ctypes, so any
        CPython 3 on this platform can use the wheel; only the platform matters
        (_fastiter, abi3 for 3.11 and later, is left unloaded on older ones)."""

        def get_tag(self):
            _, _, plat = super().get_tag()
            return "py3", "none", plat

    cmdclass["bdist_wheel"] = PlatformWheel

setup(cmdclass=cmdclass, distclass=PlatformDistribution)
