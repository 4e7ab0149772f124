"""feedformat: an independent Python reader of the feedd dataset format.

Written from format/FORMAT.md (version 1), not from the C reader, so that the
two can check each other. Standard library, numpy and python3-zstandard only;
XXH64 comes from libxxhash.so.0 through ctypes when it is there, else from the
`xxhash` module, else from the pure-Python implementation below.

    ds = Dataset("/data/fashion-mnist")
    len(ds), ds.name, ds.version, ds.schema     # schema: list of Field
    ds[i]             # dict field name -> numpy array (str field -> str);
                      # ds.get(i, copy=False): read-only views instead
    ds.read_block(b)  # dict field name -> column of global block b (fixed:
                      # array (n,)+shape; variable: VarColumn offsets/data)
    ds.num_blocks, ds.block_of(i) -> (block, record within block)
    ds.block_range(b) -> [first, end) samples; ds.block_info(b) -> index entry
    ds.verify()       # decode every block and check the content hash

bf16 fields are returned as their raw 16-bit patterns (<u2): bf16_to_f32().
Command line: python3 feedformat.py DIR [--verify] [--bench].

Every checksum is verified (header, index, trailer at open; a block's xxh64
before it is decoded); any mismatch raises CorruptError naming the shard file
and block. Files are opened lazily per process and reopened after fork, so a
Dataset may be handed to PyTorch DataLoader workers (fork or spawn).
"""

import bisect
import ctypes
import ctypes.util
import os
import operator
import re
import struct
import sys
import weakref

import numpy as np
import zstandard

__all__ = ["Dataset", "Field", "VarColumn", "CorruptError", "FormatError",
           "xxh64", "xxh64_py", "XXH64Stream", "decode_message", "main"]

FORMAT_VERSION = 1
HEADER_MAGIC = b"FEEDSHD1"
TRAILER_MAGIC = b"FEEDEND1"
HEADER_SIZE = 64
TRAILER_SIZE = 64
INDEX_ENTRY = 40
ALIGN = 64

_U64 = (1 << 64) - 1


class FormatError(Exception):
    """The dataset is not a valid feedd dataset (manifest, schema)."""


class CorruptError(FormatError):
    """A shard's bytes do not match what its header, footer or index say."""


# --------------------------------------------------------------------------
# XXH64
# --------------------------------------------------------------------------

_P1 = 0x9E3779B185EBCA87
_P2 = 0xC2B2AE3D27D4EB4F
_P3 = 0x165667B19E3779F9
_P4 = 0x85EBCA77C2B2AE63
_P5 = 0x27D4EB2F165667C5


def _rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & _U64


def _round(acc, lane):
    acc = (acc + lane * _P2) & _U64
    return (_rotl(acc, 31) * _P1) & _U64


def _merge(acc, val):
    acc ^= _round(0, val)
    return (acc * _P1 + _P4) & _U64


def _xxh64_tail(h, data, pos, end):
    while pos + 8 <= end:
        (k,) = struct.unpack_from("<Q", data, pos)
        h ^= _round(0, k)
        h = (_rotl(h, 27) * _P1 + _P4) & _U64
        pos += 8
    if pos + 4 <= end:
        (k,) = struct.unpack_from("<I", data, pos)
        h ^= (k * _P1) & _U64
        h = (_rotl(h, 23) * _P2 + _P3) & _U64
        pos += 4
    while pos < end:
        h ^= (data[pos] * _P5) & _U64
        h = (_rotl(h, 11) * _P1) & _U64
        pos += 1
    h ^= h >> 33
    h = (h * _P2) & _U64
    h ^= h >> 29
    h = (h * _P3) & _U64
    h ^= h >> 32
    return h


def _stripes(v, data, pos, end):
    v1, v2, v3, v4 = v
    unpack = struct.Struct("<4Q").unpack_from
    while pos + 32 <= end:
        a, b, c, d = unpack(data, pos)
        v1 = _round(v1, a)
        v2 = _round(v2, b)
        v3 = _round(v3, c)
        v4 = _round(v4, d)
        pos += 32
    return (v1, v2, v3, v4), pos


def _converge(v):
    v1, v2, v3, v4 = v
    h = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & _U64
    for x in v:
        h = _merge(h, x)
    return h


def _seed_state(seed):
    return ((seed + _P1 + _P2) & _U64, (seed + _P2) & _U64, seed & _U64,
            (seed - _P1) & _U64)


def xxh64_py(data, seed=0):
    """XXH64 of a bytes-like object, in pure Python (slow; reference)."""
    data = memoryview(data).cast("B")
    n = len(data)
    if n >= 32:
        v, pos = _stripes(_seed_state(seed), data, 0, n)
        h = _converge(v)
    else:
        pos = 0
        h = (seed + _P5) & _U64
    h = (h + n) & _U64
    return _xxh64_tail(h, data, pos, n)


class _PyStream:
    def __init__(self, seed=0):
        self._seed = seed
        self._v = _seed_state(seed)
        self._buf = b""
        self._total = 0

    def update(self, data):
        data = bytes(data)
        self._total += len(data)
        if self._buf:
            data = self._buf + data
        self._v, pos = _stripes(self._v, data, 0, len(data))
        self._buf = data[pos:]

    def digest(self):
        if self._total >= 32:
            h = _converge(self._v)
        else:
            h = (self._seed + _P5) & _U64
        h = (h + self._total) & _U64
        return _xxh64_tail(h, self._buf, 0, len(self._buf))


