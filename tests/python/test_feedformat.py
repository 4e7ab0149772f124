"""bench/feedformat.py, the independent Python reader, against the C writer.

Each case packs source data with feedpack (fixture from conftest.py) and
checks that feedformat reads back exactly the source: every npy dtype,
scalar and multi-dimensional shapes, variable bytes and str fields (empty
files too), tokens, IDX; block sizes down to one record per block; several
shards. Corrupted shards must raise CorruptError naming shard and block.
Also unit tests of the reader's XXH64 and protobuf decoder.
"""

import gzip
import os
import pathlib
import pickle
import struct
import subprocess
import sys

import numpy as np
import pytest

SRC = pathlib.Path(os.environ.get("FEED_SRC", pathlib.Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(SRC / "bench"))

import feedformat as ff  # noqa: E402


def pack(feedpack, *args):
    r = subprocess.run([feedpack, *map(str, args)], capture_output=True, text=True)
    assert r.returncode == 0, f"feedpack {' '.join(map(str, args))}: {r.stderr}"
    return r


# ---------------------------------------------------------------------------
# XXH64
# ---------------------------------------------------------------------------

XXH64_VECTORS = [          # (data, seed, hash): published vectors and libxxhash 0.8.1
    (b"", 0, 0xEF46DB3751D8E999),
    (b"a", 0, 0xD24EC4F1A98C6E5B),
    (b"abc", 0, 0x44BC2CF5AD770999),
    (b"Nobody inspects the spammish repetition", 0, 0xFBCEA83C8A378BF1),
    (b"abc", 2654435761, 0x1318DF30094A85FD),
    (bytes(range(256)) * 4, 0, 0x6F3914F18FE4DF57),
    (bytes(range(256)) * 4, 2654435761, 0xB05AF54D5F68BFF7),
]


@pytest.mark.parametrize("data,seed,want", XXH64_VECTORS)
def test_xxh64_vectors(data, seed, want):
    assert ff.xxh64(data, seed) == want
    assert ff.xxh64_py(data, seed) == want
    assert ff.xxh64(bytearray(data), seed) == want
    assert ff.xxh64(memoryview(data), seed) == want


def test_xxh64_backends_agree():
    rng = np.random.default_rng(1)
    for n in list(range(0, 70)) + [255, 256, 1000, 4099]:
        d = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        for seed in (0, 1, (1 << 64) - 1):
            h = ff.xxh64(d, seed)
            assert ff.xxh64_py(d, seed) == h, (n, seed)
            for stream in (ff.XXH64Stream(seed), ff._PyStream(seed)):
                for k in range(0, n, 13):
                    stream.update(d[k:k + 13])
                assert stream.digest() == h, (n, seed, type(stream))


# ---------------------------------------------------------------------------
# protobuf decoder
# ---------------------------------------------------------------------------

def varint(v):
    v &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def pb_varint(num, v):
    return varint(num << 3) + varint(v)


def pb_bytes(num, b):
    if isinstance(b, str):
        b = b.encode()
    return varint(num << 3 | 2) + varint(len(b)) + b


def pb_field(name, dtype, shape, variable, max_bytes, packed=True):
    m = pb_bytes(1, name) + pb_varint(2, dtype)
    if packed and shape:
        m += pb_bytes(3, b"".join(varint(d) for d in shape))
    elif shape:
        m += b"".join(pb_varint(3, d) for d in shape)
    if variable:
        m += pb_varint(4, 1)
    return m + pb_varint(5, max_bytes)


def test_protobuf_manifest():
    f1 = pb_field("image", 1, [28, 28, 1], False, 784, packed=True)
    f2 = pb_field("ids", 5, [300000, 2], True, 4800000, packed=False)
    f3 = pb_field("name", 14, [], True, 9)
    schema_a = pb_bytes(1, f1)
    schema_b = pb_bytes(1, f2) + pb_bytes(1, f3)
    shard = pb_bytes(1, "s0.fsh") + pb_varint(2, 1 << 40) + pb_varint(4, 7) + pb_varint(5, 2)
    m = (pb_varint(1, 1) + pb_bytes(2, "dsé") + pb_bytes(3, "0123456789abcdef")
         + pb_bytes(4, schema_a)
         + pb_varint(99, 12345)                          # unknown varint
         + varint(98 << 3 | 5) + b"\1\2\3\4"             # unknown fixed32
         + varint(97 << 3 | 1) + b"\1\2\3\4\5\6\7\x08"   # unknown fixed64
         + pb_bytes(96, b"\xff\xfe junk")                 # unknown bytes
         + pb_varint(5, 7) + pb_bytes(6, shard) + pb_varint(7, 65536)
         + pb_varint(8, 0xFFFFFFFF) + pb_varint(9, -5) + pb_varint(10, (1 << 64) - 1)
         + pb_bytes(4, schema_b)                          # merged into the first
         + pb_bytes(12, "npy a=a.npy"))
    d = ff.decode_message(m, ff.MANIFEST_SPEC)
    assert d["format_version"] == 1
    assert d["name"] == "dsé" and d["version"] == "0123456789abcdef"
    assert d["num_samples"] == 7 and d["block_bytes"] == 65536
    assert d["block_records"] == 0xFFFFFFFF
    assert d["zstd_level"] == -5
    assert d["max_block_raw"] == (1 << 64) - 1
    assert d["max_block_comp"] == 0                      # absent: proto3 default
    assert d["source"] == "npy a=a.npy"
    assert d["_raw_schema"] == schema_a + schema_b
    fields = d["schema"]["fields"]
    assert [f["name"] for f in fields] == ["image", "ids", "name"]
    assert fields[0] == dict(name="image", dtype=1, shape=[28, 28, 1], variable=False,
                             max_bytes=784)
    assert fields[1]["shape"] == [300000, 2] and fields[1]["variable"] is True
    assert fields[2]["shape"] == [] and fields[2]["dtype"] == 14
    assert d["shards"] == [dict(file="s0.fsh", size=1 << 40, first_sample=0,
                                num_samples=7, num_blocks=2)]
    empty = ff.decode_message(b"", ff.MANIFEST_SPEC)
    assert empty["name"] == "" and empty["shards"] == [] and empty["schema"]["fields"] == []


@pytest.mark.parametrize("bad", [
    b"\x08",                              # truncated varint value
    b"\x08\x80",                          # truncated varint
    b"\x08" + b"\xff" * 10 + b"\x01",     # varint longer than 10 bytes
    b"\x08" + b"\xff" * 9 + b"\x02",      # varint over 64 bits
    b"\x12\x05abc",                       # length past the end
    b"\x0b",                              # wire type 3 (group)
    b"\x0c",                              # wire type 4
    b"\x0e",                              # wire type 6
    b"\x00\x01",                          # field number 0
    b"\x08" + varint(1 << 32),            # uint32 overflow
    b"\x12\x02\xff\xfe",                  # string not UTF-8
    b"\x22\x01\x08",                      # schema: truncated varint inside
    b"\x0a\x01\x01",                      # format_version with wire type 2
    b"\x10\x01",                          # name (string) with wire type 0
])
def test_protobuf_errors(bad):
    with pytest.raises(ff.FormatError):
        ff.decode_message(bad, ff.MANIFEST_SPEC)


# ---------------------------------------------------------------------------
# npy: every dtype, scalar and multi-dimensional, several block layouts
# ---------------------------------------------------------------------------

NPY_DTYPES = ["|u1", "|i1", "<u2", "<i2", "<u4", "<i4", "<u8", "<i8", "<f2", "<f4",
              "<f8", "|b1"]
MULTI_SHAPES = [(3,), (2, 3), (2, 1, 4), (5, 2), (1,), (4, 4, 2)]
N_NPY = 157


def random_array(rng, dtype, shape):
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return rng.integers(0, 2, shape).astype(dt)
    if dt.kind in "ui":
        info = np.iinfo(dt)
        a = rng.integers(info.min, info.max, shape, dtype=dt, endpoint=True)
        a.flat[:2] = [info.min, info.max][:a.size]
        return a
    a = (rng.standard_normal(shape) * 1e3).astype(dt)
    special = np.array([np.nan, np.inf, -np.inf, -0.0, np.finfo(dt).max], dtype=dt)
    a.flat[:len(special)] = special[:a.size]
    return a


@pytest.fixture(scope="module")
def npy_sources(tmp_path_factory):
    d = tmp_path_factory.mktemp("npy")
    rng = np.random.default_rng(7)
    arrays = {}
    for k, dt in enumerate(NPY_DTYPES):
        tag = np.dtype(dt).str[1:]
        arrays[f"s_{tag}"] = random_array(rng, dt, (N_NPY,))
        arrays[f"m.{tag}-x"] = random_array(rng, dt, (N_NPY,) + MULTI_SHAPES[k % 6])
    args = []
    for name, a in arrays.items():
        p = d / (name + ".npy")
        np.save(p, a)
        args.append(f"{name}={p}")
    return arrays, args


def same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def check_fixed_dataset(ds, arrays, rng):
    assert len(ds) == len(next(iter(arrays.values())))
    assert [f.name for f in ds.schema] == list(arrays)
    for f in ds.schema:
        a = arrays[f.name]
        assert f.dtype == a.dtype.newbyteorder("<") or f.dtype == a.dtype
        assert f.shape == a.shape[1:] and f.variable is False
        assert f.max_bytes == a[0].nbytes
    # sequential, then random order, then negative indices
    order = list(range(len(ds))) + list(rng.permutation(len(ds))) + [-1, -len(ds)]
    for i in order:
        rec = ds[i]
        assert list(rec) == list(arrays)
        for name, a in arrays.items():
            assert same(rec[name], a[i]), (name, i)
            assert rec[name].flags.writeable
    for i in rng.permutation(len(ds))[:20]:
        b, j = ds.block_of(int(i))
        lo, hi = ds.block_range(b)
        assert lo + j == i and lo <= i < hi
    # whole blocks
    seen = 0
    for b in range(ds.num_blocks):
        cols = ds.read_block(b)
        lo, hi = ds.block_range(b)
        assert lo == seen and hi > lo
        seen = hi
        for name, a in arrays.items():
            assert same(cols[name], a[lo:hi]), (name, b)
    assert seen == len(ds)
    with pytest.raises(IndexError):
        ds[len(ds)]
    with pytest.raises(IndexError):
        ds[-len(ds) - 1]


@pytest.mark.parametrize("opts", [
    [],
    ["--block-records", "1"],
    ["--block-records", "7", "--level", "19"],
    ["--block-bytes", "1k", "--level", "1"],
    ["--block-bytes", "2k", "--shard-bytes", "8k"],
    ["--block-records", "1", "--shard-bytes", "3k"],
], ids=["default", "one-per-block", "7-per-block", "1k-blocks", "shards", "one-per-block-shards"])
def test_npy(feedpack, npy_sources, tmp_path, opts):
    arrays, args = npy_sources
    out = tmp_path / "ds"
    pack(feedpack, "npy", *args, "-o", out, *opts)
    ds = ff.Dataset(out)
    assert ds.name == "ds" and len(ds.version) == 16
    check_fixed_dataset(ds, arrays, np.random.default_rng(3))
    assert ds.verify() == ds.version
    m = ds.manifest
    if "--block-records" in opts:
        cap = int(opts[opts.index("--block-records") + 1])
        assert m["block_records"] == cap
        assert all(hi - lo <= cap for lo, hi in map(ds.block_range, range(ds.num_blocks)))
        if cap == 1:
            assert ds.num_blocks == len(ds)
    if "--level" in opts:
        assert m["zstd_level"] == int(opts[opts.index("--level") + 1])
    if "--shard-bytes" in opts:
        assert len(ds.shards) > 1
    assert sum(s[2] for s in ds.shards) == len(ds)
    # the C tool agrees on what it wrote
    r = pack(feedpack, "inspect", out)
    assert ds.version in r.stdout


def test_pickle_and_fork(feedpack, npy_sources, tmp_path):
    arrays, args = npy_sources
    out = tmp_path / "ds"
    pack(feedpack, "npy", *args, "-o", out, "--block-records", "5", "--shard-bytes", "8k")
    ds = ff.Dataset(out)
    ds[10]                                   # cache a block, open a file
    ds2 = pickle.loads(pickle.dumps(ds))
    for i in (0, 77, len(ds) - 1):
        assert same(ds2[i]["m.f8-x"], arrays["m.f8-x"][i])
    pid = os.fork()
    if pid == 0:                             # child: reads on its own
        try:
            ok = all(same(ds[i]["s_i8"], arrays["s_i8"][i]) for i in range(len(ds)))
            ok = ok and ds._pid == os.getpid()
        except BaseException:
            ok = False
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert status == 0
    assert same(ds[3]["s_u1"], arrays["s_u1"][3])
    views = ds.get(4, copy=False)
    assert not views["m.u1-x"].flags.writeable
    ds.close()
    assert same(ds[156]["s_b1"], arrays["s_b1"][156])


# ---------------------------------------------------------------------------
# files: variable u8 and str fields, empty files
# ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def file_tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("files") / "in"
    rng = np.random.default_rng(11)
    contents = {
        "empty": b"",
        "a/b/c/deep.bin": rng.integers(0, 256, 20000, dtype=np.uint8).tobytes(),
        "a/empty2": b"",
        "x.txt": b"hello\n",
        "zz/\u00e9t\u00e9 \u20ac.dat": "caf\u00e9".encode(),
        "a/big": rng.integers(0, 256, 70000, dtype=np.uint8).tobytes(),
        "z-last": b"\0" * 64,
    }
    for i in range(40):
        contents[f"many/f{i:03d}"] = bytes(rng.integers(0, 256, int(rng.integers(0, 300)),
                                                        dtype=np.uint8))
    for rel, data in contents.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    items = sorted(contents.items(), key=lambda kv: kv[0].encode())
    return root, items


@pytest.mark.parametrize("opts", [
    [],
    ["--block-records", "1"],
    ["--block-records", "2", "--shard-bytes", "10k"],
    ["--block-bytes", "512", "--shard-bytes", "4k"],
], ids=["default", "one-per-block", "2-per-block-shards", "512b-blocks-shards"])
def test_files(feedpack, file_tree, tmp_path, opts):
    root, items = file_tree
    out = tmp_path / "fds"
    pack(feedpack, "files", root, "-o", out, *opts)
    ds = ff.Dataset(out)
    assert len(ds) == len(items)
    data_f, name_f = ds.schema
    assert (data_f.name, data_f.dtype, data_f.shape, data_f.variable) == \
        ("data", np.dtype("u1"), (), True)
    assert (name_f.name, name_f.dtype, name_f.shape, name_f.variable) == \
        ("name", "str", (), True)
    assert data_f.max_bytes == max(len(d) for _, d in items)
    assert name_f.max_bytes == max(len(n.encode()) for n, _ in items)
    rng = np.random.default_rng(5)
    for i in list(range(len(ds))) + list(rng.permutation(len(ds))):
        rec = ds[i]
        name, data = items[i]
        assert rec["name"] == name
        assert isinstance(rec["name"], str)
        assert rec["data"].dtype == np.uint8 and rec["data"].shape == (len(data),)
        assert rec["data"].tobytes() == data
    for b in range(ds.num_blocks):
        cols = ds.read_block(b)
        lo, hi = ds.block_range(b)
        assert len(cols["data"]) == hi - lo == len(cols["name"])
        assert list(cols["name"]) == [n for n, _ in items[lo:hi]]
        assert cols["data"].offsets[0] == 0
        assert cols["data"].data.tobytes() == b"".join(d for _, d in items[lo:hi])
    if "--shard-bytes" in opts:
        assert len(ds.shards) > 1
    assert ds.verify() == ds.version


# ---------------------------------------------------------------------------
# tokens and IDX
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["uint16", "uint32"])
def test_tokens(feedpack, tmp_path, dtype):
    rng = np.random.default_rng(2)
    dt = np.dtype(dtype).newbyteorder("<")
    toks = rng.integers(0, np.iinfo(dt).max, 10 * 33 + 5, dtype=dt, endpoint=True)
    src = tmp_path / "toks.bin"
    src.write_bytes(toks.tobytes())
    out = tmp_path / "tds"
    pack(feedpack, "tokens", src, "--dtype", dtype, "--seq-len", 33, "-o", out,
         "--block-records", "3")
    ds = ff.Dataset(out)
    assert len(ds) == 10
    (f,) = ds.schema
    assert (f.name, f.dtype, f.shape, f.variable) == ("tokens", dt, (33,), False)
    for i in range(10):
        assert same(ds[i]["tokens"], toks[i * 33:(i + 1) * 33])
    assert ds.verify() == ds.version


