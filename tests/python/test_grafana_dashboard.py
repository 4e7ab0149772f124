"""deploy/grafana/feedd.json against a live feedd (issue 32 item 3).

Every metric the dashboard queries (its panels' expressions and its
template variables) exists in the exposition of a feedd serving a stream,
so no panel is empty for want of a name; DCGM's metrics (another
exporter's) and Prometheus's own `up` are the exceptions. Every
expression parses as PromQL (promtool checks them as recording rules,
with Grafana's variables filled in). The panels the issue asks for are
there: samples/s, stall share, GPU utilisation, cache hit rate, worker
busy share, queue depth, memory.
"""

import json
import re
import shutil
import subprocess
import time

import pytest

from conftest import SRC
from promtext import fetch, metrics_base, pack_images, samples

DASHBOARD = SRC / "deploy" / "grafana" / "feedd.json"
N = 400
WAIT_S = 60
NOT_FEEDD = re.compile(r"^(DCGM_\w+|up)$")
PROMQL_WORDS = {"sum", "by", "avg", "max", "min", "rate", "scalar", "changes", "without",
                "on", "ignoring", "and", "or", "unless", "label_values", "count", "bool"}


def expressions(dash):
    out = []
    for p in dash["panels"]:
        out += [t["expr"] for t in p.get("targets", [])]
    for v in dash["templating"]["list"]:
        if v.get("type") == "query":
            q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
            # Grafana's label_values(METRIC, LABEL): the metric is what it queries
            out.append(re.sub(r"^label_values\((\w+),\s*\w+\)$", r"\1", q))
    return out


def metric_names(expr):
    """Names in a PromQL expression that are metrics: identifiers outside
    label matchers and grouping lists, not functions or keywords."""
    bare = re.sub(r"\{[^}]*\}", "", expr)                  # label matchers
    bare = re.sub(r"\b(by|without|on|ignoring)\s*\([^)]*\)", "", bare)
    bare = re.sub(r"\[[^\]]*\]", "", bare)                 # ranges
    bare = re.sub(r'"[^"]*"', "", bare)
    names = set()
    for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", bare):
        word = m.group(0)
        rest = bare[m.end():].lstrip()
        if word in PROMQL_WORDS or rest.startswith("(") or word.startswith("$"):
            continue
        names.add(word)
    return names


@pytest.fixture(scope="module")
def dash():
    return json.loads(DASHBOARD.read_text())


@pytest.fixture
def live(feedd_factory, feedpack, feed_bin, tmp_path):
    pack_images(feedpack, tmp_path, "g", N, 4, 10)
    daemon = feedd_factory(tmp_path, "--dataset", f"g={tmp_path / 'g'}", "--workers", 2,
                           "--metrics", "127.0.0.1:0")
    base = metrics_base(daemon)
    bench = subprocess.Popen([str(feed_bin / "feedbench"), "--socket", daemon.sock,
                              "--dataset", "g", "--batch", "4", "--epochs", "100000",
                              "--step-ms", "5"], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    yield daemon, base, bench
    bench.kill()
    bench.wait()


def scrape_names(base):
    return {name for name, _ in samples(fetch(base, timeout=WAIT_S))}


def test_every_metric_the_dashboard_queries_is_exposed(dash, live):
    _, base, bench = live
    wanted = set()
    for e in expressions(dash):
        wanted |= metric_names(e)
    assert {"feedd_samples_total", "feedd_readers", "process_resident_memory_bytes"} <= wanted
    deadline = time.monotonic() + WAIT_S
    while True:   # until feedbench's stream is open: its series are there
        have = scrape_names(base)
        if "feedd_readers" in have or time.monotonic() > deadline:
            break
        assert bench.poll() is None, f"feedbench exited with {bench.returncode}"
        time.sleep(0.05)
    missing = sorted(n for n in wanted if not NOT_FEEDD.match(n) and n not in have)
    assert not missing, f"the dashboard queries metrics feedd does not export: {missing}"


def test_every_expression_is_promql(dash, tmp_path):
    promtool = shutil.which("promtool")
    assert promtool, "promtool not found: Debian's prometheus package (scripts/setup.sh)"
    rules = ["groups:", "  - name: dashboard", "    rules:"]
    for i, e in enumerate(expressions(dash)):
        e = e.replace("$__rate_interval", "1m").replace("$instance", ".*")
        rules += [f"      - record: dashboard:expr{i}", f"        expr: {json.dumps(e)}"]
    (tmp_path / "dash.yaml").write_text("\n".join(rules) + "\n")
    res = subprocess.run([promtool, "check", "rules", str(tmp_path / "dash.yaml")],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr


def test_the_panels_the_issue_asks_for(dash):
    exprs = " ".join(expressions(dash))
    for name in ("feedd_samples_total", "feedd_reader_wait_seconds_total", "DCGM_FI_DEV_GPU_UTIL",
                 "feedd_cache_hits_total", "feedd_workers_busy", "feedd_credits_in_use",
                 "process_resident_memory_bytes"):
        assert name in exprs, name
    assert len({p["id"] for p in dash["panels"]}) == len(dash["panels"])
