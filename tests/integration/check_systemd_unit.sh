#!/bin/sh
# check_systemd_unit.sh: the shipped units as systemd would take them.
#
#   check_systemd_unit.sh analyze   systemd-analyze verify of feedd.service
#                                   and feedd.socket, and the security
#                                   exposure of feedd.service, with and
#                                   without the network drop-in (<= 2.0)
#   check_systemd_unit.sh user      every configs/*.yaml starts under the
#                                   shipped units as the unit's user with
#                                   the unit's capabilities (none), its
#                                   socket made by systemd-socket-activate
#                                   with feedd.socket's group and mode, and
#                                   a member of that group connects; without
#                                   socket activation, what the docs say
#                                   works does, and --check-config --user
#                                   foretells what does not
#   check_systemd_unit.sh sandbox   every configs/*.yaml (and feedd.yaml
#                                   with its cache_dir set) started in the
#                                   unit's file-system view: a private
#                                   mount namespace (unshare -m) where every
#                                   mount is read-only (ProtectSystem=
#                                   strict) but /dev, /proc, /sys and the
#                                   unit's writable paths (ReadWritePaths=,
#                                   CacheDirectory=, PrivateTmp=), each a
#                                   fresh tmpfs made as systemd and tmpfiles
#                                   make it; socket activation, the unit's
#                                   user, no capabilities, LimitNOFILE=. The
#                                   same with the unit less CacheDirectory=
#                                   (the unit before issue 28) must refuse
#                                   the cache_dir config. In each case
#                                   --check-config --unit must foretell
#                                   the outcome. Not covered without systemd
#                                   as PID 1: the seccomp filter, device
#                                   policy, IPAddressDeny=, ProtectKernel*=
#                                   and ProtectHome= (no home is used).
#
# Needs FEED_SRC and FEED_BIN (tests/CMakeLists.txt sets them). Exits 77
# (skipped) with a line saying why when systemd's tools are absent, or for
# "user" and "sandbox" when not root (they create users with
# systemd-sysusers/useradd; sandbox mounts in its own namespace).
set -eu

SRC=${FEED_SRC:?}
BIN=${FEED_BIN:?}
UNIT=$SRC/deploy/feedd.service
SOCKUNIT=$SRC/deploy/feedd.socket
MAX_EXPOSURE=2.0
DROPIN=$SRC/deploy/feedd-network.conf
CLIENT=feedd-test-client

fail() { echo "FAIL: $*" >&2; exit 1; }
skip() { echo "skipped: $*"; exit 77; }
need() { command -v "$1" >/dev/null 2>&1 || skip "$1 absent (Debian package ${2:-systemd})"; }
key() { sed -n "s/^$1=//p" "$2" | tail -n 1; }

