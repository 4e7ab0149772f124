#!/usr/bin/env bash
# bench/remote.sh: a dataset over loopback HTTP against the same dataset
# on local disk (issue 24). Fashion-MNIST train (60000 samples), identity
# pipeline, batch 256, block-window order (window 8: each block decoded
# about once per epoch even when the memory cache is small), feedd
# --workers 2. nginx (Debian's, started here with a private config on a
# free loopback port) serves the packed directory as plain files. Rows:
#   local        the directory, cache_bytes 1G: warm epochs from memory
#   local-small  the directory, cache_bytes 4M (the decoded set is 47 MB):
#                every epoch reads (page cache) and decodes every block
#   http         http://127.0.0.1:PORT/fm, cache_bytes 1G
#   http-small   the URL, cache_bytes 4M: every epoch refetches every block
#   http-tier    the URL, cache_bytes 4M, cache_dir: warm epochs from the
#                disk tier
#   http-restart http-tier after a daemon restart (the tier filled before)
#   rtt10-1      through tests/remote/fault_proxy.py adding 10 ms to each
#                block request (a remote store's round trip), cache_bytes
#                4M, remote_inflight 1: one request at a time per worker
#   rtt10-16     the same with remote_inflight 16 (the default): a batch's
#                missing blocks fetched together
# For each: the first epoch after start (wall time of feedbench, opening
# the stream included) and --warm E epochs after it (samples/s), and the
# shard GETs and bytes nginx sent (its access log). Medians of --runs.
#
#   bench/remote.sh [--bin DIR] [--data DIR] [--runs N] [--warm E]
#
# Builds nothing: expects feedd, feedpack, feedctl and feedbench in --bin
# (default build/bin). Cleans up on exit (nginx, feedd, files).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=$here/../build/bin data= runs=3 warm=3 me=remote
while [ $# -gt 0 ]; do
	case $1 in
	--bin | --data | --runs) bench_opt=$1 ;;
	--warm) warm=$2; shift 2; continue ;;
	*) echo "usage: $0 [--bin DIR] [--data DIR] [--runs N] [--warm E]" >&2; exit 2 ;;
	esac
	case $bench_opt in --bin) bin=$2 ;; --data) data=$2 ;; --runs) runs=$2 ;; esac
	shift 2
done
. "$here/lib.sh"
bench_setup feedd feedpack feedctl feedbench
[ -x /usr/sbin/nginx ] || { echo "$me: /usr/sbin/nginx missing (scripts/setup.sh)" >&2; exit 1; }

chmod 755 "$work"  # nginx workers run as nobody
www=$work/www ng=$work/ng
mkdir -p "$www" "$ng/tmp"
cp -r "$data" "$www/fm"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat >"$ng/nginx.conf" <<EOF
worker_processes 1;
pid $ng/nginx.pid;
error_log $ng/error.log;
events { worker_connections 256; }
http {
  log_format feed '\$request_method \$uri \$http_range \$body_bytes_sent';
  access_log $ng/access.log feed;
  client_body_temp_path $ng/tmp; proxy_temp_path $ng/tmp;
  fastcgi_temp_path $ng/tmp; uwsgi_temp_path $ng/tmp; scgi_temp_path $ng/tmp;
  server { listen 127.0.0.1:$port; root $www; }
}
EOF
/usr/sbin/nginx -p "$ng" -c "$ng/nginx.conf" -g 'daemon off;' &
nginx_pid=$!
feedd_pids="$feedd_pids $nginx_pid"  # bench_cleanup stops it too
for _ in $(seq 100); do
	python3 -c "import socket; socket.create_connection(('127.0.0.1',$port),1)" 2>/dev/null && break
	sleep 0.05
done
url=http://127.0.0.1:$port/fm
n=$("$bin/feedpack" inspect "$data" | sed -n 's/.*samples: *\([0-9]*\).*/\1/p' | head -1)

