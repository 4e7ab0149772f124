"""feedpack wds: WebDataset tar shards into a dataset, grouped by key as
WebDataset groups them (the path up to the first dot of the base name), one
field per extension (jpg an image field decode takes, cls an i64 label,
txt/json str), in the order of the tars and their members whatever the
thread count; a sample missing an extension refused naming tar and key or
skipped and counted; a truncated member refused naming tar and member; and
a stream over the dataset gives decoded, augmented images beside their
captions as a list of str.
"""

import io
import subprocess
import sys
import tarfile

import numpy as np
import pytest

from conftest import SRC

sys.path.insert(0, str(SRC / "bench"))
import feedformat as ff  # noqa: E402

PIL = pytest.importorskip("PIL.Image")


def jpeg(w, h, shade):
    buf = io.BytesIO()
    PIL.fromarray(np.full((h, w, 3), shade, np.uint8)).save(buf, "JPEG")
    return buf.getvalue()


def add(t, name, data):
    ti = tarfile.TarInfo(name)
    ti.size = len(data)
    t.addfile(ti, io.BytesIO(data))


def make_shards(d, ntars=3, per=7, missing=None, mode="w"):
    """Tars of samples (key, caption, label); returns the paths and the
    samples in order. Members of a sample come in varying order, with a
    directory that has a dot, and an extension nobody asks for."""
    paths, want = [], []
    for s in range(ntars):
        path = d / (f"shard-{s:03d}.tar" + (".gz" if mode == "w:gz" and s == 1 else ""))
        with tarfile.open(path, mode if s == 1 else "w") as t:
            for i in range(per):
                key = f"v1.0/{s:03d}{i:04d}"
                members = [(".jpg", jpeg(20 + i, 10 + s, 10 * i)),
                           (".txt", f"a photo {s}-{i} ✓".encode()),
                           (".cls", f"{(s * per + i) % 5}\n".encode()),
                           (".json", b'{"id": %d}' % i), (".extra.bin", b"\0\1")]
                if (s, i) == missing:
                    members = [m for m in members if m[0] != ".json"]
                for ext, data in (members if i % 2 else members[::-1]):
                    add(t, key + ext, data)
                if (s, i) != missing:
                    want.append((key, f"a photo {s}-{i} ✓", (s * per + i) % 5,
                                 '{"id": %d}' % i, (20 + i, 10 + s)))
        paths.append(path)
    return paths, want


def run(feedpack, *args):
    return subprocess.run([feedpack, "wds", *map(str, args)], capture_output=True, text=True)


def test_feedclient_pack_wds_groups_in_order(feedpack, tmp_path):
    tars, want = make_shards(tmp_path, mode="w:gz")
    versions = set()
    for jobs in (1, 3):
        out = tmp_path / f"ds{jobs}"
        r = run(feedpack, *tars, "-o", out, "--fields", "jpg,txt,cls,json", "-j", jobs)
        assert r.returncode == 0, r.stderr
        assert f"packed {len(want)} samples into {out}" in r.stdout
        ds = ff.Dataset(out)
        versions.add(ds.version)
    assert len(versions) == 1
    assert [f.name for f in ds.schema] == ["jpg", "txt", "cls", "json"]
    assert ds.schema[2].dtype == np.dtype("<i8") and not ds.schema[2].variable
    assert len(ds) == len(want)
    for i, (key, cap, label, js, (w, h)) in enumerate(want):
        rec = ds[i]
        assert rec["txt"] == cap and rec["json"] == js and int(rec["cls"]) == label, i
        im = PIL.open(io.BytesIO(bytes(rec["jpg"])))
        assert im.size == (w, h), i
    info = subprocess.run([feedpack, "inspect", str(tmp_path / "ds1")], capture_output=True,
                          text=True).stdout
    assert "image: max 26 wide, 12 high" in info, info
    # no --fields: the first sample's extensions, in member order
    r = run(feedpack, tars[0], "-o", tmp_path / "auto")
    assert r.returncode == 0, r.stderr
    names = [f.name for f in ff.Dataset(tmp_path / "auto").schema]
    assert sorted(names) == ["cls", "extra.bin", "jpg", "json", "txt"]