def idx_bytes(arr):
    code = {np.dtype("u1"): 0x08}[arr.dtype]
    head = struct.pack(">HBB", 0, code, arr.ndim) + struct.pack(">%dI" % arr.ndim, *arr.shape)
    return head + arr.tobytes()


@pytest.mark.parametrize("gz", [False, True])
def test_idx(feedpack, tmp_path, gz):
    rng = np.random.default_rng(4)
    images = rng.integers(0, 256, (250, 7, 5), dtype=np.uint8)
    labels = rng.integers(0, 10, 250, dtype=np.uint8)
    wrap = gzip.compress if gz else (lambda b: b)
    ip = tmp_path / ("img.idx" + (".gz" if gz else ""))
    lp = tmp_path / ("lbl.idx" + (".gz" if gz else ""))
    ip.write_bytes(wrap(idx_bytes(images)))
    lp.write_bytes(wrap(idx_bytes(labels)))
    out = tmp_path / "ids"
    pack(feedpack, "idx", ip, lp, "-o", out, "--block-bytes", "1k")
    ds = ff.Dataset(out)
    assert [(f.name, f.dtype, f.shape, f.variable) for f in ds.schema] == [
        ("image", np.dtype("u1"), (7, 5, 1), False), ("label", np.dtype("u1"), (), False)]
    assert ds.num_blocks > 1
    for i in range(len(ds)):
        rec = ds[i]
        assert same(rec["image"], images[i].reshape(7, 5, 1))
        assert same(rec["label"], labels[i].reshape(()))
    assert ds.verify() == ds.version


