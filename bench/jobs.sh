#!/usr/bin/env bash
# bench/jobs.sh: many jobs on one node (issue 13). Fashion-MNIST,
# "random_crop(size=28, pad=2) | hflip(p=0.5)", batch 256, full shuffle:
#   solo      feedbench --jobs 1          one job alone
#   jobs4     feedbench --jobs 4          4 independent streams, same daemon
#   dl4       4 concurrent PyTorch DataLoaders (num_workers=2 each) on the
#             same records (bench/dataloader_baseline.py --source blocks)
# For the feedd rows: samples/s of each job, the daemon's CPU seconds
# (utime + stime from /proc) per epoch delivered to one job, and its peak
# RssAnon + RssShmem (sampled every 0.1 s). Medians of --runs rounds (3).
#
#   bench/jobs.sh [--bin DIR] [--data DIR] [--runs N] [--workers N]
#                 [--feed-epochs E] [--dl-epochs E]
#
# Builds nothing: expects feedd, feedpack, feedctl and feedbench in --bin
# (default build/bin). Packs Fashion-MNIST unless --data names a packed
# copy; starts feedd --workers N (2) on a private socket; cleans up on exit.
# One untimed epoch first warms the block cache, as a long-running
# daemon's is. feedbench reads more epochs (10) than the DataLoaders (1):
# both then last long enough to be timed.
#
# Measured on the 2-CPU development machine (shared with other builds, load
# average 4 to 8), with bench/jobs.sh --runs 3 --feed-epochs 20:
#   1 job alone               1200232 samples/s; 0.048 daemon CPU s/epoch, 47 MiB
#   4 independent streams      419755 samples/s per job (368695..537266) = 35% of
#                             solo; 0.038 daemon CPU s/epoch, 50 MiB
#   4 DataLoaders (2 workers)    2733 samples/s per job (2400..3104): 154x less
# (An earlier run, before pool_yield: 1426939 solo, 464170 per job of 4 =
# 33%, 2912 per DataLoader.) The 4 readers and 2 workers share 2 CPUs;
# memory is the 47 MB of decoded blocks in the cache plus the regions.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/build/bin
data=
runs=3
workers=2
feed_epochs=10
dl_epochs=1
pipeline="random_crop(size=28, pad=2) | hflip(p=0.5)"
py=/usr/bin/python3   # Debian's, with numpy and torch

me=jobs.sh
source "$root/bench/lib.sh"
while [ $# -gt 0 ]; do
	case $1 in
	--feed-epochs) feed_epochs=$2; shift 2 ;;
	--dl-epochs) dl_epochs=$2; shift 2 ;;
	-h|--help) sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*)
		bench_option "$@" || {
			echo "jobs.sh: unknown argument '$1' (see --help)" >&2; exit 2; }
		shift 2 ;;
	esac
done

bench_setup feedd feedpack feedctl feedbench
sock=$work/feedd.sock
start_feedd "$sock" "$workers"
out=$work/results.jsonl
tick=$(getconf CLK_TCK)

# CPU seconds of feedd so far (utime + stime, fields 14 and 15).
feedd_cpu() {
	awk -v t="$tick" '{ sub(/^.*\) /, ""); printf "%.3f\n", ($12 + $13) / t }' \
		"/proc/$feedd_pid/stat"
}

# Samples feedd's RssAnon + RssShmem into $work/peak until killed.
sample_memory() {
	local peak=0 kb
	while :; do
		kb=$(awk '/^RssAnon:|^RssShmem:/ { s += $2 } END { print s }' \
			"/proc/$feedd_pid/status" 2>/dev/null || echo 0)
		[ "${kb:-0}" -gt "$peak" ] && peak=$kb && echo "$peak" >"$work/peak"
		sleep 0.1
	done
}

# run_feedd ROW JOBS: one feedbench --jobs JOBS, each job's line tagged,
# plus a line with the daemon's CPU and peak memory over it.
run_feedd() {
	local row=$1 jobs=$2 c0 c1 mpid
	echo 0 >"$work/peak"
	sample_memory &
	mpid=$!
	c0=$(feedd_cpu)
	"$bin/feedbench" --socket "$sock" --dataset fashion-mnist --pipeline "$pipeline" \
		--batch 256 --epochs "$feed_epochs" --jobs "$jobs" --json | tag "$row"
	c1=$(feedd_cpu)
	kill "$mpid"; wait "$mpid" 2>/dev/null || true
	awk -v a="$c0" -v b="$c1" -v e=$((jobs * feed_epochs)) -v p="$(cat "$work/peak")" \
		'BEGIN { printf "{\"cpu_s\": %.3f, \"epochs\": %d, \"peak_kb\": %d}\n", b - a, e, p }' |
		tag "${row}_daemon"
}

run_dl4() {
	local i pids=
	for i in 1 2 3 4; do
		"$py" "$root/bench/dataloader_baseline.py" "$data" --workers 2 --batch 256 \
			--epochs "$dl_epochs" --augment crop_flip --size 28 --pad 2 --source blocks \
			--json >"$work/dl$i.json" &
		pids="$pids $!"
	done
	wait $pids
	for i in 1 2 3 4; do tag dl4 <"$work/dl$i.json"; done
}

echo "$(nproc) CPUs; $runs rounds; feedd --workers $workers" >&2
"$bin/feedbench" --socket "$sock" --dataset fashion-mnist --pipeline "$pipeline" --batch 256 \
	--epochs 1 >/dev/null
for i in $(seq "$runs"); do
	run_feedd solo 1
	run_feedd jobs4 4
	run_dl4
	echo "round $i of $runs done" >&2
done

"$py" - "$out" "$workers" "$pipeline" <<'EOF'
import json, statistics, sys

path, workers, pipeline = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rows = {}
for line in open(path):
    d = json.loads(line)
    rows.setdefault(d["row"], []).append(d)
med = statistics.median

def jobs(name):
    # per round: the median job's rate; then the median over rounds
    per = [r["samples_per_s"] for r in rows[name]]
    return med(per), min(per), max(per)

def daemon(name):
    d = rows[name + "_daemon"]
    return med([r["cpu_s"] / r["epochs"] for r in d]), max(r["peak_kb"] for r in d) / 1024

s, _, _ = jobs("solo")
j, jlo, jhi = jobs("jobs4")
dl, dlo, dhi = jobs("dl4")
sc, sm = daemon("solo")
jc, jm = daemon("jobs4")
print("Fashion-MNIST, '%s', batch 256, full shuffle; feedd --workers %d (medians of %d rounds)"
      % (pipeline, workers, len(rows["solo_daemon"])))
print("  1 job alone              %10.0f samples/s; daemon %.3f CPU s/epoch, peak %.0f MiB"
      % (s, sc, sm))
print("  4 independent streams    %10.0f samples/s per job (%.0f..%.0f) = %.0f%% of solo; "
      "daemon %.3f CPU s/epoch, peak %.0f MiB" % (j, jlo, jhi, 100 * j / s, jc, jm))
print("  4 DataLoaders (2 workers)%10.0f samples/s per job (%.0f..%.0f)" % (dl, dlo, dhi))
print("  feedd job / DataLoader job: %.1fx" % (j / dl))
print("  (CPU s/epoch: the daemon's utime + stime over the run / epochs delivered to all jobs;"
      " memory: RssAnon + RssShmem)")
EOF
