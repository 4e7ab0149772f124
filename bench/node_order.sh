#!/usr/bin/env bash
# bench/node_order.sh: what node order saves on several nodes (issue 24,
# "Measured"). Four simulated nodes: four feedds on private sockets, each
# with its own block cache of --cache-mb MB (default 15: about 1.25 times a
# quarter of the decoded dataset, far less than all of it), and on each
# node one feedbench of --ranks R ranks (default 2: --nodes 4 --node K
# --jobs 2 --world, 8 ranks in all). feedbench's ranks do not wait for each
# other as a training step's all-reduce makes them: a rank that runs an
# epoch ahead makes its node hold two epochs' blocks at once. Rows:
#   full         per-rank full shuffle (today's default)
#   block        block-window shuffle, 8 blocks a window
#   node-rotate  --order node, a new deal each epoch
#   node-fixed   --order node --node-deal fixed
# Each row runs twice on fresh daemons: 1 epoch (the cold epoch), then 3
# epochs; the warm epochs are the difference, halved. Per node it prints
# the bytes feedd read from the dataset's files (rchar of /proc/PID/io,
# taken after start-up: the manifest and footers are left out) and the
# block cache's hit rate (feedctl status --json, hits / (hits + misses)).
#
#   bench/node_order.sh [--bin DIR] [--data DIR] [--workers N] [--cache-mb MB]
#                       [--ranks R]
#
# Fashion-MNIST (train, 60 000 samples, 47 MB decoded, 720 blocks of 64 KiB
# as feedpack packs it), batch 256, no pipeline, seed 1.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/build/bin
data=
workers=1
cache_mb=15
ranks=2
me=node_order.sh
# shellcheck source=bench/lib.sh
. "$root/bench/lib.sh"
while [ $# -gt 0 ]; do
	if [ "$1" = --cache-mb ] && [ $# -ge 2 ]; then cache_mb=$2; shift 2; continue; fi
	if [ "$1" = --ranks ] && [ $# -ge 2 ]; then ranks=$2; shift 2; continue; fi
	if bench_option "$@"; then shift 2; continue; fi
	echo "$me: unknown option '$1'" >&2
	exit 2
done
bench_setup feedd feedctl feedbench feedpack
nodes=4
world=--world
[ "$ranks" -gt 1 ] || world=

rchar() { awk '/^rchar:/ {print $2}' "/proc/$1/io"; }
cache() {
	"$bin/feedctl" --socket "$1" status --json |
		python3 -c 'import json, sys; c = json.load(sys.stdin)["cache"]; print(c["hits"], c["misses"])'
}

# run NAME EPOCHS FEEDBENCH-ARGS...: fresh daemons, one feedbench per node at
# once; prints per node "bytes hits misses" read during the run.
run() {
	local name=$1 epochs=$2 k
	shift 2
	local pids=() socks=() jobs=()
	for k in $(seq 0 $((nodes - 1))); do
		socks[k]=$work/$name-$epochs-$k.sock
		"$bin/feedd" --socket "${socks[k]}" --dataset "fashion-mnist=$data" \
			--workers "$workers" --cache-bytes $((cache_mb * 1000000)) \
			2>>"$work/feedd.log" &
		pids[k]=$!
		feedd_pids="$feedd_pids ${pids[k]}"
	done
	for k in $(seq 0 $((nodes - 1))); do
		for _ in $(seq 200); do
			"$bin/feedctl" --socket "${socks[k]}" status >/dev/null 2>&1 && break
			sleep 0.05
		done
	done
	local r0=() c0=()
	for k in $(seq 0 $((nodes - 1))); do
		r0[k]=$(rchar "${pids[k]}")
		c0[k]=$(cache "${socks[k]}")
	done
	for k in $(seq 0 $((nodes - 1))); do
		"$bin/feedbench" --socket "${socks[k]}" --dataset fashion-mnist --batch 256 \
			--epochs "$epochs" --seed 1 --jobs "$ranks" $world --nodes "$nodes" --node "$k" \
			--json "$@" >"$work/$name-$epochs-$k.out" &
		jobs[k]=$!
	done
	for k in $(seq 0 $((nodes - 1))); do
		wait "${jobs[k]}" || { echo "$me: feedbench of node $k failed" >&2; exit 1; }
	done
	for k in $(seq 0 $((nodes - 1))); do
		local c1 r1
		r1=$(rchar "${pids[k]}")
		c1=$(cache "${socks[k]}")
		echo "$((r1 - r0[k])) $c1 ${c0[k]}" |
			awk '{print $1, $2 - $4, $3 - $5}'
		kill -TERM "${pids[k]}"
		wait "${pids[k]}" || true
	done
}

printf '%-12s %4s  %-14s %-14s %-10s %-10s\n' row node "cold MB read" "warm MB/epoch" \
	"cold hits" "warm hits"
row() {
	local name=$1
	shift
	run "$name" 1 "$@" >"$work/$name.1"
	run "$name" 3 "$@" >"$work/$name.3"
	paste -d' ' "$work/$name.1" "$work/$name.3" | awk -v row="$name" '
	function rate(h, m) { return h + m ? sprintf("%.1f%%", 100 * h / (h + m)) : "-" }
	{
		wb = ($4 - $1) / 2; wh = ($5 - $2) / 2; wm = ($6 - $3) / 2
		if (wb < 0 && wb > -50000) wb = 0  # a few bytes fewer in the longer run
		printf "%-12s %4d  %-14.1f %-14.1f %-10s %-10s\n", row, NR - 1, $1 / 1e6,
		       wb / 1e6, rate($2, $3), rate(wh, wm)
		tb += $1; tw += wb
	}
	END { printf "%-12s  all  %-14.1f %-14.1f\n", row, tb / 1e6, tw / 1e6 }'
}

row full --order full
row block --order block --window 8
row node-rotate --order node --node-deal rotate
row node-fixed --order node --node-deal fixed
du -sb "$data" | awk '{printf "dataset on disk: %.1f MB\n", $1 / 1e6}'
