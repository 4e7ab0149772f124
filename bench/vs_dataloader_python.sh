#!/usr/bin/env bash
# bench/vs_dataloader_python.sh: the Python client (feedclient.Loader)
# against PyTorch's DataLoader on the same job (issue 11): Fashion-MNIST,
# "random_crop(size=28, pad=2) | hflip(p=0.5)", batch 256; the Python
# layer's own cost per batch; and the time to the first batch.
#
#   bench/vs_dataloader_python.sh [--bin DIR] [--data DIR] [--runs N] [--workers N]
#                                 [--feed-epochs E] [--dl-epochs E] [--first N]
#                                 [--step-ms X]
#
# Builds nothing: expects feedd, feedpack, feedctl and feedbench in --bin
# (default build/bin), the package in client/python (put first on
# PYTHONPATH here) and Debian's /usr/bin/python3 with numpy and torch.
# Packs Fashion-MNIST into a temporary directory unless --data names a
# packed copy; starts feedd --workers N (2) on a private socket; cleans up
# on exit.
#
# Every reader runs bench/consume_batches.py's loop: each batch's fields
# summed as torch tensors (every byte read) on the consumer's thread, timed
# from the first batch to the last (start-up excluded). Rows:
#   (a) feedclient.Loader(as_torch=True), crop+flip, --feed-epochs (20)
#       epochs (bench/feedclient_loop.py); feedbench (C) on the same
#       stream for reference
#   (b) DataLoader(num_workers=N), per-sample numpy crop+flip, records in
#       memory (bench/dataloader_baseline.py --source memory)
#   (c) the same reading through bench/feedformat.py (--source blocks)
#   (d) the DataLoader at its fastest here: num_workers=0, records in
#       memory, crop+flip once per batch in numpy through a batch sampler
#       (--per-batch); (b)-(d) read --dl-epochs (2) epochs
#   (e) the Python layer's own cost per batch: identity pipeline, neither
#       reader touching the bytes (feedbench --no-touch; the loop without
#       its sums), us per batch of the Python loop above feedbench on the
#       same stream (batch 256, full shuffle, seed 1, credits 4). Flat
#       out, in wall time and in the reader process's CPU time over the
#       timed window (which preemption by feedd's workers does not
#       inflate); then with a busy step of --step-ms (1) ms after each
#       batch, so that batches wait for the reader as in training: the
#       median time a batch spends in the reader, from next() to dropping
#       it (own_p50_us of either)
#   (f) first batch: time from Loader(...) to the first batch in hand on
#       the running daemon, --first (10) times in one process (median)
# Each round runs the feedd rows and the DataLoader rows in alternating
# order (drift, e.g. a warming page cache, hits both); the figures are the
# medians of --runs rounds (3). One untimed feedbench epoch first warms
# feedd's block cache, as a long-running daemon's is. Targets (issue 11):
# (a) >= 10x (b) and >= 5x (d); (e) <= 20 us; (f) <= 100 ms.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/build/bin
data=
runs=3
workers=2
feed_epochs=20
dl_epochs=2
first=10
step_ms=1
pipeline="random_crop(size=28, pad=2) | hflip(p=0.5)"
py=/usr/bin/python3   # Debian's, with numpy and torch

me=vs_dataloader_python.sh
source "$root/bench/lib.sh"
while [ $# -gt 0 ]; do
	case $1 in
	--feed-epochs) feed_epochs=$2; shift 2 ;;
	--dl-epochs) dl_epochs=$2; shift 2 ;;
	--first) first=$2; shift 2 ;;
	--step-ms) step_ms=$2; shift 2 ;;
	-h|--help) sed -n '2,46p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*)
		bench_option "$@" || {
			echo "vs_dataloader_python.sh: unknown argument '$1' (see --help)" >&2; exit 2; }
		shift 2 ;;
	esac
done

export PYTHONPATH=$root/client/python${PYTHONPATH:+:$PYTHONPATH}
"$py" -c 'import numpy, torch, feedclient' 2>/dev/null || {
	echo "vs_dataloader_python.sh: $py cannot import numpy, torch and feedclient" \
		"(client/python)" >&2; exit 1; }

bench_setup feedd feedpack feedctl feedbench

sock=$work/feedd.sock
start_feedd "$sock" "$workers"

