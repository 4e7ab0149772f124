"""feedctl's --json stays valid JSON whatever the names hold (issue 34
item 5): a job id with quotes and a backslash comes back intact from
`feedctl status --json` and `feedctl top --json`, and text with control
characters (top's NVML reason, which carries $FEED_NVML_LIBRARY's path)
comes out escaped, never raw, in one JSON object per line.

The daemon allows only printable ASCII in a job id (the client sends any
other byte as '?'), so the job id's control characters arrive as '?'.
"""

import json
import os
import subprocess

import numpy as np
import pytest

import feedclient
from conftest import pack

N = 40
JOB_SENT = 'job "quoted" \\ back\tslash\x01'
JOB_SEEN = 'job "quoted" \\ back?slash?'
DATASET = "names"


@pytest.fixture
def daemon(feedd_factory, feedpack, tmp_path, monkeypatch):
    """A feedd with one stream of JOB_SENT open in this process."""
    np.save(tmp_path / "x.npy", np.arange(N, dtype=np.int64))
    pack(feedpack, "npy", f"x={tmp_path / 'x.npy'}", "-o", tmp_path / "ds")
    d = feedd_factory(tmp_path, "--dataset", f"{DATASET}={tmp_path / 'ds'}", "--workers", 1)
    monkeypatch.setenv("FEED_JOB_ID", JOB_SENT)
    loader = feedclient.Loader(DATASET, 4, socket=d.sock, shuffle=False, credits=2)
    it = iter(loader)
    next(it)
    yield d
    del it
    loader.close()


def feedctl(feed_bin, sock, *args, env=None):
    res = subprocess.run([str(feed_bin / "feedctl"), "--socket", sock, *args],
                         capture_output=True, text=True, timeout=60, env=env)
    assert res.returncode == 0, res.stderr
    return res.stdout


def test_feedctl_status_json_escapes_job(feed_bin, daemon):
    out = feedctl(feed_bin, daemon.sock, "status", "--json")
    doc = json.loads(out)          # strict: a raw control character fails
    jobs = [s["job"] for s in doc["streams"]]
    assert JOB_SEEN in jobs, out


def test_feedctl_top_json_escapes_job_and_control_chars(feed_bin, daemon, tmp_path):
    lib = str(tmp_path / 'no "such"\\lib\t\n\x01.so')
    env = dict(os.environ, FEED_NVML_LIBRARY=lib)
    out = feedctl(feed_bin, daemon.sock, "top", "--json", "--once", env=env)
    lines = out.splitlines()
    assert len(lines) == 1, out    # a raw newline would split the object
    doc = json.loads(lines[0])
    assert lib in doc["nvml_reason"], doc["nvml_reason"]
    assert [r["job"] for r in doc["streams"]] == [JOB_SEEN]
    assert doc["streams"][0]["dataset"] == DATASET
