"""feedclient.pack._native: libfeedpack (tools/pack_lib.h) through ctypes.

libfeedpack is format/'s dataset writer exported as a small C API; this
module only finds it and declares it, so every byte of a dataset written
from Python is laid out by the same C code as feedpack's. It is a library
of its own (it links zstd), found, in order: $FEEDPACK_LIB (the file or its
directory), then beside the libfeedclient this package loaded (the wheel
carries both; the build tree and cmake --install put both in one lib
directory), then the system loader. Loaded on first use, so `import
feedclient` never needs it.
"""

import ctypes
import os
import pathlib

from .._lib import path as _client_path
from ..errors import LibraryNotFound

MAX_RANK = 8
_SONAME = "libfeedpack.so"


class PackField(ctypes.Structure):
    """struct feed_pack_field"""
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("dtype", ctypes.c_int),
        ("rank", ctypes.c_uint32),
        ("shape", ctypes.c_uint32 * MAX_RANK),
        ("variable", ctypes.c_int),
        ("image", ctypes.c_int),
    ]


class PackOpts(ctypes.Structure):
    """struct feed_pack_opts"""
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("source", ctypes.c_char_p),
        ("block_bytes", ctypes.c_uint64),
        ("block_records", ctypes.c_uint32),
        ("zstd_level", ctypes.c_int),
        ("shard_bytes", ctypes.c_uint64),
        ("num_classes", ctypes.c_uint32),
        ("classes", ctypes.POINTER(ctypes.c_char_p)),
        ("record_base", ctypes.c_uint64),
    ]


_P = ctypes.c_void_p
_API = {
    "feed_pack_new": (ctypes.c_int, [ctypes.c_char_p, ctypes.POINTER(PackField), ctypes.c_uint32,
                                     ctypes.POINTER(PackOpts), ctypes.POINTER(_P),
                                     ctypes.c_char_p, ctypes.c_size_t]),
    "feed_pack_add": (ctypes.c_int, [_P, ctypes.POINTER(_P), ctypes.POINTER(ctypes.c_size_t)]),
    "feed_pack_add_batch": (ctypes.c_int, [_P, ctypes.c_uint64, ctypes.POINTER(_P),
                                           ctypes.POINTER(_P)]),
    "feed_pack_adopt": (ctypes.c_int, [_P, ctypes.c_char_p]),
    "feed_pack_count": (ctypes.c_uint64, [_P]),
    "feed_pack_finish": (ctypes.c_int, [_P]),
    "feed_pack_errmsg": (ctypes.c_char_p, [_P]),
    "feed_pack_free": (None, [_P]),
}


def _candidates():
    """(path, where) pairs to try, in order."""
    out = []
    env = os.environ.get("FEEDPACK_LIB")
    if env:
        p = pathlib.Path(env)
        out.append((str(p / _SONAME) if p.is_dir() else env, "$FEEDPACK_LIB"))
    beside = pathlib.Path(_client_path).resolve().parent
    for name in (_SONAME + ".0", _SONAME):
        out.append((str(beside / name), "beside libfeedclient"))
    out.append((_SONAME + ".0", "system loader"))
    return out


_lib = None


def lib():
    """The loaded libfeedpack; LibraryNotFound naming every place tried."""
    global _lib
    if _lib is not None:
        return _lib
    tried = []
    for path, where in _candidates():
        if where != "system loader" and not os.path.exists(path):
            tried.append(f"{path} ({where}): does not exist")
            continue
        try:
            handle = ctypes.CDLL(path)
            for name, (res, args) in _API.items():
                fn = getattr(handle, name)
                fn.restype, fn.argtypes = res, args
        except (OSError, AttributeError) as e:
            tried.append(f"{path} ({where}): {e}")
            continue
        _lib = handle
        return _lib
    raise LibraryNotFound("feedclient.pack: libfeedpack not found; tried:\n  " +
                          "\n  ".join(tried) +
                          "\nBuild it (cmake --build build), reinstall the wheel, or set "
                          "FEEDPACK_LIB to the built library.")
