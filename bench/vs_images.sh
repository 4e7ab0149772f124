#!/usr/bin/env bash
# bench/vs_images.sh: feedd's JPEG pipelines against the loaders a user
# would pick instead (issue 12), on a real JPEG set (bench/make_jpeg_set.py),
# batch 256, u8 output, W workers each (2), medians of --runs rounds (3):
#
#   train  feedd 'decode | random_resized_crop(size=224) | hflip(p=0.5)'
#          (feedbench, shuffled) against
#          - PyTorch DataLoader(num_workers=W) over torchvision's ImageFolder
#            with RandomResizedCrop(224) + RandomHorizontalFlip on PIL images,
#          - NVIDIA DALI on the CPU only (device_id=None, num_threads=W),
#            plain: fn.decoders.image + fn.random_resized_crop + fn.flip,
#          - DALI fused: fn.decoders.image_random_crop + fn.resize + fn.flip;
#   eval   feedd 'decode | resize(short=256) | center_crop(size=224)'
#          (feedbench, sequential) against DataLoader's Resize(256) +
#          CenterCrop(224) and DALI's fn.resize(resize_shorter=256) + fn.crop
#          (both unshuffled).
#
# Per core (two CPUs or more), train pipeline: feedd --workers 1 pinned to
# CPU 1 (feedbench on CPU 0) against bench_image --mode box, the
# single-threaded plain C loop of the same box decode + resample + flip
# over the same files held in memory (no dataset read), pinned to CPU 1.
# (bench_pipeline, the loop through feedd's own block cache, does not
# drive image stages yet.)
#
#   bench/vs_images.sh [--bin DIR] [--set DIR] [--count N] [--runs N]
#                      [--workers N] [--epochs E] [--feed-epochs E]
#                      [--venv DIR] [--no-dali] [--only peers|feedd|pinned]
#
# --set names a folder of class subfolders of JPEGs; without it one of
# --count images (5000) is made with bench/make_jpeg_set.py (seed 1) in a
# temporary directory. The set is packed with `feedpack imagefolder` and
# served by feedd --workers W on a private socket; one untimed feedbench
# epoch warms feedd's cache first. DALI runs in a venv (--venv, default
# build/venv-dali, made with `/usr/bin/python3 -m venv
# --system-site-packages` and `pip install nvidia-dali-cuda130` when
# missing); --no-dali leaves it out. --only peers runs the peers alone
# (for a feedd without the image ops), --only pinned the per-core rows.
#
# Every reader touches every byte of every batch and is timed from the end
# of its first batch (bench/consume_batches.py; feedbench likewise).
# CPU seconds per epoch: for the Python loaders, the CPU time of the
# process and its DataLoader workers over the whole run, divided by the
# epochs (bench/images_peers.py); for feedd, feedd's own CPU time over the
# feedbench run (/proc/PID/stat) plus feedbench's, divided by the epochs.
# The trainer process, feedd's threads and its workers share the machine's
# CPUs, as the peers' processes and threads do.
#
# Measured here 2026-11-23 (2 vCPUs, load ~1 from other jobs; set: 5,000
# images, mean 42 KB; bench/vs_images.sh --set DIR --runs 3), medians,
# img/s and CPU s/epoch: train feedd 3366 / 3.0, DataLoader 629 / 14.9,
# DALI plain 676 / 14.9, DALI fused 780 / 13.3; eval feedd 2816 / 3.6,
# DataLoader 566 / 18.3, DALI 617 / 16.6; per core feedd 1565 against the
# C loop's 1619 (97%). Rates move with other load; CPU s/epoch barely do.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/build/bin
set_dir=
count=5000
runs=3
workers=2
epochs=1
feed_epochs=3
venv=$root/build/venv-dali
dali=1
only=
py=/usr/bin/python3
me=vs_images.sh
train="decode | random_resized_crop(size=224) | hflip(p=0.5)"
eval_pipe="decode | resize(short=256) | center_crop(size=224)"

while [ $# -gt 0 ]; do
	case $1 in
	-h|--help) sed -n '2,53p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	--no-dali) dali=0; shift; continue ;;
	esac
	[ $# -ge 2 ] || { echo "$me: $1 needs a value (see --help)" >&2; exit 2; }
	case $1 in
	--bin) bin=$2 ;;
	--set) set_dir=$2 ;;
	--count) count=$2 ;;
	--runs) runs=$2 ;;
	--workers) workers=$2 ;;
	--epochs) epochs=$2 ;;
	--feed-epochs) feed_epochs=$2 ;;
	--venv) venv=$2 ;;
	--only) only=$2 ;;
	*) echo "$me: unknown argument '$1' (see --help)" >&2; exit 2 ;;
	esac
	shift 2
