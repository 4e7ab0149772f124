#!/usr/bin/env bash
# bench/vs_dataloader.sh: feedd against PyTorch's DataLoader on the same job
# (issue 5): Fashion-MNIST, "random_crop(size=28, pad=2) | hflip(p=0.5)",
# batch 256, two CPU workers each; plus feedd's rate per worker core as a
# share of the single-threaded decode+augment loop (bench_pipeline).
#
#   bench/vs_dataloader.sh [--bin DIR] [--data DIR] [--runs N] [--workers N]
#                          [--feed-epochs E] [--dl-epochs E]
#                          [--augment crop_flip|torchvision]
#
# Builds nothing: expects feedd, feedpack, feedctl, feedbench and
# bench_pipeline in --bin (default build/bin). Packs Fashion-MNIST into a
# temporary directory unless --data names a packed copy; starts
# feedd --workers N on a private socket; cleans up on exit.
#
# Each round runs feedbench and bench/dataloader_baseline.py in alternating
# order (so drift, e.g. a warming page cache, hits both), and
# bench_pipeline once; the figures are the medians of --runs rounds (3).
# The DataLoader runs twice a round: --source blocks (feedformat's random
# access, decoding a block for nearly every sample of a shuffled epoch)
# and --source memory (every record decoded into numpy arrays before the
# workers fork: its best case, the whole dataset in memory).
# Both readers touch every byte of every batch and time from their first
# batch (start-up excluded). The DataLoader uses the numpy crop+flip the
# baseline calls crop_flip (its fast way; with torchvision's ops the
# DataLoader ran at about half that rate here) with num_workers=N and
# persistent workers.
# feedbench reads more epochs (20) than the DataLoader (2) because it is
# 25-125x faster here: both runs then last long enough to be timed. One untimed
# feedbench epoch first warms feedd's block cache, as a long-running
# daemon's is (bench_pipeline times only the epochs after its first; the
# DataLoader's reader keeps one decoded block per worker, so it decodes a
# block for nearly every sample of a shuffled epoch whatever we do).
#
# Caveat printed with the figures: the trainer process, feedd's loop
# thread and its workers share the machine's CPUs, so "per worker core"
# is samples/s divided by the worker count, not by cores actually free.
# So a last section (two CPUs or more) measures it pinned: feedd
# --workers 1 on CPU 1, feedbench on CPU 0, and bench_pipeline on CPU 1.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/build/bin
data=
runs=3
workers=2
feed_epochs=20
dl_epochs=2
augment=crop_flip
pipeline="random_crop(size=28, pad=2) | hflip(p=0.5)"
py=/usr/bin/python3   # Debian's, with numpy and torch

me=vs_dataloader.sh
source "$root/bench/lib.sh"
while [ $# -gt 0 ]; do
	case $1 in
	--feed-epochs) feed_epochs=$2; shift 2 ;;
	--dl-epochs) dl_epochs=$2; shift 2 ;;
	--augment) augment=$2; shift 2 ;;
	-h|--help) sed -n '2,39p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*)
		bench_option "$@" || {
			echo "vs_dataloader.sh: unknown argument '$1' (see --help)" >&2; exit 2; }
		shift 2 ;;
	esac
done

bench_setup feedd feedpack feedctl feedbench bench_pipeline
"$py" -c 'import numpy, torch' 2>/dev/null || {
	echo "vs_dataloader.sh: $py cannot import numpy and torch" >&2; exit 1; }

sock=$work/feedd.sock
start_feedd "$sock" "$workers"

out=$work/results.jsonl
run_feedd() {
	"$bin/feedbench" --socket "$sock" --dataset fashion-mnist --pipeline "$pipeline" \
		--batch 256 --epochs "$feed_epochs" --json | tag feedd
}
run_dl() {
	local src
	for src in blocks memory; do
		"$py" "$root/bench/dataloader_baseline.py" "$data" --workers "$workers" \
			--batch 256 --epochs "$dl_epochs" --augment "$augment" --size 28 --pad 2 \
			--source "$src" --json | tag "dataloader_$src"
	done
}

