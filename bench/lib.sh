# bench/lib.sh: what the benchmark scripts share; sourced, never run.
# The caller sets bin (where the binaries are), data (a packed copy, or
# empty to pack one) and me (its name, for messages), then calls
# bench_setup TOOL...; afterwards $work is a private directory removed on
# exit, $data names a packed Fashion-MNIST, and start_feedd can be called.

# bench_option ARG [VALUE...]: the options the DataLoader comparisons
# share (--bin DIR, --data DIR, --runs N, --workers N): sets the variable
# and returns 0 (the caller shifts 2), exits naming ARG when its value is
# missing, returns 1 for any other ARG.
bench_option() {
	case $1 in
	--bin | --data | --runs | --workers)
		[ $# -ge 2 ] || { echo "$me: $1 needs a value" >&2; exit 2; } ;;
	*) return 1 ;;
	esac
	case $1 in
	--bin) bin=$2 ;;
	--data) data=$2 ;;
	--runs) runs=$2 ;;
	--workers) workers=$2 ;;
	esac
}

# bench_setup TOOL...: checks that every TOOL is built in $bin, makes $work
# (cleaned up on exit, with every feedd started here) and packs the
# Fashion-MNIST training split into it unless $data is set.
bench_setup() {
	local b src
	for b in "$@"; do
		if [ ! -x "$bin/$b" ]; then
			echo "$me: $bin/$b is missing; build first (cmake --build build)" >&2
			exit 1
		fi
	done
	work=$(mktemp -d "/tmp/feedd-$me.XXXXXX")
	feedd_pids=
	trap bench_cleanup EXIT
	if [ -z "$data" ]; then
		src=/usr/share/datasets/fashion-mnist
		data=$work/fashion-mnist
		"$bin/feedpack" idx "$src/train-images-idx3-ubyte.gz" \
			"$src/train-labels-idx1-ubyte.gz" -o "$data" --name fashion-mnist >/dev/null
	fi
}

bench_cleanup() {
	local pid
	for pid in $feedd_pids; do
		kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
	done
	rm -rf "$work"
}

# start_feedd SOCK WORKERS [CMD-PREFIX...]: feedd serving $data as
# fashion-mnist on a private socket, waited for until it answers; its pid
# is left in $feedd_pid.
start_feedd() {
	local sock=$1 nw=$2
	shift 2
	"$@" "$bin/feedd" --socket "$sock" --dataset "fashion-mnist=$data" --workers "$nw" \
		2>>"$work/feedd.log" &
	feedd_pid=$!
	feedd_pids="$feedd_pids $feedd_pid"
	wait_feedd "$sock" 100
}

# wait_feedd SOCK TRIES: polls `feedctl status` on SOCK every 50 ms, TRIES
# times at most, until the feedd started as $feedd_pid answers; exits the
# script with feedd's log if it died or never answered.
wait_feedd() {
	local sock=$1 tries=$2
	for _ in $(seq "$tries"); do
		"$bin/feedctl" --socket "$sock" status >/dev/null 2>&1 && return 0
		kill -0 "$feedd_pid" 2>/dev/null || { cat "$work/feedd.log" >&2; exit 1; }
		sleep 0.05
	done
	echo "$me: feedd on $sock did not answer" >&2
	exit 1
}

# tag ROW: appends each JSON line of stdin to $work/results.jsonl with
# "row": ROW first.
tag() { sed "s/^{/{\"row\": \"$1\", /" >>"$work/results.jsonl"; }
