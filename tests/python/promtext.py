"""Shared by the tests that scrape feedd's Prometheus endpoint and pack a
small image/label dataset: one place for the log line, the scrape and the
parse, so a change of any of them is made once."""

import re
import urllib.request

import numpy as np
from prometheus_client.parser import text_string_to_metric_families

from conftest import pack

_SERVING = re.compile(r"metrics: serving (http://127\.0\.0\.1:(\d+))/metrics")


def metrics_base(daemon):
    """The base URL feedd logged for its metrics listener (--metrics 127.0.0.1:0)."""
    m = _SERVING.search(daemon.log_text())
    assert m, daemon.log_text()
    return m.group(1)


def metrics_port(daemon):
    """The port of metrics_base()."""
    metrics_base(daemon)
    return int(_SERVING.search(daemon.log_text()).group(2))


def fetch(base, path="/metrics", timeout=60):
    """The body at base+path; asserts a 200 in the exposition's content type."""
    with urllib.request.urlopen(base + path, timeout=timeout) as r:
        assert r.status == 200
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        return r.read().decode()


def samples(text):
    """{(sample name, frozenset of labels): value}, through prometheus_client's parser."""
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def families(text):
    """{family name: type}."""
    return {f.name: f.type for f in text_string_to_metric_families(text)}


def pack_images(feedpack, d, name, n, side, block):
    """Packs n u8[side,side] images (values i % 251) with labels 0..n-1 as d/name."""
    np.save(d / "image.npy", (np.arange(n * side * side) % 251).astype(np.uint8)
            .reshape(n, side, side))
    np.save(d / "label.npy", np.arange(n, dtype=np.int64))
    pack(feedpack, "npy", f"image={d / 'image.npy'}", f"label={d / 'label.npy'}",
         "--block-records", block, "-o", d / name)