echo "$(nproc) CPUs; $runs rounds; feedd --workers $workers, DataLoader num_workers=$workers" >&2
# warm-up, not counted: fills feedd's block cache, as in a long-running
# daemon (bench_pipeline likewise times only the epochs after its first)
"$bin/feedbench" --socket "$sock" --dataset fashion-mnist --pipeline "$pipeline" --batch 256 \
	--epochs 1 >/dev/null
for i in $(seq "$runs"); do
	if [ $((i % 2)) -eq 1 ]; then run_feedd; run_dl; else run_dl; run_feedd; fi
	"$bin/bench_pipeline" "$data" --pipeline "$pipeline" --batch 256 --epochs 4 | tag single
	echo "round $i of $runs done" >&2
done

# Per core, pinned: one feedd worker alone on CPU 1 against the single
# thread loop alone on CPU 1, the trainer (feedbench) on CPU 0, so neither
# shares its core with anything else of the run. Needs two CPUs.
if [ "$(nproc)" -ge 2 ]; then
	psock=$work/feedd-pinned.sock
	start_feedd "$psock" 1 taskset -c 1
	taskset -c 0 "$bin/feedbench" --socket "$psock" --dataset fashion-mnist \
		--pipeline "$pipeline" --batch 256 --epochs 1 >/dev/null
	for i in $(seq "$runs"); do
		taskset -c 0 "$bin/feedbench" --socket "$psock" --dataset fashion-mnist \
			--pipeline "$pipeline" --batch 256 --epochs "$feed_epochs" --credits 8 \
			--json | tag pinned
		taskset -c 1 "$bin/bench_pipeline" "$data" --pipeline "$pipeline" --batch 256 \
			--epochs 4 | tag pinned_single
	done
	echo "pinned per-core rounds done" >&2
fi

"$py" - "$out" "$workers" "$pipeline" "$augment" <<'EOF'
import json, statistics, sys

path, workers, pipeline, augment = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
rows = {"feedd": [], "dataloader_blocks": [], "dataloader_memory": [], "single": [],
        "pinned": [], "pinned_single": []}
for line in open(path):
    d = json.loads(line)
    rows[d["row"]].append(d)

def med(name, key="samples_per_s"):
    return statistics.median(r[key] for r in rows[name])

def runs(name):
    return ", ".join("%.0f" % r["samples_per_s"] for r in rows[name])

f, dl, dm, st = med("feedd"), med("dataloader_blocks"), med("dataloader_memory"), med("single")
print("Fashion-MNIST, '%s', batch 256, %d workers each (medians of %d)"
      % (pipeline, workers, len(rows["feedd"])))
print("  feedd + feedbench        %10.0f samples/s  (runs: %s; stall %.1f%%)"
      % (f, runs("feedd"), med("feedd", "stall_pct")))
print("  DataLoader, from blocks   %9.0f samples/s  (runs: %s; stall %.1f%%)"
      % (dl, runs("dataloader_blocks"), med("dataloader_blocks", "stall_pct")))
print("  DataLoader, from memory   %9.0f samples/s  (runs: %s; stall %.1f%%)"
      % (dm, runs("dataloader_memory"), med("dataloader_memory", "stall_pct")))
print("  ratio feedd / DataLoader  %9.1fx from blocks, %.1fx from memory (%s augmentation)"
      % (f / dl, f / dm, augment))
print("  single-thread loop       %10.0f samples/s  (bench_pipeline; runs: %s)" % (st, runs("single")))
print("  feedd per worker core    %10.0f samples/s = %.0f%% of the single-thread rate"
      % (f / workers, 100.0 * f / workers / st))
print("  (the trainer, feedd's loop thread and its workers share the machine's CPUs)")
if rows["pinned"]:
    p, ps = med("pinned"), med("pinned_single")
    print("Per core, pinned: feedd --workers 1 on CPU 1, feedbench on CPU 0")
    print("  feedd, 1 worker          %10.0f samples/s  (runs: %s)" % (p, runs("pinned")))
    print("  single-thread loop       %10.0f samples/s  (on CPU 1; runs: %s)"
          % (ps, runs("pinned_single")))
    print("  feedd per worker core    %10.0f%% of the single-thread rate" % (100.0 * p / ps))
EOF
