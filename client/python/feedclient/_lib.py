"""feedclient._lib: finds libfeedclient.so and declares its C API to ctypes.

Owns the one CDLL handle of the process and the mirrors of the public C
structs of feed/client.h and feed/stream.h; nothing here allocates or keeps
C objects (loader.py does). The structs must match the headers field for
field: a change there is a change here. Calls through ctypes release the
GIL while the C function runs.

Where the library comes from, in order: $FEEDCLIENT_LIB (a file, or a
directory holding libfeedclient.so), the copy inside this package (a wheel
built by client/python/setup.py carries it), the build tree of the source
checkout this package sits in (<root>/build/lib), the library that
cmake --install put beside this package (_installed.py, written then, says
where relative to here), then the system loader (ldconfig's cache,
LD_LIBRARY_PATH). When none loads, the error lists every path tried, why
each failed, and the fix for each way the package may have come.
"""

import ctypes
import ctypes.util
import os
import pathlib

from .errors import LibraryNotFound

FEED_MAX_RANK = 8
FEED_RESUME_MAX = 256

FEED_ORDER_SEQUENTIAL = 0
FEED_ORDER_FULL = 1
FEED_ORDER_BLOCK_WINDOW = 2
FEED_ON_ERROR_FAIL = 0
FEED_ON_ERROR_SKIP = 1
FEED_ORDER_NODE = 3
FEED_NODE_DEAL_ROTATE = 0
FEED_NODE_DEAL_FIXED = 1

FEED_END_OF_EPOCH = 1
FEED_END_OF_STREAM = 2

# FEED_DTYPE_* (feed/client.h) -> numpy dtype string. bfloat16 has no numpy
# type, so its raw bits come as uint16, which loader.py turns into
# torch.bfloat16 when asked for tensors. Strings are UTF-8 bytes.
DTYPES = {
    1: "u1", 2: "i1", 3: "<u2", 4: "<i2", 5: "<u4", 6: "<i4", 7: "<u8", 8: "<i8",
    9: "<f2", 10: "<u2", 11: "<f4", 12: "<f8", 13: "?", 14: "u1",
}
DTYPE_BFLOAT16 = 10
DTYPE_STRING = 14

_SONAME = "libfeedclient.so"


class Field(ctypes.Structure):
    """struct feed_field"""
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("dtype", ctypes.c_int),
        ("dtype_name", ctypes.c_char_p),
        ("elem_size", ctypes.c_size_t),
        ("rank", ctypes.c_uint32),
        ("shape", ctypes.c_uint32 * FEED_MAX_RANK),
        ("variable", ctypes.c_bool),
        ("max_bytes", ctypes.c_uint64),
    ]


class Dataset(ctypes.Structure):
    """struct feed_dataset"""
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("version", ctypes.c_char_p),
        ("num_samples", ctypes.c_uint64),
        ("num_fields", ctypes.c_uint32),
        ("fields", ctypes.POINTER(Field)),
        ("num_classes", ctypes.c_uint32),
        ("classes", ctypes.POINTER(ctypes.c_char_p)),
    ]


class Op(ctypes.Structure):
    """struct feed_op (feed/client.h)"""
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("usage", ctypes.c_char_p),
        ("summary", ctypes.c_char_p),
    ]


class OpList(ctypes.Structure):
    """struct feed_op_list (feed/client.h)"""
    _fields_ = [
        ("count", ctypes.c_size_t),
        ("ops", ctypes.POINTER(Op)),
    ]


class DatasetList(ctypes.Structure):
    """struct feed_dataset_list"""
    _fields_ = [
        ("count", ctypes.c_size_t),
        ("datasets", ctypes.POINTER(Dataset)),
    ]


class StreamDevice(ctypes.Structure):
    """struct feed_stream_device (feed/stream.h): device slots over CUDA IPC"""
    _fields_ = [
        ("enable", ctypes.c_bool),
        ("device", ctypes.c_int),
        ("dtype", ctypes.c_int),
        ("layout", ctypes.c_int),
        ("nmean", ctypes.c_uint32),
        ("mean", ctypes.c_float * 4),
        ("std", ctypes.c_float * 4),
    ]


class MixtureSource(ctypes.Structure):
    """struct feed_mixture_source"""
    _fields_ = [
        ("dataset", ctypes.c_char_p),
        ("weight", ctypes.c_double),
        ("repeat", ctypes.c_double),
        ("choose", ctypes.c_uint64),
    ]


FEED_MIXTURE_MAX = 8


