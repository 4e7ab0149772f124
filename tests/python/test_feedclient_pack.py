"""feedclient.pack: Writer, from_iterable and from_hf write, through
libfeedpack (the C writer feedpack uses), datasets that bench/feedformat.py
(the independent reader) and `feedpack verify` read back exactly; bad
samples are refused naming their position and field; from_iterable's bytes
do not depend on its worker count; from_hf maps a datasets.Dataset's
features (a stand-in with the same interface when `datasets` is absent).
"""

import io
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from conftest import SRC

sys.path.insert(0, str(SRC / "bench"))
import feedformat as ff  # noqa: E402

from feedclient import pack  # noqa: E402
from feedclient.errors import FeedError, InvalidArgument  # noqa: E402

FIELDS = {"x": ("uint8", (8, 8)), "label": ("int64", ()), "tokens": ("uint16", (None,)),
          "points": ("float32", (None, 3)), "flags": ("bool", (None,)), "caption": "str",
          "blob": "bytes"}


def samples(n, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        k = int(rng.integers(0, 40))
        out.append({"x": rng.integers(0, 256, (8, 8), dtype=np.uint8), "label": i * 7 - 3,
                    "tokens": rng.integers(0, 65535, k, dtype=np.uint16),
                    "points": rng.standard_normal((i % 5, 3)).astype(np.float32),
                    "flags": rng.integers(0, 2, k).astype(bool),
                    "caption": f"sample {i} é" * (i % 3), "blob": bytes(range(i % 256))})
    return out


def check_same(ds, want):
    assert len(ds) == len(want)
    for i, s in enumerate(want):
        rec = ds[i]
        for name, v in s.items():
            got = rec[name]
            if isinstance(v, str):
                assert got == v, (i, name)
            elif isinstance(v, bytes):
                assert bytes(got) == v, (i, name)
            else:
                v = np.asarray(v)
                assert got.tobytes() == v.tobytes() and got.shape == v.shape, (i, name)


def verify(feedpack, d):
    r = subprocess.run([feedpack, "verify", str(d)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_feedclient_pack_writer_round_trip(feedpack, tmp_path):
    want = samples(300)
    with pack.Writer(tmp_path / "ds", fields=FIELDS, block_bytes=4096) as w:
        for s in want:
            w.write(s)
    ds = ff.Dataset(tmp_path / "ds")
    check_same(ds, want)
    schema = {f.name: f for f in ds.schema}
    assert schema["tokens"].variable and schema["tokens"].dtype == np.dtype("<u2")
    assert schema["points"].variable and schema["points"].shape == (3,)
    assert not schema["x"].variable and schema["x"].shape == (8, 8)
    assert schema["caption"].dtype == "str"
    assert ds.name == "ds"
    verify(feedpack, tmp_path / "ds")


def test_feedclient_pack_write_batch_equals_write(tmp_path):
    want = samples(100, seed=1)
    with pack.Writer(tmp_path / "one", fields=FIELDS) as w:
        for s in want:
            w.write(s)
    with pack.Writer(tmp_path / "batch", fields=FIELDS) as w:
        cols = {k: [s[k] for s in want] for k in FIELDS}
        cols["x"] = np.stack(cols["x"])
        w.write_batch(cols)
    assert ff.Dataset(tmp_path / "one").version == ff.Dataset(tmp_path / "batch").version


@pytest.mark.parametrize("bad,words", [
    ({"x": np.zeros((8, 8), np.int16)}, "sample 5: field 'x': dtype int16 where the field is uint8"),
    ({"x": np.zeros((8, 7), np.uint8)}, "sample 5: field 'x': shape (8, 7)"),
    ({"points": np.zeros((2, 4), np.float32)}, "sample 5: field 'points': shape (2, 4)"),
    ({"label": 2.5}, "sample 5: field 'label': values do not fit int64"),
    ({"caption": b"bytes"}, "sample 5: field 'caption': expected str"),
    ({"nope": 1}, "sample 5: field 'nope' is not in the dataset's fields"),
    ({"tokens": [70000]}, "sample 5: field 'tokens': values do not fit uint16"),
], ids=["dtype", "shape", "ragged-shape", "float-for-int", "bytes-for-str", "unknown", "range"])
def test_feedclient_pack_writer_refuses_naming_sample_and_field(tmp_path, bad, words):
    good = samples(10)
    w = pack.Writer(tmp_path / "ds", fields=FIELDS)
    for s in good[:5]:
        w.write(s)
    with pytest.raises(InvalidArgument) as e:
        w.write(dict(good[5], **bad))
    assert words in str(e.value)
    w.abort()
    assert not (tmp_path / "ds").exists()


def test_feedclient_pack_writer_missing_field_and_leaves_nothing(tmp_path):
    s = samples(1)[0]
    del s["caption"]
    with pytest.raises(InvalidArgument, match="sample 0: field 'caption' is missing"):
        with pack.Writer(tmp_path / "ds", fields=FIELDS) as w:
            w.write(s)
    assert list(tmp_path.iterdir()) == []


def jpeg(w, h, seed=0):
    from PIL import Image
    rng = np.random.default_rng(seed)
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(buf, "JPEG")
    return buf.getvalue()


def inspect(feedpack, d):
    r = subprocess.run([feedpack, "inspect", str(d)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_feedclient_pack_image_field(feedpack, tmp_path):
    imgs = [jpeg(32, 24), jpeg(20, 40, 1)]
    with pack.Writer(tmp_path / "ds", fields={"image": "image", "label": ("int64", ())},
                     classes=["cat", "dog"]) as w:
        for i, im in enumerate(imgs):
            w.write({"image": im, "label": i})
    ds = ff.Dataset(tmp_path / "ds")
    assert bytes(ds[1]["image"]) == imgs[1]
    out = inspect(feedpack, tmp_path / "ds")
    assert "image: max 32 wide, 40 high, 800 pixels" in out, out
    assert "classes:      2\n  0      cat\n  1      dog" in out, out
    w = pack.Writer(tmp_path / "bad", fields={"image": "image"})
    w.write({"image": imgs[0]})
    w.write({"image": b"not an image at all"})
    with pytest.raises(FeedError, match="sample 1: field 'image'"):
        w.close()
    assert not (tmp_path / "bad").exists()


def test_feedclient_pack_from_iterable_same_for_any_workers(feedpack, tmp_path):
    want = samples(500, seed=2)
    versions = set()
    for n in (1, 2, 5):
        out = tmp_path / f"w{n}"
        got = pack.from_iterable(iter(want), out, FIELDS, workers=n, chunk_bytes=8 << 10,
                                 block_bytes=2048, progress=False)
        assert got == 500
        ds = ff.Dataset(out)
        versions.add(ds.version)
        assert len(ds.manifest["shards"]) > 5   # many parts joined
        files = sorted(p.name for p in out.iterdir())
        # a `tokens` field: the documents' lengths too, joined from every part
        assert files == sorted(["manifest.pb", "lengths.u32"] +
                               [s["file"] for s in ds.manifest["shards"]])
        lens = np.fromfile(out / "lengths.u32", "<u4")
        assert lens.tolist() == [len(s["tokens"]) for s in want]
    assert len(versions) == 1
    check_same(ff.Dataset(tmp_path / "w5"), want)
    verify(feedpack, tmp_path / "w5")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w1", "w2", "w5"]  # no parts left


def test_feedclient_pack_from_iterable_names_bad_sample(tmp_path):
    want = samples(50)
    want[37]["label"] = "x"
    with pytest.raises(InvalidArgument, match="sample 37: field 'label'"):
        pack.from_iterable(want, tmp_path / "ds", FIELDS, workers=3, chunk_bytes=1024,
                           progress=False)
    assert list(tmp_path.iterdir()) == []


# ---- from_hf: a stand-in with datasets' interface -----------------------------

class Value:
    def __init__(self, dtype):
        self.dtype = dtype


class Sequence:
    def __init__(self, feature, length=-1):
        self.feature, self.length = feature, length


class ClassLabel:
    def __init__(self, names):
        self.names = names


class Image:
    def __init__(self, decode=True):
        self.decode = decode


class FakeDataset:
    """What from_hf uses of datasets.Dataset: len, column_names, features,
    slicing into a dict of lists, cast_column."""

    def __init__(self, rows, features):
        self.rows, self.features = rows, features
        self.column_names = list(features)

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, sl):
        part = self.rows[sl]
        out = {c: [r[c] for r in part] for c in self.column_names}
        for c, f in self.features.items():
            if isinstance(f, Image) and f.decode:
                out[c] = ["<PIL image>" for _ in part]
        return out

    def cast_column(self, col, feat):
        return FakeDataset(self.rows, dict(self.features, **{col: feat}))


def test_feedclient_pack_from_hf_features(feedpack, tmp_path):
    imgs = [jpeg(16, 16, i) for i in range(3)]
    rows = [{"text": f"doc {i}", "ids": list(range(i)), "label": i % 2, "score": i / 4,
             "img": {"bytes": imgs[i % 3], "path": None}} for i in range(2000)]
    feats = {"text": Value("string"), "ids": Sequence(Value("int32")),
             "label": ClassLabel(["neg", "pos"]), "score": Value("float64"), "img": Image()}
    n = pack.from_hf(FakeDataset(rows, feats), tmp_path / "ds", workers=2, progress=False)
    assert n == 2000
    ds = ff.Dataset(tmp_path / "ds")
    assert [f.name for f in ds.schema] == ["text", "ids", "label", "score", "img"]
    out = inspect(feedpack, tmp_path / "ds")
    assert "  0      neg\n  1      pos" in out and "image: max 16 wide" in out, out
    r = ds[1234]
    assert r["text"] == "doc 1234" and list(r["ids"]) == list(range(1234))
    assert r["ids"].dtype == np.dtype("<i4") and int(r["label"]) == 0 and float(r["score"]) == 308.5
    assert bytes(r["img"]) == imgs[1234 % 3]
    n = pack.from_hf(FakeDataset(rows, feats), tmp_path / "two", columns=["text", "label"],
                     progress=False)
    assert [f.name for f in ff.Dataset(tmp_path / "two").schema] == ["text", "label"]
    with pytest.raises(InvalidArgument, match="column 'nope' is not in the dataset"):
        pack.from_hf(FakeDataset(rows, feats), tmp_path / "x", columns=["nope"])


def test_feedclient_pack_from_hf_real_datasets(tmp_path):
    datasets = pytest.importorskip("datasets", reason="Hugging Face datasets is not installed")
    d = datasets.Dataset.from_dict({"text": ["a", "bb", "ccc"], "n": [1, 2, 3]})
    assert pack.from_hf(d, tmp_path / "ds", progress=False) == 3
    assert ff.Dataset(tmp_path / "ds")[2]["text"] == "ccc"


def test_feedclient_pack_library_exports_only_its_api():
    """libfeedpack exports feed_pack_* alone (zstd, the format and the image
    probe stay inside), and it is a library apart from libfeedclient."""
    from conftest import LIB
    from feedclient.pack import _native
    lib = LIB / "libfeedpack.so.0"
    out = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True,
                         text=True, check=True).stdout
    names = {line.split()[-1] for line in out.splitlines() if " T " in line}
    assert names == set(_native._API), names
    needed = subprocess.run(["readelf", "-d", str(LIB / "libfeedclient.so")],
                            capture_output=True, text=True, check=True).stdout
    assert "libzstd" not in needed and "libfeedpack" not in needed
