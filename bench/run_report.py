"""bench/run_report.py: bench/run's tables, JSON and plots.

progress(row, i, total) is the one line a finished row prints; write(doc,
out) writes out/latest.json (doc as is), out/latest.md (the summary, one
table per workload with each row's command, the limits and the stall
runs) and, with matplotlib (Debian's python3-matplotlib), out/throughput.png,
out/cpu.png and out/stall.png. Medians over the runs; min–max beside them.
"""
import json
import os
import statistics

WORKLOADS = {
    "fmnist": "Fashion-MNIST (60,000 28×28), crop 28 pad 2 + flip, batch 256",
    "jpeg": "JPEG set, decode + RandomResizedCrop(224) + flip, batch 256",
    "recipe": "JPEG set, ResNet-50 recipe (RRC 176, flip, TrivialAugmentWide, "
              "RandomErasing 0.1), batch 256",
    "tvrecipe": "JPEG set, the recipe as a torchvision Compose (+ ToTensor, Normalize) "
                "with CutMix/MixUp, through from_torchvision, float32, batch 256",
    "tokens": "token sequences (u16), random window of 1024 of 2048, batch 256",
    "jobs4": "4 concurrent jobs on Fashion-MNIST (per job; the solo row is one job alone)",
}
FEEDD = ("feedbench", "feedd-py", "feedbench-solo", "4x-feedd-streams", "feedd-group-of-4")


def code(cmd):
    """cmd as a code span in a table cell (GitHub reads \\| there as |)."""
    return "`%s`" % (cmd or "").replace("|", "\\|")


