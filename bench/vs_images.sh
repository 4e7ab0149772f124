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
#   bench/vs_images.sh [--bin DIR] [--set DIR] [--count N] [--runs N]
#                      [--workers N] [--epochs E] [--feed-epochs E]
#                      [--venv DIR] [--no-dali] [--only peers|feedd]
#
# --set names a folder of class subfolders of JPEGs; without it one of
# --count images (5000) is made with bench/make_jpeg_set.py (seed 1) in a
# temporary directory. The set is packed with `feedpack imagefolder` and
# served by feedd --workers W on a private socket; one untimed feedbench
# epoch warms feedd's cache first. DALI runs in a venv (--venv, default
# build/venv-dali, made with `/usr/bin/python3 -m venv
# --system-site-packages` and `pip install nvidia-dali-cuda130` when
# missing); --no-dali leaves it out. --only peers runs the peers alone
# (for a feedd without the image ops).
#
# Every reader touches every byte of every batch and is timed from the end
# of its first batch (bench/consume_batches.py; feedbench likewise).
# CPU seconds per epoch: for the Python loaders, the CPU time of the
# process and its DataLoader workers over the whole run, divided by the
# epochs (bench/images_peers.py); for feedd, feedd's own CPU time over the
# feedbench run (/proc/PID/stat) plus feedbench's, divided by the epochs.
# The trainer process, feedd's threads and its workers share the machine's
# CPUs, as the peers' processes and threads do.
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
	-h|--help) sed -n '2,42p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
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

for b in feedpack feedd feedctl feedbench; do
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

sock=$work/feedd.sock
if [ "$only" != peers ]; then
	"$bin/feedd" --socket "$sock" --dataset "jpegs=$data" --workers "$workers" \
		2>>"$work/feedd.log" &
	feedd_pid=$!
	for _ in $(seq 100); do
		"$bin/feedctl" --socket "$sock" status >/dev/null 2>&1 && break
		kill -0 "$feedd_pid" 2>/dev/null || { cat "$work/feedd.log" >&2; exit 1; }
		sleep 0.05
	done
	# warm-up, not counted: feedd's block cache, as in a long-running daemon
	"$bin/feedbench" --socket "$sock" --dataset jpegs --pipeline "$train" --batch 256 \
		--epochs 1 >/dev/null
fi

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

"$py" - "$out" "$workers" "$set_dir" "$train" "$eval_pipe" <<'EOF'
import json, statistics, sys

path, workers, set_dir, train, eval_pipe = sys.argv[1:6]
rows = {}
for line in open(path):
    d = json.loads(line)
    if d["row"].startswith("feedd"):
        d["cpu_s_per_epoch"] = (d["feedd_cpu_s"] + d["cpu_s"]) / d["epochs_run"]
    rows.setdefault(d["row"], []).append(d)

def med(name, key="samples_per_s"):
    return statistics.median(r[key] for r in rows[name])

def line(label, name, ref):
    if name not in rows:
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
EOF
