"""feedpack's command line: ingest (idx, npy, tokens, files), inspect, verify.

Each bad input must fail with exit 1 (2 for usage errors), one stderr line
"feedpack: <file>: <problem>", and leave neither the output directory nor a
temporary sibling behind. Byte-exact read-back is tested elsewhere (the C
unit tests and test_feedformat.py); here the datasets are checked through
`feedpack inspect` and `feedpack verify`.
"""

import gzip
import os
import re
import struct
import subprocess

import numpy as np
import pytest

SUMMARY = re.compile(r"^packed (\d+) samples into .+: [\d.]+ MB in, [\d.]+ MB on disk, "
                     r"ratio [\d.]+, [\d.]+ s, [\d.]+ MB/s$")


def run(feedpack, *args):
    return subprocess.run([feedpack, *map(str, args)], capture_output=True, text=True,
                          timeout=60)


def assert_fails(res, *words, code=1):
    """Exit code, and one 'feedpack: ...' line holding every word."""
    assert res.returncode == code, (res.returncode, res.stdout, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert lines and lines[0].startswith("feedpack: "), res.stderr
    if code == 1:
        assert len(lines) == 1, res.stderr
    for w in words:
        assert w in lines[0], (w, res.stderr)
    assert res.stdout == "", res.stdout


def assert_nothing_written(out):
    """No output directory and no temporary sibling of it."""
    assert not os.path.exists(out)
    base = os.path.basename(out)
    leftovers = [n for n in os.listdir(os.path.dirname(out))
                 if n == base or n.startswith(base + ".") or "tmp" in n]
    assert leftovers == [], leftovers


def inspect(feedpack, out):
    res = run(feedpack, "inspect", out)
    assert res.returncode == 0, res.stderr
    return res.stdout


def field_line(text, name):
    for line in text.splitlines():
        if line.split()[:1] == [name]:
            return line.split()
    raise AssertionError(f"no field {name} in:\n{text}")


def packed_ok(feedpack, res, out, samples):
    assert res.returncode == 0, res.stderr
    m = SUMMARY.match(res.stdout.strip())
    assert m and int(m.group(1)) == samples, res.stdout
    ver = run(feedpack, "verify", out)
    assert ver.returncode == 0, ver.stderr
    assert re.match(rf"ok: {samples} samples, \d+ blocks$", ver.stdout.strip()), ver.stdout
    leftovers = [n for n in os.listdir(os.path.dirname(out)) if ".tmp" in n]
    assert leftovers == []
    return inspect(feedpack, out)


# ---- IDX -----------------------------------------------------------------

def idx_bytes(magic, dims, data):
    return struct.pack(">I", magic) + struct.pack(f">{len(dims)}I", *dims) + data


def write_idx(path, magic, dims, data, gz):
    raw = idx_bytes(magic, dims, data)
    if gz:
        with gzip.open(path, "wb") as f:
            f.write(raw)
    else:
        with open(path, "wb") as f:
            f.write(raw)
    return str(path)


@pytest.fixture
def mnist(tmp_path):
    """A tiny IDX pair: 7 images of 4x3, gzip-compressed."""
    n, h, w = 7, 4, 3
    rng = np.random.default_rng(1)
    img = rng.integers(0, 256, size=(n, h, w), dtype=np.uint8).tobytes()
    lab = bytes(range(n))
    src = tmp_path / "src"
    src.mkdir()
    return (write_idx(src / "img.gz", 0x803, (n, h, w), img, True),
            write_idx(src / "lab.gz", 0x801, (n,), lab, True))


def test_idx_gz_round_trip(feedpack, tmp_path, mnist):
    out = str(tmp_path / "mn")
    res = run(feedpack, "idx", *mnist, "-o", out)
    text = packed_ok(feedpack, res, out, 7)
    assert res.stderr == ""  # no progress bar when stderr is not a terminal
    assert re.search(r"^name:\s+mn$", text, re.M)
    assert re.search(r"^samples:\s+7$", text, re.M)
    assert field_line(text, "image")[1:4] == ["u8", "[4,3,1]", "fixed"]
    assert field_line(text, "label")[1:4] == ["u8", "[]", "fixed"]
    assert "shard-00000.fsh" in text


def on_terminal(feedpack, *args):
    """feedpack with stderr on a pseudo-terminal: (exit code, what it drew)."""
    master, slave = os.openpty()
    try:
        res = subprocess.run([feedpack, *map(str, args)], stdout=subprocess.DEVNULL,
                             stderr=slave, timeout=60)
        os.close(slave)
        slave = -1
        drawn = b""
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: the terminal's writer is gone
                break
            if not chunk:
                break
            drawn += chunk
        return res.returncode, drawn.decode(errors="replace")
    finally:
        os.close(master)
        if slave >= 0:
            os.close(slave)


def test_progress_on_a_terminal_and_quiet(feedpack, tmp_path, mnist):
    """A terminal gets the progress line; --quiet keeps it off."""
    rc, drawn = on_terminal(feedpack, "idx", *mnist, "-o", tmp_path / "a")
    assert rc == 0 and "packing" in drawn and "samples" in drawn, drawn
    rc, drawn = on_terminal(feedpack, "idx", *mnist, "-o", tmp_path / "b", "--quiet")
    assert rc == 0 and drawn == "", drawn


def test_idx_plain_one_record_per_block(feedpack, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    img = write_idx(src / "img", 0x803, (5, 2, 2), bytes(20), False)
    lab = write_idx(src / "lab", 0x801, (5,), bytes(5), False)
    out = str(tmp_path / "one")
    res = run(feedpack, "idx", img, lab, "-o", out, "--block-records", "1", "--name", "x",
              "--level", "19")
    text = packed_ok(feedpack, res, out, 5)
    assert re.search(r"^blocks:\s+5 ", text, re.M)
    assert re.search(r"^name:\s+x$", text, re.M)
    assert "zstd level 19" in text


def test_idx_several_shards(feedpack, tmp_path, mnist):
    out = str(tmp_path / "sh")
    res = run(feedpack, "idx", *mnist, "-o", out, "--block-records", "1",
              "--shard-bytes", "100")
    text = packed_ok(feedpack, res, out, 7)
    shards = int(re.search(r"^shards:\s+(\d+)$", text, re.M).group(1))
    assert shards > 1


@pytest.mark.parametrize("gz", [True, False])
def test_idx_truncated_images(feedpack, tmp_path, gz):
    src = tmp_path / "src"
    src.mkdir()
    img = write_idx(src / "img", 0x803, (5, 4, 4), bytes(5 * 16 - 3), gz)
    lab = write_idx(src / "lab", 0x801, (5,), bytes(5), gz)
    out = str(tmp_path / "o")
    assert_fails(run(feedpack, "idx", img, lab, "-o", out), img, "truncated")
    assert_nothing_written(out)


def test_idx_truncated_gzip_stream(feedpack, tmp_path, mnist):
    src = tmp_path / "cut.gz"
    data = open(mnist[0], "rb").read()
    src.write_bytes(data[: len(data) // 2])
    out = str(tmp_path / "o")
    res = run(feedpack, "idx", src, mnist[1], "-o", out)
    assert_fails(res, str(src))
    assert "truncated" in res.stderr or "gzip" in res.stderr
    assert_nothing_written(out)


def test_idx_truncated_labels(feedpack, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    img = write_idx(src / "img", 0x803, (5, 2, 2), bytes(20), False)
    lab = write_idx(src / "lab", 0x801, (5,), bytes(3), False)
    out = str(tmp_path / "o")
    assert_fails(run(feedpack, "idx", img, lab, "-o", out), lab, "truncated")
    assert_nothing_written(out)


def test_idx_trailing_data(feedpack, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    img = write_idx(src / "img", 0x803, (2, 2, 2), bytes(9), False)
    lab = write_idx(src / "lab", 0x801, (2,), bytes(2), False)
    out = str(tmp_path / "o")
    assert_fails(run(feedpack, "idx", img, lab, "-o", out), img, "past the 2 records")
    assert_nothing_written(out)


def test_idx_wrong_magic(feedpack, tmp_path, mnist):
    out = str(tmp_path / "o")
    # Arguments swapped: the labels file is not an image file.
    assert_fails(run(feedpack, "idx", mnist[1], mnist[0], "-o", out), mnist[1], "magic")
    assert_nothing_written(out)
    junk = tmp_path / "junk"
    junk.write_bytes(b"hello world, not idx")
    assert_fails(run(feedpack, "idx", mnist[0], junk, "-o", out), str(junk), "magic")
    assert_nothing_written(out)


def test_idx_count_mismatch(feedpack, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    img = write_idx(src / "img", 0x803, (3, 2, 2), bytes(12), True)
    lab = write_idx(src / "lab", 0x801, (4,), bytes(4), True)
    out = str(tmp_path / "o")
    assert_fails(run(feedpack, "idx", img, lab, "-o", out), lab, "4 labels", "3 images")
    assert_nothing_written(out)


def test_idx_zero_samples(feedpack, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    img = write_idx(src / "img", 0x803, (0, 2, 2), b"", True)
    lab = write_idx(src / "lab", 0x801, (0,), b"", True)
    out = str(tmp_path / "o")
    assert_fails(run(feedpack, "idx", img, lab, "-o", out), img, "no images")
    assert_nothing_written(out)


def test_idx_missing_input(feedpack, tmp_path, mnist):
    out = str(tmp_path / "o")
    missing = str(tmp_path / "nope.gz")
    assert_fails(run(feedpack, "idx", missing, mnist[1], "-o", out), missing,
                 "No such file")
    assert_nothing_written(out)


# ---- output directory -----------------------------------------------------

def test_existing_output_is_refused(feedpack, tmp_path, mnist):
    out = tmp_path / "exists"
    out.mkdir()
    (out / "keep").write_text("mine")
    assert_fails(run(feedpack, "idx", *mnist, "-o", out), str(out), "already exists")
    assert os.listdir(out) == ["keep"]
    assert sorted(os.listdir(tmp_path)) == ["exists", "src"]


def test_output_parent_missing(feedpack, tmp_path, mnist):
    out = str(tmp_path / "no" / "such" / "dir")
    assert_fails(run(feedpack, "idx", *mnist, "-o", out), out, "No such file")
    assert sorted(os.listdir(tmp_path)) == ["src"]


def test_output_parent_is_a_file(feedpack, tmp_path, mnist):
    (tmp_path / "file").write_text("x")
    out = str(tmp_path / "file" / "ds")
    assert_fails(run(feedpack, "idx", *mnist, "-o", out), out, "not a directory")
    assert sorted(os.listdir(tmp_path)) == ["file", "src"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_output_parent_not_writable(feedpack, tmp_path, mnist):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        out = str(ro / "ds")
        assert_fails(run(feedpack, "idx", *mnist, "-o", out), out, "Permission denied")
        assert os.listdir(ro) == []
    finally:
        ro.chmod(0o755)


# ---- npy ------------------------------------------------------------------

def save(path, arr, **kw):
    np.save(path, arr, **kw)
    return str(path)


def test_npy_dtypes_and_shapes(feedpack, tmp_path):
    n = 6
    rng = np.random.default_rng(2)
    arrays = {
        "img": (rng.integers(0, 255, (n, 5, 4, 3), dtype=np.uint8), "u8", "[5,4,3]"),
        "i8": (np.arange(n, dtype=np.int8), "i8", "[]"),
        "u16": (np.arange(n * 2, dtype="<u2").reshape(n, 2), "u16", "[2]"),
        "i16": (np.arange(n, dtype="<i2"), "i16", "[]"),
        "u32": (np.arange(n, dtype="<u4"), "u32", "[]"),
        "i32": (np.arange(n * 6, dtype="<i4").reshape(n, 2, 3), "i32", "[2,3]"),
        "u64": (np.arange(n, dtype="<u8"), "u64", "[]"),
        "i64": (np.arange(n, dtype="<i8"), "i64", "[]"),
        "h": (np.linspace(0, 1, n).astype("<f2"), "f16", "[]"),
        "x": (rng.standard_normal((n, 3)).astype("<f4"), "f32", "[3]"),
        "y.d": (np.linspace(0, 1, n), "f64", "[]"),
        "mask": (np.arange(n) % 2 == 0, "bool", "[]"),
        "nat": (np.arange(n, dtype="=i4"), "i32", "[]"),
    }
    args = [f"{k}={save(tmp_path / (k + '.npy'), a)}" for k, (a, _, _) in arrays.items()]
    out = str(tmp_path / "np")
    text = packed_ok(feedpack, run(feedpack, "npy", *args, "-o", out), out, n)
    for k, (a, dt, shape) in arrays.items():
        fl = field_line(text, k)
        assert fl[1:5] == [dt, shape, "fixed", str(a[0].nbytes)], (k, fl)


@pytest.mark.parametrize("version", [(1, 0), (2, 0), (3, 0)])
def test_npy_header_versions(feedpack, tmp_path, version):
    arr = np.arange(12, dtype="<u2").reshape(4, 3)
    path = tmp_path / "a.npy"
    with open(path, "wb") as f:
        np.lib.format.write_array(f, arr, version=version)
    out = str(tmp_path / "v")
    text = packed_ok(feedpack, run(feedpack, "npy", f"a={path}", "-o", out), out, 4)
    assert field_line(text, "a")[1:3] == ["u16", "[3]"]


def npy_fails(feedpack, tmp_path, arr_or_bytes, *words, **save_kw):
    path = tmp_path / "bad.npy"
    if isinstance(arr_or_bytes, bytes):
        path.write_bytes(arr_or_bytes)
    else:
        np.save(path, arr_or_bytes, **save_kw)
    good = save(tmp_path / "good.npy", np.zeros(3, np.uint8))
    out = str(tmp_path / "o")
    assert_fails(run(feedpack, "npy", f"g={good}", f"b={path}", "-o", out), str(path), *words)
    assert_nothing_written(out)


def test_npy_truncated(feedpack, tmp_path):
    np.save(tmp_path / "full.npy", np.arange(3, dtype="<f4"))
    data = (tmp_path / "full.npy").read_bytes()
    npy_fails(feedpack, tmp_path, data[:-5], "truncated")


def test_npy_bad_magic(feedpack, tmp_path):
    npy_fails(feedpack, tmp_path, b"PK\x03\x04 this is a zip, not npy", "bad magic")


@pytest.mark.parametrize("dtype", ["<U5", "<c8", "S3", "<M8[s]"])
def test_npy_unsupported_dtype(feedpack, tmp_path, dtype):
    arr = np.zeros(3, dtype=dtype)
    npy_fails(feedpack, tmp_path, arr, "unsupported dtype", f"'{np.dtype(dtype).str}'")


def test_npy_object_dtype(feedpack, tmp_path):
    arr = np.array([1, "a", None], dtype=object)
    npy_fails(feedpack, tmp_path, arr, "unsupported dtype", "'|O'", allow_pickle=True)


def test_npy_structured_dtype(feedpack, tmp_path):
    arr = np.zeros(3, dtype=[("a", "<i4"), ("b", "<f4")])
    npy_fails(feedpack, tmp_path, arr, "unsupported dtype")


def test_npy_big_endian(feedpack, tmp_path):
    npy_fails(feedpack, tmp_path, np.arange(3, dtype=">i4"), "big-endian", "'>i4'")


def test_npy_fortran_order(feedpack, tmp_path):
    arr = np.asfortranarray(np.arange(12, dtype=np.uint8).reshape(3, 4))
    npy_fails(feedpack, tmp_path, arr, "Fortran")


def test_npy_zero_d(feedpack, tmp_path):
    npy_fails(feedpack, tmp_path, np.array(5, dtype="<i4"), "0-d")


def test_npy_no_samples(feedpack, tmp_path):
    npy_fails(feedpack, tmp_path, np.zeros((0, 4), np.uint8), "no samples")


def test_npy_different_lengths(feedpack, tmp_path):
    npy_fails(feedpack, tmp_path, np.zeros(4, np.uint8), "4 samples", "has 3")


@pytest.mark.parametrize("arg", ["noequals.npy", "=x.npy", "bad name=x.npy", "a/b=x.npy",
                                 "x" * 64 + "=x.npy", "a="])
def test_npy_bad_name(feedpack, tmp_path, arg):
    out = str(tmp_path / "o")
    assert_fails(run(feedpack, "npy", arg, "-o", out), code=2)
    assert_nothing_written(out)


def test_npy_duplicate_name(feedpack, tmp_path):
    a = save(tmp_path / "a.npy", np.zeros(3, np.uint8))
    out = str(tmp_path / "o")
    assert_fails(run(feedpack, "npy", f"x={a}", f"x={a}", "-o", out), "'x'", "twice", code=2)
    assert_nothing_written(out)


# ---- tokens ---------------------------------------------------------------

def test_tokens_u16_drops_partial_sequence(feedpack, tmp_path):
    src = tmp_path / "tok.bin"
    np.arange(1000, dtype="<u2").tofile(src)
    out = str(tmp_path / "t")
    res = run(feedpack, "tokens", src, "--dtype", "uint16", "--seq-len", "64", "-o", out)
    text = packed_ok(feedpack, res, out, 15)
    assert str(src) in res.stderr and "40 tokens" in res.stderr
    assert field_line(text, "tokens")[1:5] == ["u16", "[64]", "fixed", "128"]


def test_tokens_u32_exact(feedpack, tmp_path):
    src = tmp_path / "tok.bin"
    np.arange(4096, dtype="<u4").tofile(src)
    out = str(tmp_path / "t")
    res = run(feedpack, "tokens", src, "--dtype", "uint32", "--seq-len", "1k",
              "--block-bytes", "4k", "-o", out)
    text = packed_ok(feedpack, res, out, 4)
    assert res.stderr == ""
    assert field_line(text, "tokens")[1:3] == ["u32", "[1024]"]


@pytest.mark.parametrize("size,dtype,words", [
    (0, "uint16", ["empty"]),
    (7, "uint16", ["not a multiple of 2"]),
    (10, "uint32", ["not a multiple of 4"]),
    (60, "uint16", ["30 tokens", "fewer than one sequence of 64"]),
])
def test_tokens_bad_size(feedpack, tmp_path, size, dtype, words):
    src = tmp_path / "tok.bin"
    src.write_bytes(bytes(size))
    out = str(tmp_path / "t")
    res = run(feedpack, "tokens", src, "--dtype", dtype, "--seq-len", "64", "-o", out)
    assert_fails(res, str(src), *words)
    assert_nothing_written(out)


@pytest.mark.parametrize("opts", [[], ["--dtype", "uint8", "--seq-len", "4"],
                                  ["--dtype", "uint16", "--seq-len", "0"],
                                  ["--dtype", "uint16"]])
def test_tokens_usage(feedpack, tmp_path, opts):
    src = tmp_path / "tok.bin"
    src.write_bytes(bytes(64))
    out = str(tmp_path / "t")
    assert_fails(run(feedpack, "tokens", src, *opts, "-o", out), code=2)
    assert_nothing_written(out)


# ---- files ----------------------------------------------------------------

def test_files_tree(feedpack, tmp_path):
    src = tmp_path / "in"
    (src / "a" / "deep").mkdir(parents=True)
    (src / "b").mkdir()
    (src / "a" / "deep" / "x.bin").write_bytes(os.urandom(300))
    (src / "a-b").write_bytes(b"dash")
    (src / "b" / "empty").write_bytes(b"")
    (src / "Zed.txt").write_text("hello")
    os.symlink("Zed.txt", src / "link")
    out = str(tmp_path / "f")
    res = run(feedpack, "files", src, "--block-records", "2", "-o", out)
    text = packed_ok(feedpack, res, out, 4)
    assert "skipped 1" in res.stderr  # the symlink
    assert field_line(text, "data")[1:4] == ["u8", "[*]", "variable"]
    assert field_line(text, "data")[5] == "300"
    assert field_line(text, "name")[1:4] == ["str", "[*]", "variable"]
    assert field_line(text, "name")[5] == str(len("a/deep/x.bin"))
    assert re.search(r"^blocks:\s+2 ", text, re.M)


def one_record_blocks(shard):
    """Decoded blocks of a shard written with --block-records 1."""
    zstandard = pytest.importorskip("zstandard")
    data = open(shard, "rb").read()
    dec = zstandard.ZstdDecompressor()
    return [dec.decompress(data[off:off + comp]) for off, comp in block_offsets(shard)]


def var_fields_of_one_record(raw, nfields):
    """The values of a block of one record whose fields are all variable."""
    values, pos = [], 0
    for _ in range(nfields):
        lo, hi = struct.unpack_from("<II", raw, pos)
        start = (pos + 8 + 63) // 64 * 64
        values.append(raw[start + lo:start + hi])
        pos = (start + hi + 63) // 64 * 64
    return values


def test_files_order_and_content(feedpack, tmp_path):
    src = tmp_path / "in"
    files = {"b": b"bee", "a/x": b"", "a-b": b"dash", "A": b"upper", "a/b/c": os.urandom(70)}
    for rel, content in files.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_bytes(content)
    out = str(tmp_path / "f")
    packed_ok(feedpack, run(feedpack, "files", src, "--block-records", "1", "-o", out), out, 5)
    blocks = one_record_blocks(os.path.join(out, "shard-00000.fsh"))
    got = [var_fields_of_one_record(raw, 2) for raw in blocks]
    order = sorted(files, key=lambda k: k.encode())  # A, a-b, a/b/c, a/x, b
    assert [name.decode() for _, name in got] == order
    assert [data for data, _ in got] == [files[k] for k in order]


def test_files_empty_dir(feedpack, tmp_path):
    src = tmp_path / "in"
    (src / "sub").mkdir(parents=True)
    out = str(tmp_path / "f")
    assert_fails(run(feedpack, "files", src, "-o", out), str(src), "no regular files")
    assert_nothing_written(out)


def test_files_not_a_dir(feedpack, tmp_path):
    out = str(tmp_path / "f")
    missing = str(tmp_path / "nope")
    assert_fails(run(feedpack, "files", missing, "-o", out), missing, "No such file")
    assert_nothing_written(out)


# ---- verify ---------------------------------------------------------------

@pytest.fixture
def packed(feedpack, tmp_path, mnist):
    """A dataset of 7 one-record blocks in one shard."""
    out = str(tmp_path / "ds")
    res = run(feedpack, "idx", *mnist, "-o", out, "--block-records", "1")
    assert res.returncode == 0, res.stderr
    return out


def block_offsets(shard):
    data = open(shard, "rb").read()
    index_offset, nblocks = struct.unpack_from("<QQ", data, len(data) - 64)
    blocks = []
    for b in range(nblocks):
        off, _, _, comp, _ = struct.unpack_from("<QQIII", data, index_offset + 40 * b)
        blocks.append((off, comp))
    return blocks


def test_verify_good(feedpack, packed):
    res = run(feedpack, "verify", packed)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "ok: 7 samples, 7 blocks"


def test_verify_flipped_byte(feedpack, packed):
    shard = os.path.join(packed, "shard-00000.fsh")
    off, comp = block_offsets(shard)[3]
    with open(shard, "r+b") as f:
        f.seek(off + comp // 2)
        b = f.read(1)
        f.seek(off + comp // 2)
        f.write(bytes([b[0] ^ 0x10]))
    assert inspect(feedpack, packed)  # the index is intact
    res = run(feedpack, "verify", packed)
    assert_fails(res, f"verify {packed}:", "shard-00000.fsh", "block 3")


def test_verify_truncated_shard(feedpack, packed):
    shard = os.path.join(packed, "shard-00000.fsh")
    os.truncate(shard, os.path.getsize(shard) - 10)
    assert_fails(run(feedpack, "verify", packed), "shard-00000.fsh")
    assert_fails(run(feedpack, "inspect", packed), "shard-00000.fsh")


def test_verify_grown_shard(feedpack, packed):
    shard = os.path.join(packed, "shard-00000.fsh")
    with open(shard, "ab") as f:
        f.write(b"\0")
    assert_fails(run(feedpack, "verify", packed), "shard-00000.fsh", "size")


def test_verify_foreign_manifest(feedpack, tmp_path, packed):
    src = tmp_path / "src"
    img = write_idx(src / "img2", 0x803, (9, 4, 3), bytes(9 * 12), False)
    lab = write_idx(src / "lab2", 0x801, (9,), bytes(9), False)
    other = str(tmp_path / "other")
    assert run(feedpack, "idx", img, lab, "-o", other).returncode == 0
    os.replace(os.path.join(other, "manifest.pb"), os.path.join(packed, "manifest.pb"))
    assert_fails(run(feedpack, "verify", packed), "shard-00000.fsh")


def test_verify_missing_manifest(feedpack, packed):
    os.unlink(os.path.join(packed, "manifest.pb"))
    assert_fails(run(feedpack, "verify", packed), "manifest.pb", "No such file")


# ---- usage ----------------------------------------------------------------

def test_help(feedpack):
    res = run(feedpack, "--help")
    assert res.returncode == 0
    for cmd in ("idx", "npy", "tokens", "files", "inspect", "verify"):
        assert f"feedpack {cmd} " in res.stdout
        sub = run(feedpack, cmd, "--help")
        assert sub.returncode == 0 and f"usage: feedpack {cmd}" in sub.stdout


@pytest.mark.parametrize("args", [[], ["frobnicate"], ["idx", "a", "b"], ["idx", "a", "-o", "x"],
                                  ["idx", "a", "b", "-o", "x", "--level", "99"],
                                  ["idx", "a", "b", "-o", "x", "--block-bytes", "12q"],
                                  ["idx", "a", "b", "-o", "x", "--bogus"],
                                  ["idx", "a", "b", "-o", "x", "--seq-len", "3"],
                                  ["verify"], ["inspect", "a", "b"]])
def test_usage_errors(feedpack, tmp_path, args):
    res = subprocess.run([feedpack, *args], capture_output=True, text=True, timeout=60,
                         cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    assert res.stderr.startswith("feedpack: ") and "usage" in res.stderr
    assert os.listdir(tmp_path) == []
