"""`feedd --list-metrics` says what a real feedd exports (issue 34 item 6).

Named test_feedclient_* because it opens a stream through feedclient (the
ASan build preloads its runtime for those).

The docs' metrics table is generated from `feedd --list-metrics`
(metrics/metrics_doc.c); this test keeps that table true to the code that
renders the exposition. A feedd with a dataset served, one left out, a disk
tier (cache_dir) and one stream open is scraped: every family of the scrape
must have its row, with the same type and help text, and every sample the
row's label names; every row must be in the scrape, but the GPU family,
which needs NVML.
"""

import re

import feedclient
from promtext import fetch, metrics_base, pack_images
from test_docs_generated import list_table

HELP = re.compile(r"^# HELP (\S+) (.*)$")
TYPE = re.compile(r"^# TYPE (\S+) (\S+)$")
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? \S+$")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="(?:[^"\\]|\\.)*"')


def parse(text):
    """{family: {"help", "type", "labels": set of label-name tuples}}."""
    fams = {}
    for line in text.splitlines():
        if m := HELP.match(line):
            fams.setdefault(m.group(1), {"labels": set()})["help"] = m.group(2)
        elif m := TYPE.match(line):
            fams.setdefault(m.group(1), {"labels": set()})["type"] = m.group(2)
        elif line and not line.startswith("#"):
            m = SAMPLE.match(line)
            assert m, f"not a sample line: {line!r}"
            assert m.group(1) in fams, f"sample before its # TYPE: {line!r}"
            fams[m.group(1)]["labels"].add(tuple(LABEL.findall(m.group(2) or "")))
    return fams


def test_list_metrics_matches_a_scrape(feed_bin, feedpack, feedd_factory, tmp_path):
    pack_images(feedpack, tmp_path, "m", 64, 4, 16)
    (tmp_path / "tier").mkdir()
    cfg = tmp_path / "feedd.yaml"
    cfg.write_text(f"""metrics: 127.0.0.1:0
workers: 2
cache_dir: {tmp_path / 'tier'}
datasets:
  - name: m
    path: {tmp_path / 'm'}
  - name: gone
    path: {tmp_path / 'no-such-dir'}
""")
    rows = {r[0]: r for r in list_table(feed_bin, "--list-metrics")}
    daemon = feedd_factory(tmp_path, "--config", cfg)
    with feedclient.Loader("m", 8, socket=daemon.sock, seed=1) as loader:
        next(iter(loader))
        scraped = parse(fetch(metrics_base(daemon)))
    for name, fam in scraped.items():
        assert name in rows, f"{name}: exported, but --list-metrics has no row for it"
        _, typ, labels, _, help_ = rows[name]
        assert fam["type"] == typ, f"{name}: exported as {fam['type']}, the table says {typ}"
        assert fam["help"] == help_, f"{name}: help {fam['help']!r}, the table says {help_!r}"
        want = tuple(sorted(labels.split(","))) if labels != "-" else ()
        for got in fam["labels"]:
            assert tuple(sorted(got)) == want, f"{name}: labels {got}, the table says {want}"
    for name, row in rows.items():
        if row[3] != "with NVML":
            assert name in scraped, f"{name}: in --list-metrics, not in the scrape"
    # the families whose labels the table names all had samples to check
    for name in ("feedd_samples_total", "feedd_dataset_left_out", "feedd_dataset_state",
                 "feedd_cache_hits_total", "feedd_dataset_samples_total"):
        assert scraped[name]["labels"], f"{name}: no sample in the scrape"
