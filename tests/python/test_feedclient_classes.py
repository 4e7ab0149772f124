"""feedclient.datasets() gives an imagefolder dataset's class names, in
torchvision ImageFolder's order, and () for a dataset without classes;
`feedctl datasets` prints them."""
import io
import subprocess

import feedclient
import pytest
from conftest import pack

PIL = pytest.importorskip("PIL.Image")


def _jpeg(path, shade):
    buf = io.BytesIO()
    PIL.new("RGB", (12, 9), (shade, 255 - shade, 40)).save(buf, format="JPEG", quality=90)
    path.write_bytes(buf.getvalue())


def test_datasets_list_class_names(fc, feedpack, feedd_factory, tmp_path):
    tree = tmp_path / "tree"
    # created out of order, with names whose sorted order differs from it
    for i, cls in enumerate(["zebra", "Ant", "mole_rat", "bee"]):
        (tree / cls).mkdir(parents=True)
        _jpeg(tree / cls / f"{i}.jpg", 40 * i)
    pack(feedpack, "imagefolder", tree, "-o", tmp_path / "packed")
    d = feedd_factory(tmp_path, "--dataset", f"pics={tmp_path / 'packed'}",
                      "--dataset", f"small={fc.dir / 'small'}")
    got = {info.name: info for info in feedclient.datasets(socket=d.sock)}
    # ImageFolder sorts with Python's sorted(): capitals first
    assert got["pics"].classes == ("Ant", "bee", "mole_rat", "zebra")
    assert got["pics"].samples == 4
    assert got["small"].classes == ()
    out = subprocess.run([str(d.bin / "feedctl"), "--socket", d.sock, "datasets"], check=True,
                         capture_output=True, text=True).stdout
    assert "4 classes: 0=Ant 1=bee 2=mole_rat 3=zebra\n" in out
    assert out.count("classes:") == 1  # small has none
    d.stop()