def _load_libxxhash():
    for name in ("libxxhash.so.0", ctypes.util.find_library("xxhash")):
        if not name:
            continue
        try:
            lib = ctypes.CDLL(name)
            lib.XXH64.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_ulonglong]
            lib.XXH64.restype = ctypes.c_ulonglong
            lib.XXH64_createState.argtypes = []
            lib.XXH64_createState.restype = ctypes.c_void_p
            lib.XXH64_freeState.argtypes = [ctypes.c_void_p]
            lib.XXH64_freeState.restype = ctypes.c_int
            lib.XXH64_reset.argtypes = [ctypes.c_void_p, ctypes.c_ulonglong]
            lib.XXH64_reset.restype = ctypes.c_int
            lib.XXH64_update.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
            lib.XXH64_update.restype = ctypes.c_int
            lib.XXH64_digest.argtypes = [ctypes.c_void_p]
            lib.XXH64_digest.restype = ctypes.c_ulonglong
            return lib
        except (OSError, AttributeError):
            continue
    return None


def _ptr(data):
    """(address, keepalive) of a bytes-like object, without copying bytes."""
    if isinstance(data, bytes):
        return ctypes.cast(ctypes.c_char_p(data), ctypes.c_void_p).value, data
    arr = np.frombuffer(data, dtype=np.uint8)
    return arr.ctypes.data, arr


_backend = os.environ.get("FEEDFORMAT_XXH64", "")   # ctypes | xxhash | python
_lib = _load_libxxhash() if _backend in ("", "ctypes") else None
_xxhash_mod = None
if _lib is None and _backend in ("", "xxhash"):
    try:
        import xxhash as _xxhash_mod
    except ImportError:
        _xxhash_mod = None

if _lib is not None:
    XXH64_BACKEND = "ctypes"
    _XXH64 = _lib.XXH64

    def xxh64(data, seed=0):
        """XXH64 of a bytes-like object (libxxhash through ctypes)."""
        if isinstance(data, bytes):
            return _XXH64(data, len(data), seed)
        p, keep = _ptr(data)
        return _XXH64(p, keep.nbytes, seed)

    class XXH64Stream:
        """Incremental XXH64 (update, digest)."""

        def __init__(self, seed=0):
            self._st = _lib.XXH64_createState()
            if not self._st:
                raise MemoryError("XXH64_createState")
            _lib.XXH64_reset(self._st, seed)

        def update(self, data):
            p, keep = _ptr(data)
            n = keep.nbytes if not isinstance(keep, bytes) else len(keep)
            _lib.XXH64_update(self._st, p, n)

        def digest(self):
            return _lib.XXH64_digest(self._st)

        def __del__(self):
            st, self._st = getattr(self, "_st", None), None
            if st:
                _lib.XXH64_freeState(st)
elif _xxhash_mod is not None:
    XXH64_BACKEND = "xxhash"

    def xxh64(data, seed=0):
        """XXH64 of a bytes-like object (xxhash module)."""
        return _xxhash_mod.xxh64_intdigest(data, seed)

    class XXH64Stream:
        """Incremental XXH64 (update, digest)."""

        def __init__(self, seed=0):
            self._h = _xxhash_mod.xxh64(seed=seed)

        def update(self, data):
            self._h.update(data)

        def digest(self):
            return self._h.intdigest()
else:
    XXH64_BACKEND = "python"
    xxh64 = xxh64_py
    XXH64Stream = _PyStream


# --------------------------------------------------------------------------
# Protobuf wire format (only what the manifest needs)
# --------------------------------------------------------------------------

