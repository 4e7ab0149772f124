#!/usr/bin/env bash
# bench/light_vs_heavy.sh: issue 13's starvation case. Another user's light
# job (nobody: Fashion-MNIST's test split, batch 500, crop + flip, one
# epoch = 20 batches) alone, then next to root's heavy stream (the
# training split, "resize(h=1024, w=1024)", batch 64, 16 credits).
# Prints the light job's time and rate each way (--runs N of each, 2).
#
#   sudo bench/light_vs_heavy.sh [--bin DIR] [--runs N] [--workers N]
#
# Needs root (the light job runs as nobody through setpriv) and about
# 1 GiB of memory for the heavy stream's 16 slots. Builds nothing: expects
# feedd, feedpack, feedctl and feedbench in --bin (default build/bin).
#
# Measured on the 2-CPU development machine, --workers 2, while other
# builds ran there (load average 5 to 9, so every figure is noisy):
#   before fair shares (3066dc4): light next to heavy 21.2-71.4 s for its
#     20 batches (133-448 samples/s); alone 0.009-0.037 s
#   with them (pool_yield included): next to heavy 0.013-0.151 s; alone
#     0.005-0.072 s; in a later run 0.025-0.055 s next to heavy, 0.009-0.029
#     s alone; with the final pool at load average 3: 0.010-0.029 s next to
#     heavy (median 0.017), 0.007-0.010 s alone
# On a quieter machine, before pool_yield existed, next to heavy took
# 0.006-0.43 s: a light batch waited for a whole heavy batch (~150 ms)
# whenever both workers had just started one.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/build/bin
data=
runs=2
workers=2
me=light_vs_heavy.sh
source "$root/bench/lib.sh"
while [ $# -gt 0 ]; do
	case $1 in
	-h|--help) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*)
		bench_option "$@" || {
			echo "$me: unknown argument '$1' (see --help)" >&2; exit 2; }
		shift 2 ;;
	esac
done
[ "$(id -u)" -eq 0 ] || { echo "$me: run as root (the light job becomes nobody)" >&2; exit 1; }

bench_setup feedd feedpack feedctl feedbench
chmod 755 "$work"
src=/usr/share/datasets/fashion-mnist
"$bin/feedpack" idx "$src/t10k-images-idx3-ubyte.gz" "$src/t10k-labels-idx1-ubyte.gz" \
	-o "$work/test" --name test >/dev/null
cat >"$work/feedd.yaml" <<EOF
socket_group: nogroup
workers: $workers
datasets:
  - name: train
    path: $data
    allow_users: ["*"]
  - name: test
    path: $work/test
    allow_users: ["*"]
EOF
sock=$work/feedd.sock
"$bin/feedd" --config "$work/feedd.yaml" --socket "$sock" 2>>"$work/feedd.log" &
feedd_pids=$!
for _ in $(seq 100); do
	"$bin/feedctl" --socket "$sock" status >/dev/null 2>&1 && break
	sleep 0.05
done

light() {
	setpriv --reuid 65534 --regid 65534 --clear-groups "$bin/feedbench" --socket "$sock" \
		--dataset test --batch 500 --epochs 1 \
		--pipeline "random_crop(size=28, pad=2) | hflip(p=0.5)" --json |
		/usr/bin/python3 -c 'import json, sys
d = json.loads(sys.stdin.readline())
print("  light, %-14s %d batches in %.3f s, %.0f samples/s"
      % (sys.argv[1], d["batches"], d["wall_s"], d["samples_per_s"]))' "$1"
}

echo "feedd --workers $workers; light job: nobody, 20 batches of 500"
for _ in $(seq "$runs"); do light alone; done
"$bin/feedbench" --socket "$sock" --dataset train --batch 64 --credits 16 --epochs 1 \
	--pipeline "resize(h=1024, w=1024)" >/dev/null 2>&1 &
heavy=$!
# until the heavy stream runs steadily: 32 batches published (feedctl of
# builds before status listed streams: 10 s)
for _ in $(seq 200); do
	"$bin/feedctl" --socket "$sock" status --json 2>/dev/null | /usr/bin/python3 -c '
import json, sys
sys.exit(0 if any(s["batches"] >= 32 for s in json.load(sys.stdin)["streams"]) else 1)' \
		2>/dev/null && break
	sleep 0.05
done
for _ in $(seq "$runs"); do light "next to heavy"; done
kill "$heavy"; wait "$heavy" 2>/dev/null || true