done

for b in feedpack feedd feedctl feedbench bench_image; do
	[ -x "$bin/$b" ] || { echo "$me: $bin/$b is missing; build first" >&2; exit 1; }
done
work=$(mktemp -d "/tmp/feedd-$me.XXXXXX")
feedd_pid=
cleanup() {
	[ -n "$feedd_pid" ] && { kill -TERM "$feedd_pid" 2>/dev/null; wait "$feedd_pid" 2>/dev/null; }
	rm -rf "$work"
}
trap cleanup EXIT
out=$work/results.jsonl
tag() { sed "s/^{/{\"row\": \"$1\", /" >>"$out"; }

if [ -z "$set_dir" ]; then
	set_dir=$work/jpegs
	"$py" "$root/bench/make_jpeg_set.py" --out "$set_dir" --count "$count" >&2
fi
data=$work/jpegs.feed
"$bin/feedpack" imagefolder "$set_dir" -o "$data" --name jpegs >&2

dpy=
if [ "$dali" = 1 ]; then
	if [ ! -x "$venv/bin/python" ]; then
		echo "$me: making $venv for DALI (pip install nvidia-dali-cuda130)" >&2
		"$py" -m venv --system-site-packages "$venv"
		"$venv/bin/pip" install -q nvidia-dali-cuda130 >&2
	fi
	dpy=$venv/bin/python
	"$dpy" -c 'import nvidia.dali' || { echo "$me: $dpy cannot import nvidia.dali" >&2; exit 1; }
fi

tck=$(getconf CLK_TCK)
# CPU seconds (user + system) of process $1 so far.
proc_cpu() { awk -v t="$tck" '{ sub(/^.*\) /, ""); print ($12 + $13) / t }' "/proc/$1/stat"; }

# start_feedd SOCK WORKERS [CMD-PREFIX...]: feedd serving the set as jpegs,
# waited for, then warmed by one untimed epoch (its block cache, as in a
# long-running daemon); pid in $feedd_pid.
start_feedd() {
	local s=$1 nw=$2
	shift 2
	"$@" "$bin/feedd" --socket "$s" --dataset "jpegs=$data" --workers "$nw" \
		2>>"$work/feedd.log" &
	feedd_pid=$!
	for _ in $(seq 100); do
		"$bin/feedctl" --socket "$s" status >/dev/null 2>&1 && break
		kill -0 "$feedd_pid" 2>/dev/null || { cat "$work/feedd.log" >&2; exit 1; }
		sleep 0.05
	done
	"$bin/feedbench" --socket "$s" --dataset jpegs --pipeline "$train" --batch 256 \
		--epochs 1 >/dev/null
}
stop_feedd() { kill -TERM "$feedd_pid"; wait "$feedd_pid" || true; feedd_pid=; }

sock=$work/feedd.sock
[ "$only" = peers ] || [ "$only" = pinned ] || start_feedd "$sock" "$workers"

# run_feedd ROW PIPELINE ORDER: feedbench, with feedd's CPU time over the run.
run_feedd() {
	local c0 c1 line
	c0=$(proc_cpu "$feedd_pid")
	line=$("$bin/feedbench" --socket "$sock" --dataset jpegs --pipeline "$2" --batch 256 \
		--epochs "$feed_epochs" --order "$3" --json)
	c1=$(proc_cpu "$feedd_pid")
	echo "$line" | sed "s/}\s*$/, \"feedd_cpu_s\": $(awk -v a="$c0" -v b="$c1" 'BEGIN { print b - a }'), \"epochs_run\": $feed_epochs}/" |
		tag "$1"
}
run_peer() {
	local row=$1 python=$2
	shift 2
	"$python" "$root/bench/images_peers.py" "$set_dir" --workers "$workers" --batch 256 \
		--epochs "$epochs" --json "$@" | tag "$row"
}
round() {
	[ "$only" = pinned ] && return
	if [ "$only" != peers ]; then
		run_feedd feedd_train "$train" full
		run_feedd feedd_eval "$eval_pipe" sequential
	fi
	[ "$only" = feedd ] && return
	run_peer dl_train "$py" --loader dataloader
	run_peer dl_eval "$py" --loader dataloader --mode eval
	if [ -n "$dpy" ]; then
		run_peer dali_plain "$dpy" --loader dali-plain
		run_peer dali_fused "$dpy" --loader dali-fused
		run_peer dali_eval "$dpy" --loader dali-plain --mode eval
	fi
}