def _varint(buf, pos):
    result = 0
    shift = 0
    n = len(buf)
    while True:
        if pos >= n:
            raise FormatError("protobuf: truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            if result > _U64:
                raise FormatError("protobuf: varint exceeds 64 bits")
            return result, pos
        shift += 7
        if shift >= 70:
            raise FormatError("protobuf: varint longer than 10 bytes")


def iter_fields(buf):
    """Yield (field number, wire type, value) of an encoded message.

    Varint and fixed values are ints; length-delimited values are bytes.
    Groups (wire types 3, 4) are refused: proto3 never writes them.
    """
    buf = bytes(buf)
    pos = 0
    n = len(buf)
    while pos < n:
        key, pos = _varint(buf, pos)
        num, wt = key >> 3, key & 7
        if num == 0 or num > 0x1FFFFFFF:
            raise FormatError("protobuf: bad field number %d" % num)
        if wt == 0:
            val, pos = _varint(buf, pos)
        elif wt == 1:
            if pos + 8 > n:
                raise FormatError("protobuf: truncated fixed64")
            (val,) = struct.unpack_from("<Q", buf, pos)
            pos += 8
        elif wt == 5:
            if pos + 4 > n:
                raise FormatError("protobuf: truncated fixed32")
            (val,) = struct.unpack_from("<I", buf, pos)
            pos += 4
        elif wt == 2:
            ln, pos = _varint(buf, pos)
            if ln > n - pos:
                raise FormatError("protobuf: length-delimited field %d runs past the end" % num)
            val = buf[pos:pos + ln]
            pos += ln
        else:
            raise FormatError("protobuf: unsupported wire type %d (field %d)" % (wt, num))
        yield num, wt, val


def _scalar(kind, val, fname):
    if kind == "uint64":
        return val
    if kind == "uint32":
        if val > 0xFFFFFFFF:
            raise FormatError("protobuf: %s: %d does not fit uint32" % (fname, val))
        return val
    if kind in ("int32", "enum"):
        val &= 0xFFFFFFFF
        return val - (1 << 32) if val & 0x80000000 else val
    if kind == "int64":
        return val - (1 << 64) if val & (1 << 63) else val
    if kind == "bool":
        return val != 0
    raise AssertionError(kind)


_NUMERIC = ("uint64", "uint32", "int32", "int64", "enum", "bool")


def decode_message(buf, spec):
    """Decode an encoded message with a spec {number: (name, kind, repeated)}.

    kind: uint32 uint64 int32 int64 enum bool string bytes, or a nested spec
    (dict) for a message field. Absent fields take proto3 defaults; unknown
    fields are skipped; repeated numeric fields may be packed or not; a
    non-repeated message field seen twice is merged. The result also holds,
    under "_raw_<name>", the encoded bytes of each non-repeated message field.
    """
    out = {}
    raw = {}
    for num, (name, kind, rep) in spec.items():
        if rep:
            out[name] = []
        elif isinstance(kind, dict):
            out[name] = None
        elif kind == "string":
            out[name] = ""
        elif kind == "bytes":
            out[name] = b""
        elif kind == "bool":
            out[name] = False
        else:
            out[name] = 0
    for num, wt, val in iter_fields(buf):
        if num not in spec:
            continue
        name, kind, rep = spec[num]
        if isinstance(kind, dict):
            if wt != 2:
                raise FormatError("protobuf: %s: message field with wire type %d" % (name, wt))
            if rep:
                out[name].append(decode_message(val, kind))
            else:
                raw[name] = raw.get(name, b"") + val
        elif kind in ("string", "bytes"):
            if wt != 2:
                raise FormatError("protobuf: %s: %s field with wire type %d" % (name, kind, wt))
            if kind == "string":
                try:
                    val = val.decode("utf-8")
                except UnicodeDecodeError:
                    raise FormatError("protobuf: %s: invalid UTF-8" % name) from None
            if rep:
                out[name].append(val)
            else:
                out[name] = val
        elif kind in _NUMERIC:
            if wt == 0:
                vals = [_scalar(kind, val, name)]
            elif wt == 2 and rep:           # packed
                vals = []
                pos = 0
                while pos < len(val):
                    v, pos = _varint(val, pos)
                    vals.append(_scalar(kind, v, name))
            else:
                raise FormatError("protobuf: %s: %s field with wire type %d" % (name, kind, wt))
            if rep:
                out[name].extend(vals)
            else:
                out[name] = vals[-1]
        else:
            raise AssertionError(kind)
    for name, data in raw.items():
        out["_raw_" + name] = data
    for num, (name, kind, rep) in spec.items():
        if isinstance(kind, dict) and not rep:
            out[name] = decode_message(raw.get(name, b""), kind)
            out.setdefault("_raw_" + name, b"")
    return out


_FIELD_SPEC = {1: ("name", "string", False), 2: ("dtype", "enum", False),
               3: ("shape", "uint32", True), 4: ("variable", "bool", False),
               5: ("max_bytes", "uint64", False)}
_SCHEMA_SPEC = {1: ("fields", _FIELD_SPEC, True)}
_SHARD_SPEC = {1: ("file", "string", False), 2: ("size", "uint64", False),
               3: ("first_sample", "uint64", False),
               4: ("num_samples", "uint64", False),
               5: ("num_blocks", "uint64", False)}
MANIFEST_SPEC = {1: ("format_version", "uint32", False), 2: ("name", "string", False),
                 3: ("version", "string", False), 4: ("schema", _SCHEMA_SPEC, False),
                 5: ("num_samples", "uint64", False), 6: ("shards", _SHARD_SPEC, True),
                 7: ("block_bytes", "uint64", False), 8: ("block_records", "uint32", False),
                 9: ("zstd_level", "int32", False), 10: ("max_block_raw", "uint64", False),
                 11: ("max_block_comp", "uint64", False), 12: ("source", "string", False)}


# --------------------------------------------------------------------------
# Schema
# --------------------------------------------------------------------------

# DType enum value -> (name, numpy dtype or "str"). bf16 has no numpy dtype:
# its elements are returned as their raw 16-bit patterns (<u2); see bf16_to_f32.
DTYPES = {
    1: ("u8", np.dtype("u1")), 2: ("i8", np.dtype("i1")),
    3: ("u16", np.dtype("<u2")), 4: ("i16", np.dtype("<i2")),
    5: ("u32", np.dtype("<u4")), 6: ("i32", np.dtype("<i4")),
    7: ("u64", np.dtype("<u8")), 8: ("i64", np.dtype("<i8")),
    9: ("f16", np.dtype("<f2")), 10: ("bf16", np.dtype("<u2")),
    11: ("f32", np.dtype("<f4")), 12: ("f64", np.dtype("<f8")),
    13: ("bool", np.dtype("?")), 14: ("str", "str"),
}

_NAME_RE = re.compile(r"[A-Za-z0-9_.-]{1,63}\Z")


def bf16_to_f32(a):
    """float32 array from an array of raw bf16 bit patterns (<u2)."""
    return (np.asarray(a, dtype="<u2").astype("<u4") << 16).view("<f4")


def align64(x):
    return (x + ALIGN - 1) & ~(ALIGN - 1)


class Field:
    """One field of the schema.

    name, dtype (numpy dtype, or "str"), shape (tuple), variable (bool),
    max_bytes (int); also dtype_code (the DType enum value), dtype_name
    ("u8" ... "str"), itemsize (bytes per element: 1 for str) and elem_bytes
    (bytes of one record of a fixed field, of one shape-element of a
    variable field).
    """

    __slots__ = ("name", "dtype", "shape", "variable", "max_bytes", "dtype_code",
                 "dtype_name", "itemsize", "elem_bytes", "_np")

    def __init__(self, name, dtype_code, shape, variable, max_bytes):
        self.name = name
        self.dtype_code = dtype_code
        self.dtype_name, self.dtype = DTYPES[dtype_code]
        self.shape = tuple(shape)
        self.variable = variable
        self.max_bytes = max_bytes
        self._np = np.dtype("u1") if self.dtype == "str" else self.dtype
        self.itemsize = self._np.itemsize
        n = 1
        for d in self.shape:
            n *= d
        self.elem_bytes = n * self.itemsize

    def __repr__(self):
        return "Field(%r, %s, %r, variable=%r, max_bytes=%d)" % (
            self.name, self.dtype_name, self.shape, self.variable, self.max_bytes)

    def __eq__(self, other):
        return isinstance(other, Field) and all(
            getattr(self, a) == getattr(other, a)
            for a in ("name", "dtype_code", "shape", "variable", "max_bytes"))

    __hash__ = None


def _check_schema(raw_fields, where):
    if not raw_fields:
        raise FormatError("%s: schema has no fields" % where)
    fields = []
    seen = set()
    for f in raw_fields:
        name = f["name"]
        if not _NAME_RE.match(name) or len(name.encode()) > 63:
            raise FormatError("%s: bad field name %r" % (where, name))
        if name in seen:
            raise FormatError("%s: duplicate field name %r" % (where, name))
        seen.add(name)
        if f["dtype"] not in DTYPES:
            raise FormatError("%s: field %r: bad dtype %d" % (where, name, f["dtype"]))
        fld = Field(name, f["dtype"], f["shape"], f["variable"], f["max_bytes"])
        if fld.dtype == "str":
            if not fld.variable:
                raise FormatError("%s: field %r: str must be variable" % (where, name))
            if fld.shape:
                raise FormatError("%s: field %r: str field with a shape" % (where, name))
        if fld.variable:
            if fld.elem_bytes == 0:
                raise FormatError("%s: field %r: variable field with a zero dimension"
                                  % (where, name))
            if fld.max_bytes % fld.elem_bytes:
                raise FormatError("%s: field %r: max_bytes %d is not a multiple of %d"
                                  % (where, name, fld.max_bytes, fld.elem_bytes))
        elif fld.max_bytes != fld.elem_bytes:
            raise FormatError("%s: field %r: fixed field of %d bytes has max_bytes %d"
                              % (where, name, fld.elem_bytes, fld.max_bytes))
        fields.append(fld)
    return fields


# --------------------------------------------------------------------------
# Decoded blocks
# --------------------------------------------------------------------------

class VarColumn:
    """A variable field's column in a decoded block.

    offsets: (n+1,) uint32 byte offsets into data (o[0] = 0); data: the
    section's elements as a flat numpy array (uint8 for str fields). col[j]
    is record j as ds[i] gives it (a view, or a str); len(col) == n.
    """

    __slots__ = ("field", "offsets", "data", "_offs", "_raw", "_where")

    def __init__(self, field, offsets, data, raw, where):
        self.field = field
        self.offsets = offsets
        self.data = data
        self._offs = offsets.tolist()
        self._raw = raw          # the data section as a memoryview (str fields)
        self._where = where

    def __len__(self):
        return len(self._offs) - 1

    def nbytes(self, j):
        return self._offs[j + 1] - self._offs[j]

    def __getitem__(self, j):
        if j < 0:
            j += len(self)
        if not 0 <= j < len(self):
            raise IndexError(j)
        a, b = self._offs[j], self._offs[j + 1]
        f = self.field
        if f.dtype == "str":
            try:
                return str(self._raw[a:b], "utf-8")
            except UnicodeDecodeError:
                raise CorruptError("%s: field %r record %d is not valid UTF-8"
                                   % (self._where, f.name, j)) from None
        isz = f.itemsize
        arr = self.data[a // isz:b // isz]
        if f.shape:
            arr = arr.reshape((-1,) + f.shape)
        return arr

    def __iter__(self):
        return (self[j] for j in range(len(self)))


def _zero(buf, a, b):
    return a == b or buf[a:b] == bytes(b - a)


def parse_block(buf, n, fields, where):
    """Columns of a decoded block of n records: {name: ndarray or VarColumn}.

    buf is the decoded block (bytes, exactly raw_size long). Fixed columns are
    read-only views of shape (n,) + field.shape.
    """
    raw_size = len(buf)
    mv = memoryview(buf)
    cols = {}
    pos = 0
    end = 0                       # end of the previous section
    for f in fields:
        pos = align64(end)
        if pos > raw_size or not _zero(buf, end, pos):
            raise CorruptError("%s: field %r: bad padding before its section" % (where, f.name))
        if not f.variable:
            size = n * f.elem_bytes
            if pos + size > raw_size:
                raise CorruptError("%s: field %r: section [%d, %d) past raw_size %d"
                                   % (where, f.name, pos, pos + size, raw_size))
            arr = np.frombuffer(buf, dtype=f._np, count=size // f.itemsize, offset=pos)
            if f.dtype_code == 13 and size and arr.view("u1").max() > 1:
                raise CorruptError("%s: field %r: bool byte other than 0 or 1" % (where, f.name))
            cols[f.name] = arr.reshape((n,) + f.shape)
            end = pos + size
        else:
            osize = 4 * (n + 1)
            if pos + osize > raw_size:
                raise CorruptError("%s: field %r: offsets past raw_size %d"
                                   % (where, f.name, raw_size))
            offs = np.frombuffer(buf, dtype="<u4", count=n + 1, offset=pos)
            dpos = align64(pos + osize)
            total = int(offs[-1])
            if offs[0] != 0:
                raise CorruptError("%s: field %r: o[0] = %d, not 0" % (where, f.name, offs[0]))
            d = np.diff(offs.astype(np.int64))
            if n and d.min() < 0:
                raise CorruptError("%s: field %r: offsets decrease" % (where, f.name))
            if n and int(d.max()) > f.max_bytes:
                raise CorruptError("%s: field %r: a record of %d bytes exceeds max_bytes %d"
                                   % (where, f.name, int(d.max()), f.max_bytes))
            if f.elem_bytes > 1 and n and np.any(offs % f.elem_bytes):
                raise CorruptError("%s: field %r: a record is not a multiple of %d bytes"
                                   % (where, f.name, f.elem_bytes))
            if dpos + total > raw_size or not _zero(buf, pos + osize, dpos):
                raise CorruptError("%s: field %r: data section [%d, %d) past raw_size %d "
                                   "or bad padding" % (where, f.name, dpos, dpos + total,
                                                       raw_size))
            data = np.frombuffer(buf, dtype=f._np, count=total // f.itemsize, offset=dpos)
            if f.dtype_code == 13 and total and data.view("u1").max() > 1:
                raise CorruptError("%s: field %r: bool byte other than 0 or 1" % (where, f.name))
            cols[f.name] = VarColumn(f, offs, data, mv[dpos:dpos + total], where)
            end = dpos + total
    if end != raw_size:
        raise CorruptError("%s: raw_size %d, but the last section ends at %d"
                           % (where, raw_size, end))
    return cols


# --------------------------------------------------------------------------
# Shards
# --------------------------------------------------------------------------

_HDR = struct.Struct("<8sIIQQQ16sQ")        # magic ver nfields first nrec nblk zero xxh
_TRL = struct.Struct("<QQQQ16sQ8s")         # idxoff nblk nrec idxxxh zero xxh magic
_IDX = np.dtype([("offset", "<u8"), ("first_record", "<u8"), ("num_records", "<u4"),
                 ("comp_size", "<u4"), ("raw_size", "<u4"), ("zero", "<u4"),
                 ("xxh64", "<u8")])
assert _HDR.size == 64 and _TRL.size == 64 and _IDX.itemsize == 40


def _pread_exact(fd, n, off, path, what):
    data = os.pread(fd, n, off)
    while len(data) < n:
        more = os.pread(fd, n - len(data), off + len(data))
        if not more:
            raise CorruptError("%s: %s: short read at offset %d (%d of %d bytes): "
                               "file truncated" % (path, what, off, len(data), n))
        data += more
    return data


class _Shard:
    __slots__ = ("file", "path", "size", "first_sample", "num_samples", "num_blocks",
                 "index", "block_base")

    def __init__(self, info, directory):
        self.file = info["file"]
        self.path = os.path.join(directory, self.file)
        self.size = info["size"]
        self.first_sample = info["first_sample"]
        self.num_samples = info["num_samples"]
        self.num_blocks = info["num_blocks"]

    def load_footer(self, fd, nfields):
        """Check header, trailer and index against each other and the manifest."""
        p = self.path
        st = os.fstat(fd)
        if st.st_size != self.size:
            raise CorruptError("%s: file is %d bytes, manifest says %d"
                               % (p, st.st_size, self.size))
        if self.size < HEADER_SIZE + TRAILER_SIZE:
            raise CorruptError("%s: %d bytes is too short for a shard" % (p, self.size))
        hdr = _pread_exact(fd, HEADER_SIZE, 0, p, "header")
        magic, ver, nf, first, nrec, nblk, zero, h = _HDR.unpack(hdr)
        if magic != HEADER_MAGIC:
            raise CorruptError("%s: header: bad magic %r" % (p, magic))
        if xxh64(hdr[:56]) != h:
            raise CorruptError("%s: header: checksum mismatch" % p)
        if ver != FORMAT_VERSION:
            raise CorruptError("%s: header: format version %d" % (p, ver))
        if zero != bytes(16):
            raise CorruptError("%s: header: reserved bytes 40..55 are not zero" % p)
        if nf != nfields:
            raise CorruptError("%s: header: %d fields, schema has %d" % (p, nf, nfields))
        if (first, nrec, nblk) != (self.first_sample, self.num_samples, self.num_blocks):
            raise CorruptError("%s: header: first_sample/num_records/num_blocks %d/%d/%d, "
                               "manifest says %d/%d/%d" % (p, first, nrec, nblk,
                                                           self.first_sample,
                                                           self.num_samples, self.num_blocks))
        trl = _pread_exact(fd, TRAILER_SIZE, self.size - TRAILER_SIZE, p, "trailer")
        idxoff, tnblk, tnrec, idxh, tzero, th, tmagic = _TRL.unpack(trl)
        if tmagic != TRAILER_MAGIC:
            raise CorruptError("%s: trailer: bad magic %r" % (p, tmagic))
        if xxh64(trl[:48]) != th:
            raise CorruptError("%s: trailer: checksum mismatch" % p)
        if tzero != bytes(16):
            raise CorruptError("%s: trailer: reserved bytes 32..47 are not zero" % p)
        if (tnblk, tnrec) != (nblk, nrec):
            raise CorruptError("%s: trailer says %d blocks / %d records, header %d / %d"
                               % (p, tnblk, tnrec, nblk, nrec))
        if idxoff < HEADER_SIZE or idxoff + INDEX_ENTRY * nblk + TRAILER_SIZE != self.size:
            raise CorruptError("%s: index_offset %d + 40 x %d blocks + 64 != file size %d"
                               % (p, idxoff, nblk, self.size))
        ib = _pread_exact(fd, INDEX_ENTRY * nblk, idxoff, p, "index")
        if xxh64(ib) != idxh:
            raise CorruptError("%s: index: checksum mismatch" % p)
        idx = np.frombuffer(ib, dtype=_IDX)
        if nblk:
            off = idx["offset"].astype(np.uint64)
            comp = idx["comp_size"].astype(np.uint64)
            nr = idx["num_records"].astype(np.uint64)
            bad = None
            if off[0] != HEADER_SIZE:
                bad = 0, "offset %d, expected %d" % (off[0], HEADER_SIZE)
            elif np.any(off[1:] != off[:-1] + comp[:-1]):
                b = int(np.argmax(off[1:] != off[:-1] + comp[:-1])) + 1
                bad = b, "offset %d, previous block ends at %d" % (
                    off[b], off[b - 1] + comp[b - 1])
            elif off[-1] + comp[-1] != idxoff:
                bad = nblk - 1, "ends at %d, index_offset is %d" % (off[-1] + comp[-1], idxoff)
            elif np.any(nr == 0):
                bad = int(np.argmax(nr == 0)), "num_records is 0"
            elif np.any(idx["zero"] != 0):
                bad = int(np.argmax(idx["zero"] != 0)), "reserved bytes 28..31 not zero"
            elif np.any(comp == 0):
                bad = int(np.argmax(comp == 0)), "comp_size is 0"
            else:
                fr = np.concatenate(([0], np.cumsum(nr)[:-1])).astype(np.uint64)
                if np.any(idx["first_record"] != fr):
                    b = int(np.argmax(idx["first_record"] != fr))
                    bad = b, "first_record %d, expected %d" % (idx["first_record"][b], fr[b])
                elif int(nr.sum()) != nrec:
                    bad = nblk - 1, "record counts add up to %d, header says %d" % (
                        int(nr.sum()), nrec)
            if bad:
                raise CorruptError("%s: index: block %d: %s" % (p, bad[0], bad[1]))
        elif nrec:
            raise CorruptError("%s: %d records in no blocks" % (p, nrec))
        elif idxoff != HEADER_SIZE:
            raise CorruptError("%s: no blocks, but index_offset is %d" % (p, idxoff))
        self.index = idx


# --------------------------------------------------------------------------
# Dataset
# --------------------------------------------------------------------------

_CONTENT_SIZE_UNKNOWN = (1 << 64) - 1


def _copy_fixed(col, j):
    return col[j].copy()


def _copy_scalar(col, j):
    return np.array(col[j])


def _view_fixed(col, j):
    return col[j, ...]


def _copy_var(col, j):
    return col[j].copy()


def _copy_str(col, j):
    return col[j]


def _view_var(col, j):
    return col[j]


_live = weakref.WeakSet()       # datasets of this process, reset in a forked child


def _after_fork_in_child():
    for ds in list(_live):
        try:
            ds._reset_process_state()
        except Exception:
            pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class Dataset:
    """A feedd dataset directory (see the module docstring)."""

    def __init__(self, path):
        self.path = os.fspath(path)
        mpath = os.path.join(self.path, "manifest.pb")
        with open(mpath, "rb") as fh:
            mbytes = fh.read()
        try:
            m = decode_message(mbytes, MANIFEST_SPEC)
        except FormatError as e:
            raise FormatError("%s: %s" % (mpath, e)) from None
        self.manifest = m
        if m["format_version"] != FORMAT_VERSION:
            raise FormatError("%s: format_version %d, this reader knows %d"
                              % (mpath, m["format_version"], FORMAT_VERSION))
        if not re.fullmatch(r"[0-9a-f]{16}", m["version"]):
            raise FormatError("%s: version %r is not 16 lowercase hex digits"
                              % (mpath, m["version"]))
        self.name = m["name"]
        self.version = m["version"]
        self.source = m["source"]
        self.block_bytes = m["block_bytes"]
        self.block_records = m["block_records"]
        self.zstd_level = m["zstd_level"]
        self.max_block_raw = m["max_block_raw"]
        self.max_block_comp = m["max_block_comp"]
        self.schema_bytes = m["_raw_schema"]
        self.schema = _check_schema(m["schema"]["fields"], mpath)
        self.fields = {f.name: f for f in self.schema}
        self._n = m["num_samples"]

        self._shards = []
        names = set()
        expect = 0
        for i, info in enumerate(m["shards"]):
            s = _Shard(info, self.path)
            if not s.file or "/" in s.file or s.file in (".", "..", "manifest.pb") \
                    or "\0" in s.file:
                raise FormatError("%s: shard %d: bad file name %r" % (mpath, i, s.file))
            if s.file in names:
                raise FormatError("%s: shard file %r listed twice" % (mpath, s.file))
            names.add(s.file)
            if s.first_sample != expect:
                raise FormatError("%s: shard %d (%s): first_sample %d, expected %d"
                                  % (mpath, i, s.file, s.first_sample, expect))
            expect += s.num_samples
            self._shards.append(s)
        if expect != self._n:
            raise FormatError("%s: shards hold %d samples, num_samples is %d"
                              % (mpath, expect, self._n))

        self._pid = os.getpid()
        self._fds = {}
        nf = len(self.schema)
        firsts = []          # global first sample of every global block
        where = []           # (shard number, local block) of every global block
        max_raw = max_comp = 0
        for si, s in enumerate(self._shards):
            s.load_footer(self._fd(si), nf)
            s.block_base = len(firsts)
            if s.num_blocks:
                firsts.extend((s.index["first_record"] + np.uint64(s.first_sample)).tolist())
                where.extend((si, b) for b in range(s.num_blocks))
                max_raw = max(max_raw, int(s.index["raw_size"].max()))
                max_comp = max(max_comp, int(s.index["comp_size"].max()))
        if (max_raw, max_comp) != (self.max_block_raw, self.max_block_comp):
            raise FormatError("%s: max_block_raw/max_block_comp %d/%d, the shards' "
                              "largest blocks are %d/%d" % (mpath, self.max_block_raw,
                                                            self.max_block_comp,
                                                            max_raw, max_comp))
        self._firsts = firsts
        self._where = where
        self._counts = [n for s in self._shards for n in s.index["num_records"].tolist()]
        self._reset_process_state(keep_fds=True)

    # -- process-local state -------------------------------------------------
    # File descriptors, the zstd context and the cached block belong to one
    # process: a forked child (DataLoader worker) drops them (closing its
    # inherited copies of the descriptors) and reopens lazily; a pickled copy
    # (spawn) starts without them.

    def _reset_process_state(self, keep_fds=False):
        if not keep_fds:
            fds, self._fds = getattr(self, "_fds", None), {}
            if fds and getattr(self, "_pid", None) != os.getpid():
                for fd in fds.values():           # inherited copies: ours to close
                    try:
                        os.close(fd)
                    except OSError:
                        pass
        self._pid = os.getpid()
        self._dctx = zstandard.ZstdDecompressor()
        self._cache_block = -1
        self._cache_lo = 0
        self._cache_n = 0           # cached block holds global [lo, lo + n)
        self._cache_cols = None
        self._getters = ()
        self._views = ()
        _live.add(self)

    def __getstate__(self):
        st = {k: v for k, v in self.__dict__.items()
              if k not in ("_fds", "_dctx", "_cache_cols", "_getters", "_views")}
        st["_pid"] = -1
        return st

    def __setstate__(self, st):
        self.__dict__.update(st)
        self._reset_process_state()

    def _fd(self, si):
        if self._pid != os.getpid():
            self._reset_process_state()
        fd = self._fds.get(si)
        if fd is None:
            s = self._shards[si]
            fd = os.open(s.path, os.O_RDONLY | os.O_CLOEXEC)
            if getattr(s, "index", None) is not None:
                size = os.fstat(fd).st_size
                if size != s.size:
                    os.close(fd)
                    raise CorruptError("%s: file is %d bytes, manifest says %d"
                                       % (s.path, size, s.size))
            self._fds[si] = fd
        return fd

    def close(self):
        """Close the shard files (they reopen on the next read)."""
        if self._pid == os.getpid():
            for fd in self._fds.values():
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._fds = {}
        self._cache_block = -1
        self._cache_lo = self._cache_n = 0
        self._cache_cols = None
        self._getters = self._views = ()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    # -- lookup --------------------------------------------------------------

    def __len__(self):
        return self._n

    @property
    def num_blocks(self):
        return len(self._firsts)

    @property
    def shards(self):
        """[(file, first_sample, num_samples, num_blocks)] in sample order."""
        return [(s.file, s.first_sample, s.num_samples, s.num_blocks) for s in self._shards]

    def block_info(self, b):
        """(shard file, local block number, index entry as a dict) of global block b."""
        si, lb = self._where[b]
        s = self._shards[si]
        e = s.index[lb]
        return s.file, lb, {k: int(e[k]) for k in _IDX.names}

    def block_of(self, i):
        """(global block, record within that block) of sample i."""
        i = self._index(i)
        b = bisect.bisect_right(self._firsts, i) - 1
        return b, i - self._firsts[b]

    def block_range(self, b):
        """[first, end) global sample range of global block b."""
        return self._firsts[b], self._firsts[b] + self._counts[b]

    def _index(self, i):
        i = operator.index(i)
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError("sample %d out of range [0, %d)" % (i, self._n))
        return i

    # -- decoding ------------------------------------------------------------

    def read_block_bytes(self, b):
        """The verified, decoded bytes of global block b."""
        if not 0 <= b < len(self._where):
            raise IndexError("block %d out of range [0, %d)" % (b, len(self._where)))
        si, lb = self._where[b]
        s = self._shards[si]
        fd = self._fd(si)
        e = s.index[lb]
        off, comp, raw, h = int(e["offset"]), int(e["comp_size"]), int(e["raw_size"]), \
            int(e["xxh64"])
        where = "%s: block %d" % (s.path, lb)
        if raw > self.max_block_raw:
            raise CorruptError("%s: raw_size %d exceeds max_block_raw %d"
                               % (where, raw, self.max_block_raw))
        data = os.pread(fd, comp, off)
        if len(data) != comp:
            raise CorruptError("%s: short read (%d of %d bytes): file truncated"
                               % (where, len(data), comp))
        if xxh64(data) != h:
            raise CorruptError("%s: xxh64 mismatch (stored %016x, computed %016x)"
                               % (where, h, xxh64(data)))
        try:
            fp = zstandard.get_frame_parameters(data)
            if fp.content_size != _CONTENT_SIZE_UNKNOWN and fp.content_size != raw:
                raise CorruptError("%s: zstd frame declares %d bytes, raw_size is %d"
                                   % (where, fp.content_size, raw))
            if raw == 0:
                dobj = self._dctx.decompressobj()
                out = dobj.decompress(data)
            else:
                out = self._dctx.decompress(data, max_output_size=raw)
        except zstandard.ZstdError as ex:
            raise CorruptError("%s: zstd: %s" % (where, ex)) from None
        if len(out) != raw:
            raise CorruptError("%s: decoded to %d bytes, raw_size is %d"
                               % (where, len(out), raw))
        if _frame_size is not None:
            fs = _frame_size(data, comp)
            if fs != comp:
                raise CorruptError("%s: the zstd frame is %s bytes, comp_size is %d"
                                   % (where, fs if fs < (1 << 63) else "not", comp))
        return out

    def read_block(self, b):
        """Columns of global block b: {name: column} in schema order.

        A fixed field's column is a read-only array of shape (n,) + shape; a
        variable field's is a VarColumn (offsets, data, col[j]). The last block
        read is cached.
        """
        if b == self._cache_block and self._pid == os.getpid():
            return self._cache_cols
        buf = self.read_block_bytes(b)
        si, lb = self._where[b]
        where = "%s: block %d" % (self._shards[si].path, lb)
        n = self._counts[b]
        cols = parse_block(buf, n, self.schema, where)
        self._cache_block = -1
        self._cache_n = 0
        self._cache_cols = cols
        getters = []
        views = []
        for f in self.schema:
            c = cols[f.name]
            if f.variable:
                getters.append((f.name, c, _copy_str if f.dtype == "str" else _copy_var))
                views.append((f.name, c, _view_var))
            else:
                getters.append((f.name, c, _copy_fixed if f.shape else _copy_scalar))
                views.append((f.name, c, _view_fixed))
        self._getters = tuple(getters)
        self._views = tuple(views)
        self._cache_lo = self._firsts[b]
        self._cache_n = n
        self._cache_block = b
        return cols

    def get(self, i, copy=True):
        """Sample i as {name: value}: numpy arrays (own, writable memory), str
        for str fields. copy=False returns read-only views into the cached
        block instead (they keep the block's bytes alive)."""
        j = i - self._cache_lo
        if not 0 <= j < self._cache_n:
            i = self._index(i)
            b = bisect.bisect_right(self._firsts, i) - 1
            self.read_block(b)
            j = i - self._cache_lo
        if copy:
            return {name: fn(col, j) for name, col, fn in self._getters}
        return {name: fn(col, j) for name, col, fn in self._views}

    def __getitem__(self, i):
        return self.get(i)

    def __iter__(self):
        for i in range(self._n):
            yield self.get(i)

    def verify(self):
        """Decode and check every block, and check the content hash (version)."""
        for b in range(self.num_blocks):
            self.read_block(b)
        hs = XXH64Stream()
        hs.update(self.schema_bytes)
        for si, s in enumerate(self._shards):
            fd = self._fd(si)
            off = 0
            while off < s.size:
                chunk = os.pread(fd, min(1 << 22, s.size - off), off)
                if not chunk:
                    raise CorruptError("%s: truncated while hashing" % s.path)
                hs.update(chunk)
                off += len(chunk)
        got = "%016x" % hs.digest()
        if got != self.version:
            raise CorruptError("%s: content hash %s, manifest version is %s"
                               % (self.path, got, self.version))
        return got

    def __repr__(self):
        return "<feedformat.Dataset %r %s: %d samples, %d blocks, %d shards, %r>" % (
            self.name, self.version, self._n, self.num_blocks, len(self._shards), self.schema)


def _load_frame_size():
    """ZSTD_findFrameCompressedSize from libzstd, to check that a block is
    exactly one frame (python-zstandard ignores bytes after the frame)."""
    try:
        lib = ctypes.CDLL("libzstd.so.1")
        fn = lib.ZSTD_findFrameCompressedSize
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    fn.restype = ctypes.c_size_t
    return fn


_frame_size = _load_frame_size()


# --------------------------------------------------------------------------
# Command line: python3 feedformat.py DIR [--verify] [--bench]
# --------------------------------------------------------------------------

def main(argv=None):
    import argparse
    import time
    ap = argparse.ArgumentParser(description="Inspect, verify or time a feedd dataset.")
    ap.add_argument("dir")
    ap.add_argument("--verify", action="store_true", help="decode every block, check version")
    ap.add_argument("--bench", action="store_true", help="time sequential ds[i] over all samples")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args(argv)
    ds = Dataset(a.dir)
    print("name %r version %s samples %d blocks %d shards %d xxh64 %s"
          % (ds.name, ds.version, len(ds), ds.num_blocks, len(ds.shards), XXH64_BACKEND))
    for f in ds.schema:
        print("  ", f)
    if a.verify:
        print("verified: version", ds.verify())
    if a.bench:
        for r in range(a.repeat):
            ds.close()
            t = time.perf_counter()
            for i in range(len(ds)):
                ds[i]
            dt = time.perf_counter() - t
            print("sequential ds[i]: %d samples in %.3f s = %.0f samples/s"
                  % (len(ds), dt, len(ds) / dt))
    return 0


if __name__ == "__main__":
    sys.exit(main())