# start SOCK CONFIG: feedd on SOCK with CONFIG, until it answers.
start() {
	"$bin/feedd" --socket "$1" --config "$2" --workers 2 2>>"$work/feedd.log" &
	echo "--- $2" >>"$work/feedd.log"
	feedd_pid=$!
	feedd_pids="$feedd_pids $feedd_pid"
	wait_feedd "$1" 200
	# a remote dataset opens in the background (pending until then)
	for _ in $(seq 400); do
		"$bin/feedctl" --socket "$1" datasets fm >/dev/null 2>&1 && return 0
		sleep 0.05
	done
	echo "$me: dataset fm did not open" >&2
	cat "$work/feedd.log" >&2
	exit 1
}
stop() { kill -TERM "$feedd_pid"; wait "$feedd_pid" || true; }

# epochs SOCK E: seconds feedbench takes for E epochs (verified).
epochs() {
	local t0 t1
	t0=$(date +%s.%N)
	FEEDD_SOCKET=$1 "$bin/feedbench" --dataset fm --batch 256 --epochs "$2" --verify \
		--order block --window 8 \
		>"$work/bench.out" 2>&1 || { cat "$work/bench.out" "$work/feedd.log" >&2; exit 1; }
	grep -q "verified yes" "$work/bench.out" || { cat "$work/bench.out" >&2; exit 1; }
	t1=$(date +%s.%N)
	echo "$t1 - $t0" | bc -l
}

# gets: "GETS BYTES" of shard block reads in nginx's log so far.
gets() { awk '$1 == "GET" && $2 ~ /\.fsh$/ { n++; b += $4 } END { printf "%d %d\n", n, b }' "$ng/access.log"; }

median() { sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }

# row NAME PATH CACHE_BYTES [CACHE_DIR [KEEP]]: one configuration, --runs times.
row() {
	local name=$1 path=$2 cb=$3 dir=${4:-} keep=${5:-} r first=() hot=() g0 g1 g2
	for r in $(seq "$runs"); do
		{
			echo "cache_bytes: $cb"
			[ -n "${inflight:-}" ] && echo "remote_inflight: $inflight"
			[ -n "$dir" ] && echo "cache_dir: $dir" && echo "cache_dir_bytes: 1G"
			echo "datasets: [{name: fm, path: \"$path\", allow_users: [\"*\"]}]"
		} >"$work/feedd.yaml"
		[ -n "$dir" ] && [ -z "$keep" ] && rm -rf "$dir"
		if [ -n "$keep" ]; then  # fill the tier first, untimed, then restart
			start "$work/s.sock" "$work/feedd.yaml"; epochs "$work/s.sock" 1 >/dev/null; stop
		fi
		g0=$(gets)
		start "$work/s.sock" "$work/feedd.yaml"
		first+=("$(epochs "$work/s.sock" 1)")
		g1=$(gets)
		hot+=("$(epochs "$work/s.sock" "$warm")")
		g2=$(gets)
		stop
	done
	local f h
	f=$(printf '%s\n' "${first[@]}" | median)
	h=$(printf '%s\n' "${hot[@]}" | median)
	read -r a0 b0 <<<"$g0"; read -r a1 b1 <<<"$g1"; read -r a2 b2 <<<"$g2"
	printf '%-13s first epoch %6.3f s %9.0f samples/s %5d GETs %6.1f MB | warm %9.0f samples/s %5d GETs/epoch %6.1f MB/epoch\n' \
		"$name" "$f" "$(echo "$n / $f" | bc -l)" $((a1 - a0)) "$(echo "($b1 - $b0) / 1000000" | bc -l)" \
		"$(echo "$n * $warm / $h" | bc -l)" $(((a2 - a1) / warm)) "$(echo "($b2 - $b1) / 1000000 / $warm" | bc -l)"
}

echo "$me: $n samples, $(du -sb "$data" | cut -f1) bytes packed, nginx on 127.0.0.1:$port, runs $runs, warm epochs $warm"
row local "$data" 1G
row local-small "$data" 4M
row http "$url" 1G
row http-small "$url" 4M
row http-tier "$url" 4M "$work/tier"
row http-restart "$url" 4M "$work/tier" keep
python3 "$here/../tests/remote/fault_proxy.py" "http://127.0.0.1:$port" "$work/proxy.port" &
feedd_pids="$feedd_pids $!"
for _ in $(seq 100); do [ -s "$work/proxy.port" ] && break; sleep 0.05; done
purl=http://127.0.0.1:$(cat "$work/proxy.port")/delay/fm
inflight=1 row rtt10-1 "$purl" 4M
inflight=16 row rtt10-16 "$purl" 4M