echo "$(nproc) CPUs; $runs rounds; $workers workers each; set $set_dir" >&2
for i in $(seq "$runs"); do
	round
	echo "round $i of $runs done" >&2
done

# Per core, pinned: one feedd worker alone on CPU 1, the trainer on CPU 0,
# against the single-threaded loop alone on CPU 1.
if [ "$(nproc)" -ge 2 ] && { [ -z "$only" ] || [ "$only" = pinned ]; }; then
	[ -n "$feedd_pid" ] && stop_feedd
	start_feedd "$work/pinned.sock" 1 taskset -c 1
	sock=$work/pinned.sock
	mkdir "$work/flat"   # bench_image reads one flat folder
	n=0
	while IFS= read -r -d '' f; do
		ln -s "$f" "$work/flat/$n.jpg"
		n=$((n + 1))
	done < <(find "$(cd "$set_dir" && pwd)" -mindepth 2 \( -iname '*.jpg' -o -iname '*.jpeg' \) -print0)
	for i in $(seq "$runs"); do
		taskset -c 0 "$bin/feedbench" --socket "$sock" --dataset jpegs --pipeline "$train" \
			--batch 256 --epochs "$feed_epochs" --credits 8 --json | tag pinned_train
		taskset -c 1 "$bin/bench_image" "$work/flat" --size 224 --epochs 2 --mode box |
			sed -n 's/^box .* \([0-9.]*\) img\/s CPU (\([0-9.]*\) wall).*/{"samples_per_s": \2, "cpu_rate": \1}/p' |
			tag single_train
		echo "pinned round $i of $runs done" >&2
	done
fi

"$py" - "$out" "$workers" "$set_dir" "$train" "$eval_pipe" <<'EOF'
import json, statistics, sys

path, workers, set_dir, train, eval_pipe = sys.argv[1:6]
rows = {}
for line in open(path):
    d = json.loads(line)
    if d["row"].startswith("feedd") and "feedd_cpu_s" in d:
        d["cpu_s_per_epoch"] = (d["feedd_cpu_s"] + d["cpu_s"]) / d["epochs_run"]
    rows.setdefault(d["row"], []).append(d)

def med(name, key="samples_per_s"):
    return statistics.median(r[key] for r in rows[name])

def line(label, name, ref):
    if name not in rows or "cpu_s_per_epoch" not in rows[name][0]:
        return
    v = med(name)
    runs = ", ".join("%.0f" % r["samples_per_s"] for r in rows[name])
    ratio = "" if ref is None or ref == name or ref not in rows else \
        "  feedd is %.2fx" % (med(ref) / v)
    print("  %-34s %7.0f img/s  %6.1f CPU s/epoch  (runs: %s)%s"
          % (label, v, med(name, "cpu_s_per_epoch"), runs, ratio))

n = max(r.get("images", 0) for rs in rows.values() for r in rs) or "?"
print("JPEG set %s (%s images), batch 256, u8, %s workers each, medians of %d rounds"
      % (set_dir, n, workers, max(len(r) for r in rows.values())))
print("train: '%s'" % train)
line("feedd (feedbench)", "feedd_train", None)
line("DataLoader + torchvision (PIL)", "dl_train", "feedd_train")
line("DALI CPU plain", "dali_plain", "feedd_train")
line("DALI CPU fused (decode-crop)", "dali_fused", "feedd_train")
print("eval: '%s'" % eval_pipe)
line("feedd (feedbench)", "feedd_eval", None)
line("DataLoader + torchvision (PIL)", "dl_eval", "feedd_eval")
line("DALI CPU", "dali_eval", "feedd_eval")
if "pinned_train" in rows and "single_train" in rows:
    p, st = med("pinned_train"), med("single_train")
    print("per core, train: feedd --workers 1 on CPU 1 %.0f img/s (runs: %s); single-thread "
          "C loop (bench_image --mode box) on CPU 1 %.0f img/s: feedd at %.0f%%"
          % (p, ", ".join("%.0f" % r["samples_per_s"] for r in rows["pinned_train"]), st,
             100.0 * p / st))
EOF