class StreamOpts(ctypes.Structure):
    """struct feed_stream_opts"""
    _fields_ = [
        ("dataset", ctypes.c_char_p),
        ("batch", ctypes.c_uint32),
        ("credits", ctypes.c_uint32),
        ("epochs", ctypes.c_uint64),
        ("drop_last", ctypes.c_bool),
        ("pad_last", ctypes.c_bool),
        ("seed", ctypes.c_uint64),
        ("order", ctypes.c_int),
        ("window", ctypes.c_uint32),
        ("rank", ctypes.c_uint32),
        ("world", ctypes.c_uint32),
        ("eval", ctypes.c_bool),
        ("pipeline", ctypes.c_char_p),
        ("start_epoch", ctypes.c_uint64),
        ("start_batch", ctypes.c_uint64),
        ("resume", ctypes.c_void_p),
        ("resume_len", ctypes.c_size_t),
        ("reconnect_ms", ctypes.c_int),
        ("group", ctypes.c_char_p),
        ("group_depth", ctypes.c_uint32),
        ("device", StreamDevice),
        ("on_error", ctypes.c_int),
        ("max_bad", ctypes.c_uint64),
        ("nodes", ctypes.c_uint32),
        ("node", ctypes.c_uint32),
        ("node_deal", ctypes.c_int),
        ("mixture", ctypes.POINTER(MixtureSource)),
        ("nmixture", ctypes.c_uint32),
        ("samples_per_epoch", ctypes.c_uint64),
    ]


class StreamInfo(ctypes.Structure):
    """struct feed_stream_info"""
    _fields_ = [
        ("id", ctypes.c_uint32),
        ("num_fields", ctypes.c_uint32),
        ("fields", ctypes.POINTER(Field)),
        ("batches_per_epoch", ctypes.c_uint64),
        ("start_epoch", ctypes.c_uint64),
        ("start_batch", ctypes.c_uint64),
        ("credits", ctypes.c_uint32),
        ("batch", ctypes.c_uint32),
        ("pipeline", ctypes.c_char_p),
        ("pipeline_hash", ctypes.c_uint64),
        ("dataset_version", ctypes.c_char_p),
        ("note", ctypes.c_char_p),
        ("group", ctypes.c_char_p),
        ("group_depth", ctypes.c_uint32),
        ("group_members", ctypes.c_uint32),
    ]


class View(ctypes.Structure):
    """struct feed_view"""
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("bytes", ctypes.c_size_t),
        ("dtype", ctypes.c_int),
        ("rank", ctypes.c_uint32),
        ("shape", ctypes.c_uint64 * FEED_MAX_RANK),
        ("ends", ctypes.c_void_p),
    ]


FEED_GPU_MAX_DEVICES = 16
FEED_DEVICE_CPU = -1
FEED_TO_F32, FEED_TO_F16, FEED_TO_BF16, FEED_TO_SAME = 0, 1, 2, 3
FEED_TO_NCHW, FEED_TO_NHWC = 0, 1


class GpuDevice(ctypes.Structure):
    """struct feed_gpu_device (feed/gpu.h)"""
    _fields_ = [
        ("name", ctypes.c_char * 128),
        ("cc_major", ctypes.c_int),
        ("cc_minor", ctypes.c_int),
        ("uuid", ctypes.c_uint8 * 16),
    ]


class GpuInfo(ctypes.Structure):
    """struct feed_gpu_info (feed/gpu.h)"""
    _fields_ = [
        ("usable", ctypes.c_bool),
        ("kernels", ctypes.c_bool),
        ("driver_version", ctypes.c_int),
        ("driver_needed", ctypes.c_int),
        ("num_devices", ctypes.c_uint32),
        ("devices", GpuDevice * FEED_GPU_MAX_DEVICES),
        ("reason", ctypes.c_char * 256),
        ("ipc", ctypes.c_bool),
        ("ipc_reason", ctypes.c_char * 256),
    ]


FEED_MIX_NONE, FEED_MIX_MIXUP, FEED_MIX_CUTMIX = 0, 1, 2


class MixSpec(ctypes.Structure):
    """struct feed_mix_spec (feed/gpu.h)"""
    _fields_ = [
        ("mixup_alpha", ctypes.c_double),
        ("cutmix_alpha", ctypes.c_double),
        ("switch_prob", ctypes.c_double),
        ("num_classes", ctypes.c_uint32),
        ("label_smoothing", ctypes.c_double),
    ]


