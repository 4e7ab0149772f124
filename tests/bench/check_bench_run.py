#!/usr/bin/python3
"""Smoke test of bench/run: --tiny (below --quick) --no-peers into a
temporary directory, on data it prepares there; checks the files it writes
(latest.md, latest.json, the PNG plots), that every row has its command
and every row that can run here ran, and that the stall runs, the limits
and the summary are there. Correctness only: no figure is compared with
a target (the machine may be busy).

    /usr/bin/python3 tests/bench/check_bench_run.py --bin BUILD/bin
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PNG = b"\x89PNG\r\n\x1a\n"


def fail(msg):
    print("check_bench_run: FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="feedd-check-bench-run.") as tmp:
        out = os.path.join(tmp, "results")
        cmd = [os.path.join(ROOT, "bench", "run"), "--tiny", "--no-peers", "--bin", a.bin,
               "--out", out, "--data", os.path.join(tmp, "data")]
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           timeout=600)
        sys.stderr.write(r.stderr)
        if r.returncode:
            fail("bench/run exited %d" % r.returncode)
        for f in ("latest.md", "latest.json", "throughput.png", "cpu.png", "stall.png"):
            if not os.path.isfile(os.path.join(out, f)):
                fail("%s not written" % f)
        for f in ("throughput.png", "cpu.png", "stall.png"):
            with open(os.path.join(out, f), "rb") as fh:
                if fh.read(8) != PNG:
                    fail("%s is not a PNG" % f)
        with open(os.path.join(out, "latest.json")) as fh:
            doc = json.load(fh)
        with open(os.path.join(out, "latest.md")) as fh:
            md = fh.read()
        progress = [l for l in r.stderr.splitlines() if l.startswith("[")]
        if len(progress) != len(doc["rows"]):
            fail("%d progress lines for %d rows" % (len(progress), len(doc["rows"])))
        workloads = {row["workload"] for row in doc["rows"]}
        if workloads != {"fmnist", "jpeg", "recipe", "tvrecipe", "tokens", "jobs4", "lm"}:
            fail("workloads %s" % sorted(workloads))
        for row in doc["rows"]:
            where = "%s/%s" % (row["workload"], row["name"])
            if not row.get("command"):
                fail(where + ": no command")
            # in a table cell, | is written \| (GitHub would end the cell there)
            if row["command"].split("  (")[0].replace("|", "\\|") not in md:
                fail(where + ": its command is not in latest.md")
            if row["kind"] == "peer":
                if row["runs"] or "--no-peers" not in (row["error"] or ""):
                    fail(where + ": a PyPI peer ran or was not reported skipped")
                continue
            if row["error"] or len(row["runs"]) != doc["runs"]:
                fail("%s: %s" % (where, row["error"] or "%d runs" % len(row["runs"])))
            for run in row["runs"]:
                for key in ("samples_per_s", "cpu_s_per_epoch", "rss_kib"):
                    if not run.get(key) or run[key] <= 0:
                        fail("%s: %s is %r" % (where, key, run.get(key)))
        names = {(s["workload"], s["name"], s["basis"]) for s in doc["stalls"]
                 if "stall_pct" in s and s["events"]}
        for want in (("fmnist", "feedd-py", "own"), ("fmnist", "feedd-py", "dataloader"),
                     ("jpeg", "feedd-py", "dataloader")):
            if want not in names:
                fail("no stall run %s" % "/".join(want))
        if not any(n == "dataloader-%dw" % doc["workers"] for _, n, _ in names):
            fail("no DataLoader stall run")
        for wl in ("fmnist", "jpeg", "recipe", "tokens"):
            if not doc["limits"].get(wl, {}).get("per_core"):
                fail("no single-threaded limit for " + wl)
        if not doc["limits"]["memcpy"]["gb_s"] or not doc["limits"]["zstd"]:
            fail("no memcpy or zstd limit")
        for row in doc["rows"]:  # the language-model rows: tokens/s, Megatron's index
            if row["workload"] == "lm" and row["runs"]:
                keys = ["tokens_per_s", "first_batch_ms"] + (
                    ["index_build_ms"] if row["name"] == "megatron-memmap" else [])
                for key in keys:
                    if not all(run.get(key, 0) > 0 for run in row["runs"]):
                        fail("lm/%s: no %s" % (row["name"], key))
        for head in ("## Summary", "## Limits", "## Stall at 80% load",
                     "### Language-model documents"):
            if head not in md:
                fail("latest.md lacks " + head)
    print("check_bench_run: ok (%d rows)" % len(doc["rows"]))


if __name__ == "__main__":
    main()
