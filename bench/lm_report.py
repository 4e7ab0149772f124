"""bench/lm_report.py: bench/run's table of the language-model rows (lm).

table(doc) is the Markdown section latest.md gets for them: tokens/s,
CPU seconds per pass over the corpus, time to first batch, Megatron's
index build, and feedd's ratio to each peer (its concat and pack rows
against every other row; a ratio is feedd's figure over the peer's for
tokens/s, the peer's over feedd's for CPU, so above 1× is feedd ahead).
"""
from run_report import code, fmt, med, sig, spread

FEEDD = ("feedd-concat", "feedd-pack")
NOTE = ("One corpus for every row (bench/lm_corpus.py: %s). CPU s/epoch: every process of "
        "the contender (and feedd's for feedd rows) per pass over the corpus (rows per "
        "epoch: %s). First batch: from constructing the dataset and loader to the first "
        "batch in hand (Megatron's index already built; its build is the index column, "
        "redone each run). Conversion: the one-time conversion of the corpus's Megatron "
        ".bin/.idx into the row's own format, timed when bench/run made it (feedpack "
        "megatron; litdata.optimize; Mosaic's MDSWriter). feedd ÷ peer: tokens/s feedd's "
        "over the peer's, CPU the peer's over feedd's (above 1× feedd ahead).")
TITLE = ("### Language-model documents: rows of %s tokens, batch %s, input_ids + labels "
         "as torch int64")


def ratio(a, b):
    return "%.1f×" % (a / b) if a and b else "–"


def rows_of(doc):
    return [r for r in doc["rows"] if r["workload"] == "lm"]


def feedd_figures(rows):
    """{name: (tokens/s, CPU s/epoch)} of the feedd rows that ran."""
    return {r["name"]: (med(r, "tokens_per_s"), med(r, "cpu_s_per_epoch"))
            for r in rows if r["name"] in FEEDD and r["runs"]}


def line(r, feedd):
    """One table row."""
    if not r["runs"]:
        return "| %s | %s | | | | | | | %s |" % (
            r["name"], " ".join((r["error"] or "no runs").replace("|", "/").split())[-300:],
            code(r.get("command")))
    rate, cpu = med(r, "tokens_per_s"), med(r, "cpu_s_per_epoch")
    lo, hi = spread(r, "tokens_per_s")
    vs = []
    if r["name"] not in FEEDD:
        for name in FEEDD:
            if name in feedd:
                f_rate, f_cpu = feedd[name]
                vs.append("%s: %s tokens/s, %s CPU" % (name.split("-")[1], ratio(f_rate, rate),
                                                        ratio(cpu, f_cpu)))
    name = "**%s**" % r["name"] if r["name"] in FEEDD else r["name"]
    return "| %s | %s (%s–%s) | %s | %s | %s | %s | %s | %s | %s |" % (
        name, fmt(rate), fmt(lo), fmt(hi), sig(cpu), fmt(med(r, "first_batch_ms"), 1),
        fmt(med(r, "index_build_ms"), 1), fmt(med(r, "conversion_s"), 1),
        fmt((med(r, "rss_kib") or 0) / 1024),
        "; ".join(vs) or "–", code(r["command"]))


def corpus(meta):
    """The corpus in words, from bench/lm_corpus.py's PREFIX.json."""
    src = ", ".join("%s %s documents, %.1f MB" % (k, fmt(v["documents"]), v["text_bytes"] / 1e6)
                    for k, v in meta["sources"].items())
    return "%s documents, %s tokens (%s), vocabulary %d" % (
        fmt(meta["documents"]), fmt(meta["tokens"]), src, meta["vocab"])


def table(doc):
    rows = rows_of(doc)
    if not rows:
        return []
    ran = [r for r in rows if r["runs"]]
    seq = ran[0]["runs"][0].get("seq_len", "?") if ran else "?"
    batch = ran[0]["runs"][0].get("batch", "?") if ran else "?"
    epoch = {r["name"]: r["runs"][0].get("epoch_samples") for r in ran}
    feedd = feedd_figures(rows)
    out = [TITLE % (seq, batch), "",
           NOTE % (
               doc.get("lm_corpus") or "see its header",
               ", ".join("%s %s" % kv for kv in epoch.items()) or "–"), "",
           "| contender | tokens/s (min–max) | CPU s/epoch | first batch ms | index build ms "
           "| conversion s | RssAnon+RssShmem MiB | feedd ÷ this | command |",
           "|---|---|---|---|---|---|---|---|---|"]
    return out + [line(r, feedd) for r in rows] + [""]