class Mix(ctypes.Structure):
    """struct feed_mix (feed/gpu.h)"""
    _fields_ = [
        ("op", ctypes.c_int),
        ("lam", ctypes.c_double),
        ("x1", ctypes.c_uint32),
        ("y1", ctypes.c_uint32),
        ("x2", ctypes.c_uint32),
        ("y2", ctypes.c_uint32),
        ("num_classes", ctypes.c_uint32),
        ("label_smoothing", ctypes.c_double),
    ]


class ToDevice(ctypes.Structure):
    """struct feed_to_device (feed/gpu.h)"""
    _fields_ = [
        ("device", ctypes.c_int),
        ("dtype", ctypes.c_int),
        ("layout", ctypes.c_int),
        ("mean", ctypes.POINTER(ctypes.c_float)),
        ("std", ctypes.POINTER(ctypes.c_float)),
        ("dst_bytes", ctypes.c_size_t),
        ("flip", ctypes.POINTER(ctypes.c_uint8)),
        ("mix", ctypes.POINTER(Mix)),
    ]


FEED_STATUS_MEMBERS = 64


class Stats(ctypes.Structure):
    """struct feed_stats (feed/client.h)"""
    _fields_ = [
        ("server_version", ctypes.c_char * 32),
        ("protocol_version", ctypes.c_uint32),
        ("uptime_ms", ctypes.c_uint64),
        ("connections", ctypes.c_uint32),
        ("user_connections", ctypes.c_uint32),
        ("workers", ctypes.c_uint32),
        ("datasets", ctypes.c_uint32),
        ("requests", ctypes.c_uint64),
        ("rejected", ctypes.c_uint64),
    ]


class StreamStatus(ctypes.Structure):
    """struct feed_stream_status (feed/client.h)"""
    _fields_ = [
        ("kind", ctypes.c_char * 8),
        ("uid", ctypes.c_uint32),
        ("pid", ctypes.c_int32),
        ("conn", ctypes.c_uint64),
        ("stream", ctypes.c_uint32),
        ("dataset", ctypes.c_char * 64),
        ("group", ctypes.c_char * 64),
        ("members", ctypes.c_uint32),
        ("batch", ctypes.c_uint32),
        ("credits", ctypes.c_uint32),
        ("credits_in_use", ctypes.c_uint32),
        ("age_ms", ctypes.c_uint64),
        ("batches", ctypes.c_uint64),
        ("samples", ctypes.c_uint64),
        ("bytes", ctypes.c_uint64),
        ("samples_per_s", ctypes.c_double),
        ("mb_per_s", ctypes.c_double),
        ("worker_ns", ctypes.c_uint64),
        ("jobs", ctypes.c_uint64),
        ("reader_wait_ns", ctypes.c_uint64),
        ("reader_wait_share", ctypes.c_double),
        ("pipeline", ctypes.c_char * 256),
        ("shm_bytes", ctypes.c_uint64),
        ("device", ctypes.c_char * 256),
        ("device_bytes", ctypes.c_uint64),
        ("nmember_pids", ctypes.c_uint32),
        ("member_pids", ctypes.c_int32 * FEED_STATUS_MEMBERS),
        ("member_reader_wait_ns", ctypes.c_uint64 * FEED_STATUS_MEMBERS),
        ("samples_per_s_10s", ctypes.c_double),
        ("mb_per_s_10s", ctypes.c_double),
        ("reader_wait_share_10s", ctypes.c_double),
        ("job", ctypes.c_char * 129),
        ("replaced", ctypes.c_uint64),
        ("rank", ctypes.c_uint32),
        ("world", ctypes.c_uint32),
        ("slot_bytes", ctypes.c_uint64),
        ("batches_per_epoch", ctypes.c_uint64),
        ("epochs", ctypes.c_uint64),
        ("start_epoch", ctypes.c_uint64),
        ("start_batch", ctypes.c_uint64),
        ("detached_batches", ctypes.c_uint64),
        ("jpeg_decode", ctypes.c_char * 200),
    ]


class CacheStatus(ctypes.Structure):
    """struct feed_cache_status (feed/client.h)"""
    _fields_ = [(name, ctypes.c_uint64)
                for name in ("hits", "misses", "evictions", "bytes", "entries", "budget")]


class GpuStatus(ctypes.Structure):
    """struct feed_gpu_status (feed/client.h)"""
    _fields_ = [
        ("ordinal", ctypes.c_uint32),
        ("name", ctypes.c_char * 64),
        ("allowed", ctypes.c_bool),
        ("context", ctypes.c_bool),
        ("failed", ctypes.c_bool),
        ("slot_bytes", ctypes.c_uint64),
    ]


