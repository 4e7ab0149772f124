#!/usr/bin/env bash
# bench/groups.sh: what a group saves (issue 13, "Measure"): 1 job alone,
# 4 independent jobs (feedbench --jobs 4) and 4 jobs in one group
# (--jobs 4 --group g), each on a fresh feedd whose block cache was warmed
# by one epoch first, so each row starts alike.
#
#   bench/groups.sh [--bin DIR] [--data DIR] [--runs N] [--workers N]
#
# Fashion-MNIST (train, 60 000), random_crop(size=28, pad=2) | hflip(p=0.5),
# batch 256, full shuffle, 3 epochs; --runs N (default 3) of each row.
# Prints per run: samples/s of each job, the daemon's CPU seconds over the
# measured epochs (utime + stime from /proc/PID/stat, after the warm-up)
# and its peak RssAnon + RssShmem (/proc/PID/status every 50 ms).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/build/bin
data=
runs=3
workers=2
me=groups.sh
# shellcheck source=bench/lib.sh
. "$root/bench/lib.sh"
while [ $# -gt 0 ]; do
	if bench_option "$@"; then shift 2; continue; fi
	echo "$me: unknown option '$1'" >&2
	exit 2
done
bench_setup feedd feedctl feedbench feedpack

pipeline="random_crop(size=28, pad=2) | hflip(p=0.5)"
tck=$(getconf CLK_TCK)

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# row NAME FEEDBENCH-ARGS...: one run of one row.
row() {
	local name=$1 sock=$work/$1.sock
	shift
	start_feedd "$sock" "$workers"
	"$bin/feedbench" --socket "$sock" --dataset fashion-mnist --batch 256 --epochs 1 \
		--json >/dev/null
	local t0 peak=0 m
	t0=$(cpu_ticks "$feedd_pid")
	(while kill -0 "$feedd_pid" 2>/dev/null; do
		awk '/^(RssAnon|RssShmem):/ {s += $2} END {print s}' "/proc/$feedd_pid/status" \
			2>/dev/null || true
		sleep 0.05
	done) >"$work/mem" &
	local sampler=$!
	"$bin/feedbench" --socket "$sock" --dataset fashion-mnist --pipeline "$pipeline" \
		--batch 256 --epochs 3 --order full --json "$@" >"$work/out"
	local t1
	t1=$(cpu_ticks "$feedd_pid")
	kill -TERM "$feedd_pid"
	wait "$feedd_pid" || true
	wait "$sampler" 2>/dev/null || true
	peak=$(sort -n "$work/mem" | tail -1)
	m=$(python3 -c 'import json, sys
print(" ".join("%.0f" % json.loads(l)["samples_per_s"] for l in open(sys.argv[1])))' \
		"$work/out")
	printf '%-7s samples/s per job: %s; daemon CPU %.2f s for 3 epochs; peak RssAnon+RssShmem %d MiB\n' \
		"$name" "$m" "$(awk -v a="$t0" -v b="$t1" -v t="$tck" 'BEGIN {print (b - a) / t}')" \
		$((peak / 1024))
}

for _ in $(seq "$runs"); do
	row solo
	row jobs4 --jobs 4
	row group4 --jobs 4 --group g
done
