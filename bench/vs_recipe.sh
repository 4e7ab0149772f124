#!/bin/bash
# vs_recipe.sh: torchvision's ResNet-50 training recipe per sample, feedd
# against a DataLoader, on the JPEG set (bench/make_jpeg_set.py):
#
#   feedd       decode | random_resized_crop(size=176) | hflip(p=0.5) |
#               trivial_augment_wide | random_erasing(p=0.1), feedbench
#               through feedd --workers W (batch 256, 3 epochs after one
#               untimed epoch), and the same without the last two ops;
#   dataloader  bench/images_peers.py --mode recipe: DataLoader(W workers),
#               RandomResizedCrop(176) + RandomHorizontalFlip +
#               TrivialAugmentWide on PIL + PILToTensor + RandomErasing(0.1).
#
# Prints one line per run: img/s and CPU seconds per epoch (feedd: its own
# CPU time over the run, /proc/PID/stat).
#
#   bench/vs_recipe.sh [--bin DIR] [--count N] [--runs R] [--workers W]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/build/bin
count=1000
runs=3
workers=2
while [ $# -gt 0 ]; do
	case $1 in
	--bin) bin=$2 ;;
	--count) count=$2 ;;
	--runs) runs=$2 ;;
	--workers) workers=$2 ;;
	*) echo "vs_recipe.sh: unknown argument '$1'" >&2; exit 2 ;;
	esac
	shift 2
done
work=$(mktemp -d /tmp/feedd-vs_recipe.XXXXXX)
pid=
cleanup() {
	[ -n "$pid" ] && { kill -TERM "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true; }
	rm -rf "$work"
}
trap cleanup EXIT
/usr/bin/python3 "$root/bench/make_jpeg_set.py" --out "$work/jpegs" --count "$count" >&2
"$bin/feedpack" imagefolder "$work/jpegs" -o "$work/jpegs.feed" --name jpegs >&2
s=$work/feedd.sock
recipe="decode | random_resized_crop(size=176) | hflip(p=0.5) | trivial_augment_wide | random_erasing(p=0.1)"
crop="decode | random_resized_crop(size=176) | hflip(p=0.5)"
"$bin/feedd" --socket "$s" --dataset "jpegs=$work/jpegs.feed" --workers "$workers" 2>"$work/feedd.log" &
pid=$!
for _ in $(seq 100); do "$bin/feedctl" --socket "$s" status >/dev/null 2>&1 && break; sleep 0.05; done
tck=$(getconf CLK_TCK)
cpu() { awk -v t="$tck" '{ sub(/^.*\) /, ""); print ($12 + $13) / t }' "/proc/$pid/stat"; }
"$bin/feedbench" --socket "$s" --dataset jpegs --pipeline "$recipe" --batch 256 --epochs 1 >/dev/null
feedd_run() {
	local c0 c1 line
	c0=$(cpu)
	line=$("$bin/feedbench" --socket "$s" --dataset jpegs --pipeline "$2" --batch 256 --epochs 3 --json)
	c1=$(cpu)
	echo "$line" | /usr/bin/python3 -c 'import json, sys
j = json.load(sys.stdin)
print("%-26s %6.0f img/s %5.2f CPU s/epoch" % (sys.argv[1], j["samples_per_s"], (float(sys.argv[3]) - float(sys.argv[2])) / 3))' "$1" "$c0" "$c1"
}
for _ in $(seq "$runs"); do
	feedd_run "feedd recipe" "$recipe"
	feedd_run "feedd crop+flip only" "$crop"
	/usr/bin/python3 "$root/bench/images_peers.py" "$work/jpegs" --loader dataloader --mode recipe \
		--workers "$workers" --batch 256 --epochs 3 --json | /usr/bin/python3 -c 'import json, sys
j = json.load(sys.stdin)
print("%-26s %6.0f img/s %5.2f CPU s/epoch" % ("dataloader recipe", j["samples_per_s"], j["cpu_s_per_epoch"]))'
done