class Status(ctypes.Structure):
    """struct feed_status (feed/client.h)"""
    _fields_ = [
        ("stats", Stats),
        ("cache", CacheStatus),
        ("count", ctypes.c_size_t),
        ("streams", ctypes.POINTER(StreamStatus)),
        ("ngpus", ctypes.c_size_t),
        ("gpus", ctypes.POINTER(GpuStatus)),
        ("npending", ctypes.c_size_t),
        ("pending", ctypes.POINTER(ctypes.c_char_p)),
        ("jpeg_decode", ctypes.c_char * 320),
    ]


_P = ctypes.c_void_p  # opaque pointers: conn, stream, batch

# name: (restype, argtypes)
_API = {
    "feed_conn_new": (ctypes.c_int, [ctypes.POINTER(_P)]),
    "feed_conn_open": (ctypes.c_int, [_P, ctypes.c_char_p]),
    "feed_conn_set_timeout": (ctypes.c_int, [_P, ctypes.c_int]),
    "feed_disconnect": (None, [_P]),
    "feed_errmsg": (ctypes.c_char_p, [_P]),
    "feed_strerror": (ctypes.c_char_p, [ctypes.c_int]),
    "feed_version": (ctypes.c_char_p, []),
    "feed_list_datasets": (ctypes.c_int, [_P, ctypes.POINTER(ctypes.POINTER(DatasetList))]),
    "feed_dataset_info": (ctypes.c_int, [_P, ctypes.c_char_p,
                                         ctypes.POINTER(ctypes.POINTER(DatasetList))]),
    "feed_dataset_list_free": (None, [ctypes.POINTER(DatasetList)]),
    "feed_list_ops": (ctypes.c_int, [_P, ctypes.POINTER(ctypes.POINTER(OpList))]),
    "feed_op_list_free": (None, [ctypes.POINTER(OpList)]),
    "feed_sample_path": (ctypes.c_int, [_P, ctypes.c_char_p, ctypes.c_uint64, ctypes.c_char_p,
                                        ctypes.c_size_t]),
    "feed_stream_open": (ctypes.c_int, [_P, ctypes.POINTER(StreamOpts), ctypes.POINTER(_P)]),
    "feed_stream_info": (ctypes.POINTER(StreamInfo), [_P]),
    "feed_next": (ctypes.c_int, [_P, ctypes.c_int, ctypes.POINTER(_P)]),
    "feed_stream_note_next": (ctypes.c_int, [_P, ctypes.c_uint64]),
    "feed_next_desc": (ctypes.c_int, [_P, ctypes.c_int, ctypes.c_uint64, ctypes.POINTER(_P),
                                      ctypes.POINTER(ctypes.c_uint64),
                                      ctypes.POINTER(ctypes.c_uint64), ctypes.c_uint32]),
    "feed_batch_epoch": (ctypes.c_uint64, [_P]),
    "feed_batch_index": (ctypes.c_uint64, [_P]),
    "feed_batch_size": (ctypes.c_uint32, [_P]),
    "feed_batch_samples": (ctypes.c_void_p, [_P]),
    "feed_batch_padded": (ctypes.c_bool, [_P]),
    "feed_batch_replaced": (ctypes.c_uint32, [_P, ctypes.POINTER(ctypes.POINTER(ctypes.c_uint64))]),
    "feed_batch_field": (ctypes.c_int, [_P, ctypes.c_uint32, ctypes.POINTER(View)]),
    "feed_release": (ctypes.c_int, [_P]),
    "feed_batch_detach": (ctypes.c_int, [_P, ctypes.POINTER(ctypes.c_void_p)]),
    "feed_detached_free": (None, [_P]),
    "feed_stream_detached": (ctypes.c_uint64, [_P]),
    "feed_batch_failed": (ctypes.c_int, [_P, ctypes.c_uint32, ctypes.POINTER(ctypes.c_uint64)]),
    "feed_batch_dropped": (ctypes.c_uint32, [_P]),
    "feed_batch_dropped_sample": (ctypes.c_int, [_P, ctypes.c_uint32,
                                                 ctypes.POINTER(ctypes.c_uint64)]),
    "feed_stream_resume_token": (ctypes.c_int, [_P, ctypes.c_void_p, ctypes.c_size_t,
                                                ctypes.POINTER(ctypes.c_size_t)]),
    "feed_stream_close": (ctypes.c_int, [_P]),
    "feed_gpu_query": (ctypes.c_int, [ctypes.POINTER(GpuInfo)]),
    "feed_status": (ctypes.c_int, [_P, ctypes.POINTER(ctypes.POINTER(Status))]),
    "feed_stream_device": (ctypes.c_int, [_P, ctypes.POINTER(ctypes.c_char_p)]),
    "feed_batch_device": (ctypes.c_int, [_P, ctypes.c_uint32, ctypes.c_void_p,
                                         ctypes.POINTER(View)]),
    "feed_status_free": (None, [ctypes.POINTER(Status)]),
    "feed_stream_pin": (ctypes.c_int, [_P, ctypes.c_int]),
    "feed_batch_to_device": (ctypes.c_int, [_P, ctypes.c_uint32, ctypes.c_void_p,
                                            ctypes.POINTER(ToDevice), ctypes.c_void_p]),
    "feed_mix_draw": (ctypes.c_int, [ctypes.POINTER(MixSpec), ctypes.c_uint64, ctypes.c_uint64,
                                     ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint32,
                                     ctypes.POINTER(Mix)]),
    "feed_batch_mix_draw": (ctypes.c_int, [_P, ctypes.POINTER(MixSpec), ctypes.c_uint32,
                                           ctypes.c_uint32, ctypes.POINTER(Mix)]),
}