def test_feedclient_pack_wds_missing_extension(feedpack, tmp_path):
    tars, want = make_shards(tmp_path, missing=(1, 4))
    r = run(feedpack, *tars, "-o", tmp_path / "ds", "--fields", "jpg,txt,cls,json")
    assert r.returncode == 1
    assert f"{tars[1]}: sample 'v1.0/0010004': no member with extension 'json'" in r.stderr
    assert not (tmp_path / "ds").exists()
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("shard")) == []
    r = run(feedpack, *tars, "-o", tmp_path / "ds", "--fields", "jpg,txt,cls,json",
            "--on-missing", "skip")
    assert r.returncode == 0, r.stderr
    assert "skipped 1 samples missing one of the fields" in r.stdout
    ds = ff.Dataset(tmp_path / "ds")
    assert [ds[i]["txt"] for i in range(len(ds))] == [w[1] for w in want]
    # without json, the sample is whole
    r = run(feedpack, *tars, "-o", tmp_path / "nojson", "--fields", "jpg,txt")
    assert r.returncode == 0 and len(ff.Dataset(tmp_path / "nojson")) == len(want) + 1


def test_feedclient_pack_wds_truncated_member(feedpack, tmp_path):
    tars, _ = make_shards(tmp_path, ntars=2)
    with tarfile.open(tars[1]) as t:
        m = t.getmembers()[7]
    data = tars[1].read_bytes()
    cut = tmp_path / "cut.tar"
    cut.write_bytes(data[:m.offset_data + m.size // 2])
    r = run(feedpack, tars[0], cut, "-o", tmp_path / "ds")
    assert r.returncode == 1
    assert f"{cut}: member {m.name}: truncated" in r.stderr, r.stderr
    assert not (tmp_path / "ds").exists()


def test_feedclient_pack_wds_bad_label_and_usage(feedpack, tmp_path):
    with tarfile.open(tmp_path / "a.tar", "w") as t:
        add(t, "x/1.cls", b"seven")
        add(t, "x/1.txt", b"hi")
    r = run(feedpack, tmp_path / "a.tar", "-o", tmp_path / "ds")
    assert r.returncode == 1 and "member x/1.cls: 'seven' is not an integer class label" \
        in r.stderr
    assert run(feedpack, tmp_path / "a.tar").returncode == 2
    assert run(feedpack, tmp_path / "a.tar", "-o", tmp_path / "d", "--on-missing",
               "maybe").returncode == 2


def test_feedclient_pack_wds_stream_images_and_captions(feedpack, feedd_factory, tmp_path):
    import feedclient
    tars, want = make_shards(tmp_path, ntars=2, per=6)
    r = run(feedpack, *tars, "-o", tmp_path / "ds", "--fields", "jpg,txt,cls")
    assert r.returncode == 0, r.stderr
    d = feedd_factory(tmp_path, "--dataset", f"pairs={tmp_path / 'ds'}")
    with feedclient.Loader("pairs", 4, socket=d.sock, as_torch=False, shuffle=False,
                           pipeline="decode | random_resized_crop(size=8) | hflip(p=0.5)") as ld:
        seen = 0
        for batch in ld:
            assert batch["jpg"].shape == (4, 8, 8, 3) and batch["jpg"].dtype == np.uint8
            assert isinstance(batch["txt"], list) and all(isinstance(c, str)
                                                          for c in batch["txt"])
            assert batch["txt"] == [w[1] for w in want[seen:seen + 4]]
            assert list(batch["cls"]) == [w[2] for w in want[seen:seen + 4]]
            seen += 4
            if seen >= len(want):
                break
    d.stop()