# The sandbox's PrivateTmp= hides /tmp and /var/tmp: a tree checked out or
# built there (a CI clone, say) is staged under /var/lib first (not /run,
# whose parent may be made a fresh tmpfs for /run/feedd), with what the
# sandbox reads (this script, deploy/, configs/, feedd, feedctl and
# libfeedclient), and the test runs from that copy.
under_tmp() {
	case "$(cd "$1" && pwd -P)/" in /tmp/*|/var/tmp/*) return 0 ;; esac
	return 1
}
if [ "${1:-}" = sandbox ] && [ -z "${FEED_UNIT_STAGED:-}" ] &&
	{ under_tmp "$SRC" || under_tmp "$BIN"; }; then
	stage=$(mktemp -d /var/lib/feedd_unit_stage.XXXXXX)
	mkdir -p "$stage/src/tests/integration" "$stage/bin" "$stage/lib"
	cp -r "$SRC/deploy" "$SRC/configs" "$stage/src/"
	cp "$0" "$stage/src/tests/integration/"
	cp "$BIN/feedd" "$BIN/feedctl" "$stage/bin/"
	cp -P "$BIN"/../lib/libfeedclient.so* "$stage/lib/"
	# a sanitizer's suppressions file under /tmp would vanish too
	supp=$(printf '%s' "${TSAN_OPTIONS:-}" | sed -n 's/.*suppressions=\([^:]*\).*/\1/p')
	if [ -n "$supp" ] && [ -f "$supp" ]; then
		cp "$supp" "$stage/tsan.supp"
		TSAN_OPTIONS=$(printf '%s' "$TSAN_OPTIONS" | sed "s|suppressions=[^:]*|suppressions=$stage/tsan.supp|")
		export TSAN_OPTIONS
	fi
	chmod -R a+rX "$stage"
	rc=0
	FEED_UNIT_STAGED=1 FEED_SRC="$stage/src" FEED_BIN="$stage/bin" \
		LD_LIBRARY_PATH="$stage/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
		sh "$stage/src/tests/integration/check_systemd_unit.sh" sandbox || rc=$?
	rm -rf "$stage"
	exit "$rc"
fi

PIDS=""
cleanup() {
	for p in $PIDS; do kill -KILL "$p" 2>/dev/null || true; done
	rm -rf "$TMP"
}
if [ "${1:-}" != sandbox-run ]; then  # that one runs inside sandbox's, read-only
	# Not under /tmp: the sandbox's PrivateTmp= hides it there.
	TMP=$(mktemp -d "$(cd "${FEED_BIN:?}/.." && pwd)/feedd_unit.XXXXXX")
	chmod 0755 "$TMP"
	trap cleanup EXIT
fi

analyze() {
	need systemd-analyze
	# verify runs the unit's ExecStart: point it at the built feedd. The
	# man pages are checked where they are installed, not here.
	sed "s|/usr/local/bin/feedd|$BIN/feedd|; s|/usr/local/bin/feedctl|$BIN/feedctl|" "$UNIT" \
		>"$TMP/feedd.service"
	cp "$SOCKUNIT" "$TMP/feedd.socket"
	systemd-analyze verify --man=no "$TMP/feedd.service" "$TMP/feedd.socket" ||
		fail "systemd-analyze verify refused the units"
	# the unit with the network drop-in's [Service] lines in its own
	mkdir -p "$TMP/net"
	awk -v add="$(grep -E '^[A-Za-z]+=' "$DROPIN")" '/^\[Install\]/ { print add } { print }' \
		"$UNIT" >"$TMP/net/feedd.service"
	grep -q '^IPAddressDeny=$' "$TMP/net/feedd.service" || fail "the drop-in clears no IPAddressDeny="
	for u in "$UNIT" "$TMP/net/feedd.service"; do
		out=$(systemd-analyze security --offline=yes "$u" 2>&1)
		score=$(echo "$out" | sed -n 's/.*Overall exposure level for feedd.service: \([0-9.]*\).*/\1/p')
		[ -n "$score" ] || fail "no exposure level in: $out"
		awk -v s="$score" -v m="$MAX_EXPOSURE" 'BEGIN { exit !(s <= m) }' ||
			fail "$u: exposure $score > $MAX_EXPOSURE:
$out"
		echo "ok: $u: exposure $score <= $MAX_EXPOSURE"
	done
	for k in Type=notify WatchdogSec= 'ExecReload=+/usr/local/bin/feedctl ' \
		 SystemCallFilter=@system-service DevicePolicy=closed OOMScoreAdjust= UMask= \
		 CacheDirectory=feedd LimitNOFILE=; do
		grep -q "^$k" "$UNIT" || fail "feedd.service lacks $k"
	done
	# the example config's cache_dir is the unit's CacheDirectory=
	[ "$(sed -n 's/^# *cache_dir: *//p' "$SRC/configs/feedd.yaml")" = \
	  "/var/cache/$(key CacheDirectory "$UNIT")" ] || fail "configs/feedd.yaml's cache_dir is not CacheDirectory="
	grep -q "feedd-network.conf" "$UNIT" || fail "feedd.service does not name its network drop-in"
	[ "$(key ListenSequentialPacket "$SOCKUNIT")" = /run/feedd/feedd.sock ] ||
		fail "feedd.socket: ListenSequentialPacket= is not the default socket"
	echo "ok: units verify; exposure $score <= $MAX_EXPOSURE"
}

# The unit's user and groups, made as a package would (sysusers), and a
# trainer in the socket's group.
make_users() {
	need systemd-sysusers
	need setpriv util-linux
	systemd-sysusers "$SRC/deploy/feedd.sysusers" || fail "systemd-sysusers failed"
	getent passwd "$USER_" >/dev/null || fail "sysusers made no user $USER_"
	if ! getent passwd "$CLIENT" >/dev/null; then
		useradd --system --no-create-home --gid nogroup --shell /usr/sbin/nologin "$CLIENT" ||
			fail "useradd $CLIENT"
	fi
	usermod -aG "$SGROUP" "$CLIENT" || fail "usermod -aG $SGROUP $CLIENT"
	# /run/feedd as tmpfiles makes it, here under $TMP
	sed -n "s|^d /run/feedd |d $TMP/run |p" "$SRC/deploy/feedd.tmpfiles" >"$TMP/tmpfiles.conf"
	[ -s "$TMP/tmpfiles.conf" ] || fail "feedd.tmpfiles does not make /run/feedd"
	systemd-tmpfiles --create "$TMP/tmpfiles.conf" || fail "systemd-tmpfiles"
}

# as_unit CMD...: CMD as the unit's user, groups and (no) capabilities.
as_unit() {
	setpriv --reuid "$USER_" --regid "$GROUP_" $UNIT_GROUPS \
		--bounding-set -all --inh-caps -all --ambient-caps -all --no-new-privs "$@"
}

# as_client CMD...: CMD as a trainer in the socket's group.
as_client() {
	setpriv --reuid "$CLIENT" --regid nogroup --init-groups "$@"
}

# wait_for CMD...: polls CMD until it succeeds (20 s at most).
wait_for() {
	i=0
	until "$@"; do
		i=$((i + 1))
		[ $i -lt 2000 ] || return 1
		sleep 0.01
	done
}

# Stops the feedd serving $SOCK (its pid is in the lock file) and waits for
# process $1 to exit 0; the lock file must be gone.
stop_feedd() {
	pid=$(cat "$SOCK.lock" 2>/dev/null) || fail "no lock file $SOCK.lock"
	kill -TERM "$pid"
	wait "$1" || fail "feedd exited $?: $(cat "$LOG")"
	[ ! -e "$SOCK.lock" ] || fail "lock file left behind"
}

# One config under feedd.socket: systemd-socket-activate makes the socket
# (root), gives it SocketGroup= and SocketMode=, and starts feedd as the
# unit's user on the first connection, a trainer's.
activated() {
	cfg=$1
	LOG=$TMP/$(basename "$cfg").log
	: >"$LOG"
	ulimit -l unlimited 2>/dev/null || true  # LimitMEMLOCK=infinity
	systemd-socket-activate --seqpacket -l "$SOCK" \
		setpriv --reuid "$USER_" --regid "$GROUP_" --init-groups \
		--bounding-set -all --inh-caps -all --ambient-caps -all --no-new-privs \
		"$BIN/feedd" --config "$cfg" >>"$LOG" 2>&1 &
	act=$!
	PIDS="$PIDS $act"
	wait_for test -S "$SOCK" || fail "no socket from systemd-socket-activate"
	chgrp "$SGROUP" "$SOCK"
	chmod "$SMODE" "$SOCK"
	as_client timeout 30 "$BIN/feedctl" --socket "$SOCK" status >"$TMP/status" 2>&1 ||
		fail "$cfg: a member of $SGROUP could not connect: $(cat "$TMP/status")
feedd said: $(cat "$LOG")"
	grep -q "feedd " "$TMP/status" || fail "$cfg: status: $(cat "$TMP/status")"
	grep -q "listening on $SOCK (from systemd: mode 0$SMODE" "$LOG" ||
		fail "$cfg: log: $(cat "$LOG")"
	g=$(sed -n 's/^socket_group: *//p' "$cfg")
	if [ -n "$g" ] && [ "$g" != "$SGROUP" ]; then
		grep -q "warn: socket_group is .* feedd.socket's SocketGroup= decides" "$LOG" ||
			fail "$cfg: no warning that socket_group $g differs from SocketGroup=$SGROUP"
	fi
	if setpriv --reuid nobody --regid nogroup --clear-groups \
		"$BIN/feedctl" --socket "$SOCK" status >"$TMP/nobody" 2>&1; then
		fail "$cfg: nobody, not in $SGROUP, connected"
	fi
	stop_feedd "$act"
	echo "ok: $(basename "$cfg") under feedd.socket as $USER_"
}

# Without feedd.socket: feedd binds in /run/feedd (tmpfiles) itself. A
# socket_group other than the unit's group needs the documented drop-in
# (SupplementaryGroups=GROUP): without it --check-config --user says so
# and start-up refuses; with it both go ahead.
bound() {
	cfg=$1
	LOG=$TMP/$(basename "$cfg").bound.log
	: >"$LOG"
	g=$(sed -n 's/^socket_group: *//p' "$cfg")
	UNIT_GROUPS="--init-groups"
	if [ -n "$g" ] && [ "$g" != "$GROUP_" ]; then
		"$BIN/feedd" --check-config "$cfg" --socket "$SOCK" --user "$USER_" >"$TMP/check" 2>&1 &&
			fail "$cfg: --check-config --user passed what start-up refuses"
		grep -q "socket_group .*($USER_) is not a member and lacks CAP_CHOWN" "$TMP/check" ||
			fail "$cfg: --check-config said: $(cat "$TMP/check")"
		as_unit "$BIN/feedd" --config "$cfg" --socket "$SOCK" >"$TMP/refused" 2>&1 &&
			fail "$cfg: started without being in $g"
		grep -q "chown to group .* (socket_group): Operation not permitted" "$TMP/refused" ||
			fail "$cfg: refused with: $(cat "$TMP/refused")"
		UNIT_GROUPS="--groups $GROUP_,$g"  # the drop-in
		usermod -aG "$g" "$CLIENT"
	fi
	as_unit "$BIN/feedd" --check-config "$cfg" --socket "$SOCK" >"$TMP/check" 2>&1 ||
		fail "$cfg: --check-config as $USER_: $(cat "$TMP/check")"
	as_unit "$BIN/feedd" --config "$cfg" --socket "$SOCK" >>"$LOG" 2>&1 &
	pid=$!
	PIDS="$PIDS $pid"
	wait_for grep -q "ready:" "$LOG" || fail "$cfg: not ready: $(cat "$LOG")"
	as_client "$BIN/feedctl" --socket "$SOCK" status >"$TMP/status" 2>&1 ||
		fail "$cfg: client could not connect: $(cat "$TMP/status")"
	stop_feedd "$pid"
	[ ! -e "$SOCK" ] || fail "$cfg: socket left behind"
	echo "ok: $(basename "$cfg") without feedd.socket as $USER_ ($UNIT_GROUPS)"
}

user() {
	need systemd-analyze
	need systemd-socket-activate
	[ "$(id -u)" = 0 ] || skip "needs root to create the unit's user"
	USER_=$(key User "$UNIT")
	GROUP_=$(key Group "$UNIT")
	SGROUP=$(key SocketGroup "$SOCKUNIT")
	SMODE=$(key SocketMode "$SOCKUNIT" | sed 's/^0*//')
	UNIT_GROUPS="--init-groups"
	[ -n "$USER_" ] && [ -n "$GROUP_" ] && [ -n "$SGROUP" ] || fail "User=, Group=, SocketGroup="
	caps=$(key CapabilityBoundingSet "$UNIT")
	[ -z "$caps" ] || fail "CapabilityBoundingSet=$caps: teach this test those capabilities"
	make_users
	SOCK=$TMP/run/feedd.sock
	n=0
	for cfg in "$SRC"/configs/*.yaml; do
		activated "$cfg"
		bound "$cfg"
		n=$((n + 1))
	done
	[ $n -ge 2 ] || fail "only $n configs"
}

# ---- sandbox -----------------------------------------------------------------

# writable_paths UNITFILE: "PATH USER GROUP MODE" for each path the unit
# makes writable: ReadWritePaths= (owner and mode from feedd.tmpfiles),
# CacheDirectory= and the like (User=, *DirectoryMode=), PrivateTmp=.
writable_paths() {
	u=$1
	for p in $(sed -n 's/^ReadWritePaths=//p' "$u"); do
		p=${p#-}
		p=${p#+}
		t=$(awk -v p="$p" '$1 == "d" && $2 == p { print $4, $5, $3 }' "$SRC/deploy/feedd.tmpfiles")
		echo "$p ${t:-root root 0755}"
	done
	for kv in CacheDirectory:/var/cache StateDirectory:/var/lib LogsDirectory:/var/log; do
		k=${kv%%:*}
		mode=$(key "${k}Mode" "$u")
		for d in $(sed -n "s/^$k=//p" "$u"); do
			echo "${kv#*:}/$d $(key User "$u") $(key Group "$u") ${mode:-0755}"
		done
	done
	if [ "$(key PrivateTmp "$u")" = yes ]; then
		echo "/tmp root root 1777"
		echo "/var/tmp root root 1777"
	fi
}

# fresh_dir PATH USER GROUP MODE: an empty writable tmpfs at PATH. Where
# PATH does not exist, its parent becomes a tmpfs first (to make the
# mount point), read-only again after.
fresh_dir() {
	if [ ! -d "$1" ]; then
		parent=$(dirname "$1")
		[ -d "$parent" ] || fresh_dir "$parent" root root 0755
		mount -t tmpfs -o mode=0755 tmpfs "$parent"
		mkdir "$1"
		mount -o remount,ro "$parent"
	fi
	mount -t tmpfs -o "mode=$4" tmpfs "$1"
	chown "$2:$3" "$1"
}

# In a private mount namespace (unshare -m): the unit's view of the file
# system, then UNITFILE's feedd on CFG under its socket unit's socket;
# a client connects. Exit 0 when it serves, 1 when it refused to start.
# Everything goes to stdout (a file opened outside: nothing here can
# write one).
sandbox_run() {
	u=$1 cfg=$2
	mount --make-rprivate /
	# ProtectSystem=strict: every mount read-only but the API file systems
	awk '{ print $5 }' /proc/self/mountinfo | sort -u | while read -r mp; do
		case "$mp" in /dev|/dev/*|/proc|/proc/*|/sys|/sys/*) continue ;; esac
		mount -o remount,bind,ro "$mp" 2>/dev/null || [ "$mp" != / ] ||
			fail "cannot make / read-only"
	done
	touch /.feedd_rw_probe 2>/dev/null && fail "/ is still writable"
	writable_paths "$u" | while read -r p owner group mode; do
		fresh_dir "$p" "$owner" "$group" "$mode"
	done
	sock=$(key ListenSequentialPacket "$(dirname "$u")/feedd.socket")
	ulimit -l unlimited 2>/dev/null || true
	# LimitNOFILE=, or as much of it as this machine's hard limit allows
	nofile=$(key LimitNOFILE "$u")
	hard=$(ulimit -Hn)
	[ "$hard" = unlimited ] || [ "$hard" -ge "$nofile" ] || nofile=$hard
	ulimit -n "$nofile" || fail "ulimit -n $nofile (LimitNOFILE=)"
	systemd-socket-activate --seqpacket -l "$sock" \
		setpriv --reuid "$(key User "$u")" --regid "$(key Group "$u")" --init-groups \
		--bounding-set -all --inh-caps -all --ambient-caps -all --no-new-privs \
		"$BIN/feedd" --config "$cfg" 2>&1 &
	act=$!  # systemd-socket-activate execs feedd: this is feedd's pid
	wait_for test -S "$sock" || fail "no socket $sock from systemd-socket-activate"
	# the first connection starts feedd; it serves, or exits
	"$BIN/feedctl" --socket "$sock" --timeout 120000 status 2>&1 &
	ctl=$!
	wait_for sh -c "! kill -0 $ctl 2>/dev/null || ! kill -0 $act 2>/dev/null" ||
		fail "neither feedctl nor feedd ended"
	rc=0
	if kill -0 "$act" 2>/dev/null; then
		wait "$ctl" || rc=1
	else
		kill "$ctl" 2>/dev/null || true
		rc=1
	fi
	if [ $rc = 0 ]; then
		kill -TERM "$(cat "$sock.lock")"
		# the disk tier was made where the config says, in the writable view
		c=$(sed -n 's/^cache_dir: *//p' "$cfg")
		[ -z "$c" ] || [ -d "$c" ] || fail "$cfg: no cache_dir $c after a start"
	fi
	kill -TERM "$act" 2>/dev/null || true
	wait "$act" 2>/dev/null || true
	return $rc
}

# One config under one unit: --check-config --unit and a start in the
# unit's view agree; echoes "ok" or "refused".
sandbox_case() {
	u=$1 cfg=$2
	log=$TMP/$(basename "$(dirname "$u")").$(basename "$cfg").log
	if "$BIN/feedd" --check-config "$cfg" --unit "$u" >"$log.check" 2>&1; then
		check=0
	else
		check=1
	fi
	if unshare -m --propagation private sh "$0" sandbox-run "$u" "$cfg" >"$log" 2>&1; then
		start=0
	else
		start=$?
		[ $start = 1 ] || fail "$cfg under $u: sandbox-run exited $start: $(cat "$log")"
	fi
	[ $check = $start ] || fail "$cfg under $u: --check-config --unit said $check, a start $start
check: $(cat "$log.check")
start: $(cat "$log")"
	if [ $start = 0 ]; then echo ok; else echo refused; fi
}

sandbox() {
	[ "$(id -u)" = 0 ] || skip "needs root to mount in its own namespace"
	need unshare util-linux
	need setpriv util-linux
	need systemd-socket-activate
	need systemd-sysusers
	unshare -m true 2>/dev/null || skip "unshare -m refused here (no CAP_SYS_ADMIN)"
	systemd-sysusers "$SRC/deploy/feedd.sysusers" || fail "systemd-sysusers failed"
	# the unit and its socket with this build's programs, and the same
	# unit without CacheDirectory= (the unit before issue 28)
	mkdir -p "$TMP/unit" "$TMP/nocache"
	for d in unit nocache; do
		sed "s|/usr/local/bin/|$BIN/|" "$UNIT" >"$TMP/$d/feedd.service"
		cp "$SOCKUNIT" "$TMP/$d/feedd.socket"
	done
	sed -i '/^CacheDirectory/d' "$TMP/nocache/feedd.service"
	# the example config with its cache_dir set, as a node sets it
	sed 's/^# *cache_dir:/cache_dir:/' "$SRC/configs/feedd.yaml" >"$TMP/feedd-cache.yaml"
	grep -q '^cache_dir: /' "$TMP/feedd-cache.yaml" || fail "configs/feedd.yaml has no cache_dir to set"
	n=0
	for cfg in "$SRC"/configs/*.yaml "$TMP/feedd-cache.yaml"; do
		[ "$(sandbox_case "$TMP/unit/feedd.service" "$cfg")" = ok ] ||
			fail "$cfg does not start under the shipped unit"
		echo "ok: $(basename "$cfg") starts in feedd.service's view, as --check-config --unit says"
		n=$((n + 1))
	done
	[ $n -ge 3 ] || fail "only $n configs"
	[ "$(sandbox_case "$TMP/nocache/feedd.service" "$TMP/feedd-cache.yaml")" = refused ] ||
		fail "the cache_dir config started without CacheDirectory= (the test sees no sandbox)"
	grep -q "cache_dir /var/cache/feedd: read-only under" "$TMP/nocache.feedd-cache.yaml.log.check" ||
		fail "--check-config did not name cache_dir: $(cat "$TMP/nocache.feedd-cache.yaml.log.check")"
	grep -q "cache_dir /var/cache/feedd: Read-only file system" "$TMP/nocache.feedd-cache.yaml.log" ||
		fail "start-up refused for another reason: $(cat "$TMP/nocache.feedd-cache.yaml.log")"
	echo "ok: without CacheDirectory= the cache_dir config is refused, and --check-config says so"
}

case "${1:-}" in
analyze) analyze ;;
user) user ;;
sandbox) sandbox ;;
sandbox-run) shift; sandbox_run "$@" ;;
*) echo "usage: $0 analyze|user|sandbox" >&2; exit 2 ;;
esac