def _candidates():
    """(path, where) pairs to try, in order; path None: nothing to try there."""
    out = []
    env = os.environ.get("FEEDCLIENT_LIB")
    if env:
        p = pathlib.Path(env)
        out.append((str(p / _SONAME) if p.is_dir() else env, "$FEEDCLIENT_LIB"))
    else:
        out.append((None, "$FEEDCLIENT_LIB: not set"))
    here = pathlib.Path(__file__).resolve().parent
    # A wheel built by setup.py carries the library beside this file.
    out.append((str(here / (_SONAME + ".0")), "inside the package"))
    root = here.parents[2]                               # <root>/client/python/feedclient
    if (root / "client" / "include" / "feed" / "client.h").exists():
        out.append((str(root / "build" / "lib" / _SONAME), "build tree"))
    else:
        out.append((None, f"build tree: none, {here} is not in a feedd source checkout"))
    try:
        from . import _installed                         # written by cmake --install
        out.append((os.path.normpath(here / _installed.LIBDIR / (_SONAME + ".0")),
                    "cmake --install"))
    except ImportError:
        out.append((None, "cmake --install: none, this package was not installed by it"))
    found = ctypes.util.find_library("feedclient")
    if found:
        out.append((found, "system loader"))
    out.append((_SONAME + ".0", "system loader"))
    return out


# What to do, for each way the package may have come; the error prints them all.
_FIXES = (
    "pip install from a checkout: build the library first (cmake --build build), then "
    "pip install client/python again: the wheel carries the library",
    "running from the source checkout: build it (cmake --build build)",
    "installed by cmake --install or the feedd .deb: install it again "
    "(cmake --install build, or dpkg -i feedd_*.deb); the library goes to <prefix>/lib",
    "a library elsewhere: set FEEDCLIENT_LIB to its path or to its directory",
)

# Places whose absence is an expected miss, not a broken library.
_MAY_BE_ABSENT = ("inside the package", "build tree", "cmake --install")


def _bind(lib):
    for name, (res, args) in _API.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args


def _load():
    tried = []
    for path, where in _candidates():
        if path is None:
            tried.append(where)
            continue
        if where in _MAY_BE_ABSENT and not os.path.exists(path):
            tried.append(f"{path} ({where}): does not exist")
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            tried.append(f"{path} ({where}): {e}")
            continue
        try:
            _bind(lib)
        except AttributeError as e:
            tried.append(f"{path} ({where}): not libfeedclient or too old: {e}")
            continue
        return lib, path
    raise LibraryNotFound("feedclient: cannot load libfeedclient.so; tried, in order:\n  " +
                          "\n  ".join(tried) + "\nTo fix it:\n  - " + "\n  - ".join(_FIXES))


lib, path = _load()


def errmsg(conn):
    """feed_errmsg(conn) as str."""
    return lib.feed_errmsg(conn).decode("utf-8", "replace")


def strerror(code):
    """feed_strerror(code) as str."""
    return lib.feed_strerror(code).decode("utf-8", "replace")


# feed_next_desc once more, without argtypes, for next()'s path with a
# batch ready: ctypes then checks and converts no argument, which is a
# third of the call's cost when the caches are cold after a training step
# (~7 of ~20 us). Its callers pass exactly typed objects: the stream's
# c_void_p, an int timeout, a c_uint64, byref(c_void_p), the c_uint64
# arrays and a c_uint32 (feedclient._stream keeps them).
next_desc_raw = lib["feed_next_desc"]
next_desc_raw.restype = ctypes.c_int
