"""layout="NCHW" for uint8 batches (issue 31 item 4): without device=, the
Loader's layout="NCHW" has feedd's workers write the u8 image field
channels first (the pipeline op to_chw, the field's last op), contiguous,
as torchvision's PILToTensor / ToImage give it; the values are the NHWC
batch's transposed, with and without augmentations (the same draws).
layout=None (the default) and "NHWC" keep the field as stored."""

import numpy as np
import pytest

import feedclient
from conftest import pack

N = 40


@pytest.fixture(scope="module")
def rgb(feedpack, feedd_factory, tmp_path_factory):
    """A feedd serving 'rgb': image u8[6,5,3] (random), gray u8[4,7], label."""
    d = tmp_path_factory.mktemp("layout")
    rng = np.random.default_rng(7)
    np.save(d / "image.npy", rng.integers(0, 256, (N, 6, 5, 3), dtype=np.uint8))
    np.save(d / "gray.npy", rng.integers(0, 256, (N, 4, 7), dtype=np.uint8))
    np.save(d / "label.npy", np.arange(N, dtype=np.int64))
    pack(feedpack, "npy", f"image={d / 'image.npy'}", f"gray={d / 'gray.npy'}",
         f"label={d / 'label.npy'}", "--block-records", 8, "-o", d / "rgb")
    (d / "run").mkdir()
    return feedd_factory(d / "run", "--dataset", f"rgb={d / 'rgb'}")


def epoch(daemon, **kw):
    kw.setdefault("seed", 4)
    with feedclient.Loader("rgb", 8, socket=daemon.sock, **kw) as ld:
        return [(b.indices.tolist(), {k: np.array(v) for k, v in b.items()},
                 {k: (v.flags.c_contiguous if isinstance(v, np.ndarray) else v.is_contiguous())
                  for k, v in b.items()}) for b in ld]


@pytest.mark.parametrize("pipeline", [None, "random_crop(size=4, pad=1) | hflip(p=0.5)",
                                      "rotate(angle=30) | vflip(p=0.5)"])
def test_nchw_u8_is_the_nhwc_batch_transposed(rgb, pipeline):
    nhwc = epoch(rgb, pipeline=pipeline)
    nchw = epoch(rgb, pipeline=pipeline, layout="NCHW")
    assert epoch(rgb, pipeline=pipeline, layout="NHWC")[0][1]["image"].shape == \
        nhwc[0][1]["image"].shape
    assert len(nchw) == len(nhwc) == N // 8
    for (idx_a, a, _), (idx_b, b, contiguous) in zip(nhwc, nchw):
        assert idx_a == idx_b
        assert b["image"].dtype == np.uint8 and b["image"].shape[1] == 3
        assert np.array_equal(b["image"], a["image"].transpose(0, 3, 1, 2))
        assert contiguous["image"]
        assert np.array_equal(a["gray"], b["gray"]) and np.array_equal(a["label"], b["label"])


def test_nchw_u8_as_torch_is_contiguous(rgb):
    torch = pytest.importorskip("torch")
    with feedclient.Loader("rgb", 8, socket=rgb.sock, shuffle=False, as_torch=True,
                           layout="NCHW") as ld:
        b = next(iter(ld))
        assert b["image"].dtype == torch.uint8 and tuple(b["image"].shape) == (8, 3, 6, 5)
        assert b["image"].is_contiguous()
        b["image"].view(8, -1)  # a plain view works: no strides to undo


def test_to_chw_on_a_gray_field_gives_one_channel(rgb):
    with feedclient.Loader("rgb", 8, socket=rgb.sock, shuffle=False,
                           pipeline="to_chw(field=gray)") as ld:
        b = next(iter(ld))
    with feedclient.Loader("rgb", 8, socket=rgb.sock, shuffle=False) as ld:
        a = next(iter(ld))
        assert np.array_equal(b["gray"], np.array(a["gray"])[:, None])
        assert np.array_equal(b["image"], np.array(a["image"]))  # other fields as stored
        del a


@pytest.mark.parametrize("pipeline, why", [
    ("to_chw | hflip(p=0.5)", "op 2 'hflip': key 'field': 'image' is CHW already"),
    ("normalize(mean=0.5, std=0.5) | to_chw", "'image' is normalized already"),
])
def test_to_chw_is_the_last_op(rgb, pipeline, why):
    with pytest.raises(feedclient.FeedError, match=why):
        feedclient.Loader("rgb", 8, socket=rgb.sock, pipeline=pipeline)


def test_layout_refuses_other_values(rgb):
    with pytest.raises(feedclient.InvalidArgument, match="layout: 'NCHW' or 'NHWC', not 'CHW'"):
        feedclient.Loader("rgb", 8, socket=rgb.sock, layout="CHW")