loop() { "$py" "$root/bench/feedclient_loop.py" --socket "$sock" --json "$@"; }
fbench() {
	"$bin/feedbench" --socket "$sock" --dataset fashion-mnist --batch 256 --seed 1 --json "$@"
}
run_feedd() {
	loop --pipeline "$pipeline" --epochs "$feed_epochs" | tag feedclient
	fbench --pipeline "$pipeline" --epochs "$feed_epochs" | tag feedbench
	loop --pipeline identity --no-touch --epochs "$feed_epochs" | tag layer_py
	fbench --no-touch --epochs "$feed_epochs" | tag layer_c
	loop --pipeline identity --no-touch --epochs 4 --step-ms "$step_ms" | tag step_py
	fbench --no-touch --epochs 4 --step-ms "$step_ms" | tag step_c
	loop --pipeline "$pipeline" --first-batch "$first" | tag first
}
dl() {
	"$py" "$root/bench/dataloader_baseline.py" "$data" --batch 256 --epochs "$dl_epochs" \
		--augment crop_flip --size 28 --pad 2 --json "$@"
}
run_dl() {
	dl --workers "$workers" --source memory | tag dl_memory
	dl --workers "$workers" --source blocks | tag dl_blocks
	dl --workers 0 --source memory --per-batch | tag dl_batch
}

echo "$(nproc) CPUs; $runs rounds; feedd --workers $workers, DataLoader num_workers=$workers" >&2
# warm-up, not counted: fills feedd's block cache, as in a long-running daemon
fbench --pipeline "$pipeline" --epochs 1 >/dev/null
for i in $(seq "$runs"); do
	if [ $((i % 2)) -eq 1 ]; then run_feedd; run_dl; else run_dl; run_feedd; fi
	echo "round $i of $runs done" >&2
done

"$py" - "$work/results.jsonl" "$workers" "$pipeline" "$step_ms" <<'EOF'
import collections, json, os, statistics, sys

path, workers, pipeline, step_ms = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
rows = collections.defaultdict(list)
for line in open(path):
    d = json.loads(line)
    rows[d["row"]].append(d)

def med(name, key="samples_per_s"):
    return statistics.median(r[key] for r in rows[name])

def us(name):  # us per batch: the Python loop reports it; feedbench its wall and count
    return med(name, "us_per_batch") if "us_per_batch" in rows[name][0] else \
        statistics.median(r["wall_s"] / r["batches"] * 1e6 for r in rows[name])

def cpu(name):  # the reader process's CPU time per batch over the timed window
    return med(name, "cpu_us") if "cpu_us" in rows[name][0] else \
        statistics.median(r["cpu_s"] / r["batches"] * 1e6 for r in rows[name])

def line(label, name, extra=""):
    print("  %-44s %9.0f samples/s  (runs: %s)%s" % (label, med(name), ", ".join(
        "%.0f" % r["samples_per_s"] for r in rows[name]), extra))

a, b, c, d = med("feedclient"), med("dl_memory"), med("dl_blocks"), med("dl_batch")
print("Fashion-MNIST, '%s', batch 256, every batch summed as torch tensors "
      "(medians of %d)" % (pipeline, len(rows["feedclient"])))
line("(a) feedclient.Loader(as_torch=True)", "feedclient",
     "; stall %.0f%%, sums %.0f us/batch" % (med("feedclient", "stall_pct"),
                                              med("feedclient", "touch_us")))
line("    feedbench (C), same stream", "feedbench")
line("(b) DataLoader(num_workers=%d), from memory" % workers, "dl_memory")
line("(c) DataLoader(num_workers=%d), feedformat.py" % workers, "dl_blocks")
line("(d) DataLoader(num_workers=0), per-batch numpy", "dl_batch")
print("  ratios (a)/(b) %.1fx (target >= 10x), (a)/(c) %.1fx, (a)/(d) %.1fx (target >= 5x)"
      % (a / b, a / c, a / d))
print("(e) Python layer, identity, no byte touched by either reader, us per batch "
      "(target <= 20 above C):")
own = lambda name: med(name, "own_p50_us")
for label, f, py_row, c_row in (
        ("flat out, wall time", us, "layer_py", "layer_c"),
        ("flat out, reader's CPU time", cpu, "layer_py", "layer_c"),
        ("%s ms step, a batch's own time" % step_ms, own, "step_py", "step_c")):
    p, q = f(py_row), f(c_row)
    print("  %-32s Python loop %6.1f, feedbench %6.1f: %+5.1f" % (label, p, q, p - q))
print("(f) first batch, Loader(...) to a batch in hand: median %.1f ms (runs' medians: %s; "
      "target <= 100 ms)" % (med("first", "first_batch_ms"), ", ".join(
          "%.1f" % r["first_batch_ms"] for r in rows["first"])))
print("  (feedd's workers, its loop thread and the reader share the machine's %s CPUs)"
      % os.cpu_count())
EOF