def med(row, key):
    vals = [r[key] for r in row["runs"] if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def spread(row, key="samples_per_s"):
    vals = [r[key] for r in row["runs"]]
    return min(vals), max(vals)


def fmt(x, nd=0):
    if x is None:
        return "–"
    if nd == 0:
        return "{:,.0f}".format(x)
    return "{:,.{}f}".format(x, nd)


def short(x):
    for div, unit in ((1e6, "M"), (1e3, "k")):
        if x >= div:
            return "%.3g%s" % (x / div, unit)
    return "%.3g" % x


def sig(x):
    """CPU seconds: three significant digits (token epochs take ms)."""
    return "–" if x is None else "%.3g" % x


def progress(row, i, total):
    head = "[%2d/%d] %-7s %-22s" % (i, total, row["workload"], row["name"])
    if not row["runs"]:
        return head + " " + (row["error"] or "no runs")
    lo, hi = spread(row)
    s = "%s %12s samples/s (%s–%s, %d runs)" % (head, fmt(med(row, "samples_per_s")), fmt(lo),
                                                 fmt(hi), len(row["runs"]))
    c = med(row, "cpu_s_per_epoch")
    if c is not None:
        s += ", %s CPU s/epoch" % sig(c)
    t = med(row, "tokens_per_s")   # the lm rows (bench/lm_peers.py)
    if t is not None:
        s += ", %s tokens/s" % short(t)
    return s


def dl_ref(rows, wl):
    """The fastest DataLoader row of a workload (the ratio's reference)."""
    dls = [r for r in rows if r["workload"] == wl and r["runs"]
           and r["name"].startswith(("dataloader", "4xdataloader"))]
    return max(dls, key=lambda r: med(r, "samples_per_s"), default=None)


def stall_of(doc, wl, name, basis):
    for s in doc.get("stalls", []):
        if s["workload"] == wl and s["name"] == name and s["basis"] == basis:
            return s.get("stall_pct")
    return None


def table(doc, wl):
    rows = [r for r in doc["rows"] if r["workload"] == wl]
    if not rows:
        return []
    ref = dl_ref(doc["rows"], wl)
    ref_rate = med(ref, "samples_per_s") if ref else None
    lim = doc["limits"].get(wl, {}).get("samples_per_s")
    out = ["### %s" % WORKLOADS[wl], "",
           "Ratio: to %s; limit: %s." % (
               "`%s` (the fastest DataLoader here)" % ref["name"] if ref else "no DataLoader",
               "the single-threaded C loop × %d cores = %s samples/s" % (
                   doc["workers"], fmt(lim)) if lim else "not measured"), "",
           "| contender | samples/s (min–max) | MB/s | CPU s/epoch | RssAnon+RssShmem MiB "
           "| stall % at 80% own / DL's | first batch ms | × DataLoader | share of limit "
           "| command |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        name = "**%s**" % r["name"] if r["name"] in FEEDD else r["name"]
        if not r["runs"]:
            out.append("| %s | %s | | | | | | | | %s |" % (
                name, (r["error"] or "no runs").replace("|", "/")[:200],
                code(r.get("command"))))
            continue
        rate = med(r, "samples_per_s")
        lo, hi = spread(r)
        st = "%s / %s" % (fmt(stall_of(doc, wl, r["name"], "own"), 1),
                          fmt(stall_of(doc, wl, r["name"], "dataloader"), 1))
        out.append("| %s | %s (%s–%s) | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            name, fmt(rate), fmt(lo), fmt(hi), fmt(med(r, "mb_per_s"), 1),
            sig(med(r, "cpu_s_per_epoch")), fmt((med(r, "rss_kib") or 0) / 1024),
            st, fmt(med(r, "first_batch_ms"), 1),
            "%.1f×" % (rate / ref_rate) if ref_rate else "–",
            "%.0f%%" % (100 * rate / lim) if lim else "–", code(r["command"])))
    return out + [""]


def summary(doc):
    out = ["| workload | feedd, feedbench (C) | feedd, Python | best DataLoader | best other "
           "peer | feedd ÷ best DataLoader | feedd ÷ best peer | feedd CPU s/epoch (lowest "
           "other) | share of limit |", "|---|---|---|---|---|---|---|---|---|"]
    for wl in ("fmnist", "jpeg", "recipe", "tvrecipe", "tokens"):
        rows = {r["name"]: r for r in doc["rows"] if r["workload"] == wl and r["runs"]}
        if not rows:
            continue
        fb, fp = rows.get("feedbench"), rows.get("feedd-py")
        ref = dl_ref(doc["rows"], wl)
        peers = [r for n, r in rows.items() if n not in FEEDD and not n.startswith("dataloader")]
        peer = max(peers, key=lambda r: med(r, "samples_per_s"), default=None)
        best_f = fb or fp
        rate = lambda r: med(r, "samples_per_s") if r else None  # noqa: E731
        others = [med(r, "cpu_s_per_epoch") for n, r in rows.items() if n not in FEEDD]
        fcpu = min([med(r, "cpu_s_per_epoch") for r in (fb, fp) if r] or [None])
        lim = doc["limits"].get(wl, {}).get("samples_per_s")
        out.append("| %s | %s | %s | %s (%s) | %s | %s | %s | %s (%s) | %s |" % (
            wl, fmt(rate(fb)), fmt(rate(fp)), fmt(rate(ref)), ref["name"] if ref else "–",
            "%s (%s)" % (fmt(rate(peer)), peer["name"]) if peer else "–",
            "%s / %s (C / Python)" % tuple("%.1f×" % (rate(f) / rate(ref)) if f and ref
                                           else "–" for f in (fb, fp)),
            "%.1f×" % (rate(best_f) / rate(peer)) if best_f and peer else "–",
            sig(fcpu), sig(min(others) if others else None),
            "%.0f%%" % (100 * rate(best_f) / lim) if lim and best_f else "–"))
    return out


def rate_of(doc, wl, name, key="samples_per_s"):
    for r in doc["rows"]:
        if r["workload"] == wl and r["name"] == name and r["runs"]:
            return med(r, key)
    return None


def targets(doc):
    """Issue 23's targets, each met or missed on this run's figures."""
    out = ["| target | this run | |", "|---|---|---|"]

    def line(what, ok, figure):
        out.append("| %s | %s | %s |" % (what, figure, "–" if ok is None else
                                         "met" if ok else "**missed**"))
    dlw = "dataloader-%dw" % doc["workers"]
    for wl, want_c, want_py in (("fmnist", 20, 10), ("jpeg", 4, None)):
        ref = dl_ref(doc["rows"], wl)
        dl = rate_of(doc, wl, dlw)
        for name, want in (("feedbench", want_c), ("feedd-py", want_py)):
            f = rate_of(doc, wl, name)
            if want is None and name == "feedd-py":
                want = want_c
            if f and ref:
                best = med(ref, "samples_per_s")
                line("%s: %s ≥ %d× DataLoader" % (wl, name, want), f / best >= want,
                     "%.1f× the fastest (%s), %.1f× %s" % (
                         f / best, ref["name"], f / dl if dl else 0, dlw))
        f = max(filter(None, [rate_of(doc, wl, "feedbench"), rate_of(doc, wl, "feedd-py")]),
                default=None)
        peers = [(med(r, "samples_per_s"), r["name"]) for r in doc["rows"]
                 if r["workload"] == wl and r["runs"] and r["name"] not in FEEDD]
        if wl == "jpeg" and f and peers:
            top = max(peers)
            line("jpeg: ahead of every peer", f > top[0], "feedd %s, best other %s (%s)" % (
                fmt(f), fmt(top[0]), top[1]))
    for wl in ("fmnist", "jpeg", "recipe", "tokens"):
        fc = [med(r, "cpu_s_per_epoch") for r in doc["rows"]
              if r["workload"] == wl and r["runs"] and r["name"] in FEEDD]
        oc = [(med(r, "cpu_s_per_epoch"), r["name"]) for r in doc["rows"]
              if r["workload"] == wl and r["runs"] and r["name"] not in FEEDD]
        if fc and oc:
            line("%s: feedd's CPU s/epoch the lowest" % wl, min(fc) < min(oc)[0],
                 "feedd %s, lowest other %s (%s)" % (sig(min(fc)), sig(min(oc)[0]),
                                                     min(oc)[1]))
    for wl in ("fmnist", "jpeg"):
        dls = stall_of(doc, wl, dlw, "own")
        fs = stall_of(doc, wl, "feedd-py", "dataloader")
        fo = stall_of(doc, wl, "feedd-py", "own")
        if dls is not None and fs is not None:
            line("%s: stall ≤ 1%% at 80%% load where DataLoader's > 20%%" % wl,
                 fs <= 1.0 and dls > 20.0 if dls > 20.0 else None,
                 "feedd %.1f%% at 80%% of the DataLoader's rate (%s%% at 80%% of its own); "
                 "DataLoader %.1f%% at 80%% of its own" % (fs, fmt(fo, 1), dls))
    fb = {wl: rate_of(doc, wl, "feedd-py", "first_batch_ms") for wl in ("fmnist", "tokens",
                                                                         "jpeg")}
    got = [x for wl, x in fb.items() if x is not None and wl != "jpeg"]
    if got:
        line("first batch ≤ 100 ms on a running daemon", max(got) <= 100,
             "feedd-py: fmnist %s ms, tokens %s ms (JPEG: %s ms, 256 decodes on %d cores, "
             "not judged)" % (fmt(fb["fmnist"], 1), fmt(fb["tokens"], 1), fmt(fb["jpeg"], 1),
                              doc["workers"]))
    solo, g = rate_of(doc, "jobs4", "feedbench-solo"), rate_of(doc, "jobs4", "feedd-group-of-4")
    if solo and g:
        line("group of 4: each job ≥ 90% of one alone", g >= 0.9 * solo,
             "%s samples/s per member (all read over the run's time, / 4) = %.0f%% of one "
             "job alone, %s (same feedbench reader)" % (fmt(g), 100 * g / solo, fmt(solo)))
    return out


def merged_note(doc):
    m = doc.get("merged")
    if not m:
        return ""
    o = m["others_from"]
    return ("Rows redone in this run: %s; every other row, limit and stall run comes from "
            "`%s` of %s (load average at its end %.1f).\n" % (
                ", ".join(m["rows_redone"]), " ".join(["bench/run"] + o["argv"]), o["when"],
                o["loadavg_end"][0]))


def write(doc, out):
    with open(os.path.join(out, "latest.json"), "w") as f:
        json.dump(doc, f, indent=1)
    md = ["# bench/run, %s" % doc["when"], "",
          "`%s` on %d CPUs (load average at the end %.1f), feedd and every loader "
          "with %d workers, median of %d run(s) each; took %.0f s. feedd: `%s` ($SOCK a temporary "
          "path, $FEEDD_PID its pid, in the commands below). Peers: %s." % (
              " ".join(["bench/run"] + doc["argv"]), doc["cpus"], doc["loadavg_end"][0],
              doc["workers"],
              doc["runs"], doc["took_s"], doc["feedd"],
              ", ".join("%s %s" % kv for kv in doc["peers"].items()) or "none"), "",
          merged_note(doc), "Every consumer reads every byte of every batch once, a uint64 view summed in "
          "numpy (bench/contenders.py; feedbench its own checksum). CPU s/epoch: every "
          "process of the contender (and feedd's own for feedd rows) over the timed window; "
          "memory: peak RssAnon + RssShmem summed over those processes (a page shared by "
          "two processes counts twice). Stall: the share of the time a loop with a sleep "
          "per batch (a GPU step) waits for data, at 80% of the loader's own rate and at "
          "80% of the DataLoader's.", "", "## Summary", ""] + summary(doc) + [
              "", "## Targets (issue 23)", ""] + targets(doc) + [""]
    for wl in WORKLOADS:
        md += table(doc, wl)
    import lm_report
    md += lm_report.table(doc)
    lim = doc["limits"]
    md += ["## Limits", "", "| what | figure | command |", "|---|---|---|"]
    for wl in ("fmnist", "jpeg", "recipe", "tokens"):
        if wl in lim:
            l = lim[wl]
            md.append("| %s, single-threaded C loop, 1 core | %s | %s |" % (
                wl, "%s samples/s" % fmt(l["per_core"]) if "per_core" in l else l["error"],
                code(l["command"])))
    for z in lim.get("zstd", []):
        md.append("| zstd -b3 on %s | compress %s MB/s, decompress %s MB/s | %s |" % (
            z["file"], fmt(z["compress_mb_s"], 1), fmt(z["decompress_mb_s"], 1),
            code(z["command"])))
    if "memcpy" in lim:
        md.append("| memcpy, 1 core | %.1f GB/s | %s |" % (lim["memcpy"]["gb_s"],
                                                          lim["memcpy"]["command"]))
    md += ["", "The workers had %d cores (feedd --workers %d; num_workers / num_threads %d for "
           "the others), shared with the consumer; consumer CPU (the reading process's own "
           "threads, %% of the window):" % (doc["cpus"], doc["workers"], doc["workers"]), ""]
    md.append(", ".join("%s/%s %.0f%%" % (r["workload"], r["name"], med(r, "consumer_cpu_pct"))
                        for r in doc["rows"] if r["runs"] and med(r, "consumer_cpu_pct")))
    md += ["", "## Stall at 80% load", "",
           "| workload | loader | step at 80% of | batch | step ms | stall % | samples/s "
           "| command |", "|---|---|---|---|---|---|---|---|"]
    for s in doc.get("stalls", []):
        md.append("| %s | %s | %s | %d | %.2f | %s | %s | %s |" % (
            s["workload"], s["name"], "its own rate" if s["basis"] == "own" else "DataLoader's",
            s["batch"], s["step_ms"], fmt(s.get("stall_pct"), 1) if "stall_pct" in s else s.get("error"),
            fmt(s.get("samples_per_s")), code(s["command"])))
    with open(os.path.join(out, "latest.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    plots(doc, out)


def plots(doc, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    wls = [w for w in WORKLOADS if any(r["workload"] == w and r["runs"] for r in doc["rows"])]
    for key, fname, label, scale in (
            ("samples_per_s", "throughput.png", "samples/s (median, min–max)", "log"),
            ("cpu_s_per_epoch", "cpu.png", "CPU seconds per epoch (all processes)", "log")):
        if not wls:
            break
        fig, axes = plt.subplots(len(wls), 1, figsize=(9, 1.2 + 0.42 * sum(
            1 for r in doc["rows"] if r["workload"] in wls and r["runs"]) + 0.6 * len(wls)),
            squeeze=False)
        for ax, wl in zip(axes[:, 0], wls):
            rows = [r for r in doc["rows"] if r["workload"] == wl and r["runs"]]
            vals = [med(r, key) or 0 for r in rows]
            colors = ["tab:green" if r["name"] in FEEDD else "tab:gray" for r in rows]
            y = range(len(rows))
            ax.barh(y, vals, color=colors)
            if key == "samples_per_s":
                lo = [v - spread(r)[0] for v, r in zip(vals, rows)]
                hi = [spread(r)[1] - v for v, r in zip(vals, rows)]
                ax.errorbar(vals, list(y), xerr=[lo, hi], fmt="none", ecolor="black", lw=1)
                lim = doc["limits"].get(wl, {}).get("samples_per_s")
                if lim:
                    ax.axvline(lim, color="tab:red", ls="--", lw=1)
                    ax.text(lim, len(rows) - 0.5, " limit", color="tab:red", va="top",
                            fontsize=8)
            pos = [v for v in vals if v > 0]
            if pos and scale == "log":
                ax.set_xlim(left=min(pos) / 4)
            for yi, v in zip(y, vals):
                ax.text(v, yi, " " + short(v), va="center", fontsize=7)
            ax.set_yticks(list(y))
            ax.set_yticklabels([r["name"] for r in rows], fontsize=8)
            ax.invert_yaxis()
            ax.set_xscale(scale)
            ax.set_title(WORKLOADS[wl], fontsize=9)
        axes[-1, 0].set_xlabel(label + "; %d CPUs, %d workers each" % (doc["cpus"],
                                                                        doc["workers"]))
        fig.tight_layout()
        fig.savefig(os.path.join(out, fname), dpi=90)
        plt.close(fig)
    stall_plot(doc, out, plt)


def stall_plot(doc, out, plt):
    """Busy (the step) and waiting over the first batches, per workload:
    the DataLoader with a step at 80% of its rate, and every other loader
    with the same step (so one time axis fits a workload's rows)."""
    dl = "dataloader-%dw" % doc["workers"]
    recs = [s for s in doc.get("stalls", []) if s.get("events") and (
        s["basis"] == "dataloader" or s["name"] == dl)]
    groups = [(wl, [s for s in recs if s["workload"] == wl]) for wl in ("fmnist", "jpeg")]
    groups = [(wl, g) for wl, g in groups if g]
    if not groups:
        return
    n = sum(len(g) for _, g in groups)
    fig, axes = plt.subplots(n, 1, figsize=(9, 0.85 * n + 0.6 * len(groups) + 0.6),
                             squeeze=False)
    k = 0
    for wl, g in groups:
        # the shortest record's span: each shows a few batches at least
        span = min(s["events"][-1][2] - s["events"][0][0] for s in g)
        for j, s in enumerate(g):
            ax = axes[k, 0]
            k += 1
            t0 = s["events"][0][0]
            ev = [e for e in s["events"] if e[0] - t0 <= span]
            for i, (asked, got, done) in enumerate(ev):
                ax.axvspan(asked - t0, got - t0, color="tab:red", lw=0)       # waiting
                nxt = ev[i + 1][0] if i + 1 < len(ev) else done + s["step_ms"] / 1e3
                ax.axvspan(got - t0, nxt - t0, color="tab:green", lw=0, alpha=0.8)  # busy
            ax.set_yticks([])
            ax.set_xlim(0, span)
            ax.tick_params(labelsize=7)
            ax.set_ylabel(s["name"], rotation=0, ha="right", va="center", fontsize=8)
            head = "%s — " % WORKLOADS[wl].split(", batch")[0] if j == 0 else ""
            ax.set_title("%sbatch %d, step %.2f ms = 80%% of %s: stall %.1f%%" % (
                head, s["batch"], s["step_ms"],
                "its own rate" if s["basis"] == "own" else "the DataLoader's rate",
                s["stall_pct"]), fontsize=8, loc="left")
    axes[-1, 0].set_xlabel("seconds from the first timed batch; green: the training step "
                           "runs, red: the loop waits for data")
    fig.suptitle("A training step per batch at 80%% of the DataLoader's rate (%d CPUs, %d "
                 "workers each)" % (doc["cpus"], doc["workers"]), fontsize=9)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "stall.png"), dpi=90)
    plt.close(fig)