# ---------------------------------------------------------------------------
# corruption
# ---------------------------------------------------------------------------

@pytest.fixture
def sharded(feedpack, npy_sources, tmp_path):
    """A dataset with several shards and blocks, and its source arrays."""
    arrays, args = npy_sources
    out = tmp_path / "cds"
    pack(feedpack, "npy", *args, "-o", out, "--block-records", "4", "--shard-bytes", "6k")
    ds = ff.Dataset(out)
    assert len(ds.shards) >= 3 and all(s[3] >= 3 for s in ds.shards[:2])
    return out, ds, arrays


def flip(path, offset):
    with open(path, "r+b") as fh:
        fh.seek(offset)
        b = fh.read(1)
        fh.seek(offset)
        fh.write(bytes([b[0] ^ 0x40]))


def global_block(ds, shard_no, local):
    return sum(s[3] for s in ds.shards[:shard_no]) + local


def test_flipped_block_byte(sharded):
    out, ds, arrays = sharded
    gb = global_block(ds, 1, 2)
    file, lb, e = ds.block_info(gb)
    assert lb == 2 and file == ds.shards[1][0]
    flip(out / file, e["offset"] + e["comp_size"] // 2)
    ds = ff.Dataset(out)                     # footers intact: opens
    lo, hi = ds.block_range(gb)
    assert same(ds[lo - 1]["s_u8"], arrays["s_u8"][lo - 1])   # neighbours read fine
    assert same(ds[hi]["s_u8"], arrays["s_u8"][hi])
    for i in (lo, hi - 1):
        with pytest.raises(ff.CorruptError) as ei:
            ds[i]
        msg = str(ei.value)
        assert file in msg and "block 2" in msg, msg
    with pytest.raises(ff.CorruptError, match="block 2"):
        ds.read_block(gb)
    with pytest.raises(ff.CorruptError):
        ds.verify()


@pytest.mark.parametrize("where", ["header", "index", "trailer", "trailer-magic",
                                   "truncated", "appended", "truncated-block"])
def test_corrupt_at_open(sharded, where):
    out, ds, arrays = sharded
    file = ds.shards[1][0]
    path = out / file
    size = path.stat().st_size
    _, _, e = ds.block_info(global_block(ds, 1, 0))
    if where == "header":
        flip(path, 20)
    elif where == "index":
        flip(path, size - 64 - 40 + 3)
    elif where == "trailer":
        flip(path, size - 64 + 2)
    elif where == "trailer-magic":
        flip(path, size - 1)
    elif where == "truncated":
        os.truncate(path, size - 1)
    elif where == "appended":
        with open(path, "ab") as fh:
            fh.write(b"\0")
    elif where == "truncated-block":
        os.truncate(path, e["offset"] + 5)
    with pytest.raises(ff.CorruptError) as ei:
        ff.Dataset(out)
    assert file in str(ei.value)


def test_truncated_after_open(sharded):
    out, ds, arrays = sharded
    last = ds.num_blocks - 1
    file, lb, e = ds.block_info(last)
    lo, _ = ds.block_range(last)
    os.truncate(out / file, e["offset"] + 1)
    with pytest.raises(ff.CorruptError) as ei:
        ds[lo]
    assert file in str(ei.value) and f"block {lb}" in str(ei.value)


def test_manifest_mismatch(sharded):
    out, ds, arrays = sharded
    mb = (out / "manifest.pb").read_bytes()
    m = ff.decode_message(mb, ff.MANIFEST_SPEC)
    # a later occurrence of a scalar field overrides the first (proto3)
    (out / "manifest.pb").write_bytes(mb + pb_varint(5, m["num_samples"] + 1))
    with pytest.raises(ff.FormatError, match="num_samples"):
        ff.Dataset(out)
    (out / "manifest.pb").write_bytes(mb + pb_varint(1, 2))
    with pytest.raises(ff.FormatError, match="format_version"):
        ff.Dataset(out)
    (out / "manifest.pb").write_bytes(mb + pb_varint(10, m["max_block_raw"] + 1))
    with pytest.raises(ff.FormatError, match="max_block_raw"):
        ff.Dataset(out)
    (out / "manifest.pb").write_bytes(mb + pb_bytes(3, "0000000000000000"))
    ds2 = ff.Dataset(out)                    # opaque at open, checked by verify()
    with pytest.raises(ff.CorruptError, match="content hash"):
        ds2.verify()
