#!/bin/sh
# check_systemd_unit.sh: the shipped units as systemd would take them.
#
#   check_systemd_unit.sh analyze   systemd-analyze verify of feedd.service
#                                   and feedd.socket, and the security
#                                   exposure of feedd.service (<= 2.5)
#   check_systemd_unit.sh user      every configs/*.yaml starts under the
#                                   shipped units as the unit's user with
#                                   the unit's capabilities (none), its
#                                   socket made by systemd-socket-activate
#                                   with feedd.socket's group and mode, and
#                                   a member of that group connects; without
#                                   socket activation, what the docs say
#                                   works does, and --check-config --user
#                                   foretells what does not
#
# Needs FEED_SRC and FEED_BIN (tests/CMakeLists.txt sets them). Exits 77
# (skipped) with a line saying why when systemd's tools are absent, or for
# "user" when not root (it creates users with systemd-sysusers/useradd).
set -eu

SRC=${FEED_SRC:?}
BIN=${FEED_BIN:?}
UNIT=$SRC/deploy/feedd.service
SOCKUNIT=$SRC/deploy/feedd.socket
MAX_EXPOSURE=2.5
CLIENT=feedd-test-client

fail() { echo "FAIL: $*" >&2; exit 1; }
skip() { echo "skipped: $*"; exit 77; }
need() { command -v "$1" >/dev/null 2>&1 || skip "$1 absent (Debian package ${2:-systemd})"; }
key() { sed -n "s/^$1=//p" "$2" | tail -n 1; }

TMP=$(mktemp -d /tmp/feedd_unit.XXXXXX)
chmod 0755 "$TMP"
PIDS=""
cleanup() {
	for p in $PIDS; do kill -KILL "$p" 2>/dev/null || true; done
	rm -rf "$TMP"
}
trap cleanup EXIT

analyze() {
	need systemd-analyze
	# verify runs the unit's ExecStart: point it at the built feedd. The
	# man pages are checked where they are installed, not here.
	sed "s|/usr/local/bin/feedd|$BIN/feedd|" "$UNIT" >"$TMP/feedd.service"
	cp "$SOCKUNIT" "$TMP/feedd.socket"
	systemd-analyze verify --man=no "$TMP/feedd.service" "$TMP/feedd.socket" ||
		fail "systemd-analyze verify refused the units"
	out=$(systemd-analyze security --offline=yes "$UNIT" 2>&1)
	score=$(echo "$out" | sed -n 's/.*Overall exposure level for feedd.service: \([0-9.]*\).*/\1/p')
	[ -n "$score" ] || fail "no exposure level in: $out"
	awk -v s="$score" -v m="$MAX_EXPOSURE" 'BEGIN { exit !(s <= m) }' ||
		fail "exposure $score > $MAX_EXPOSURE:
$out"
	for k in Type=notify WatchdogSec= 'ExecReload=/bin/kill -HUP $MAINPID' \
		 SystemCallFilter=@system-service DevicePolicy=closed OOMScoreAdjust= UMask=; do
		grep -q "^$k" "$UNIT" || fail "feedd.service lacks $k"
	done
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

case "${1:-}" in
analyze) analyze ;;
user) user ;;
*) echo "usage: $0 analyze|user" >&2; exit 2 ;;
esac
