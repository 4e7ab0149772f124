#!/usr/bin/env bash
# check_install.sh SRC BUILD [CHECKED]: `cmake --install` of the release
# build BUILD into a staging DESTDIR, then use the staged tree as a node
# and a user would, with nothing from the source or build tree:
#  - a release build: NDEBUG (no assert), no lock checks, no FEEDD_TEST_*
#    seam (the staged feedd serves with FEEDD_TEST_STALL's file present,
#    which stalls every batch job of a checked feedd), and CHECKED, the
#    checked tree the tests run, refuses `cmake --install`;
#  - the layout: programs, library, headers, feedclient.pc, the CMake
#    package, man pages, deploy files, /etc/feedd/feedd.yaml, the Python
#    package; no build path in the .pc or the CMake files;
#  - libfeedclient.so.0: its SONAME, and only feed_* exported (versioned);
#  - tests/install/consumer.c built twice against the staged prefix alone,
#    with pkg-config and with find_package(feedclient);
#  - the staged feedd serving Fashion-MNIST packed by the staged feedpack,
#    read by both consumers (labels compared with the IDX file), and the
#    staged Python package finding the staged library.
set -euo pipefail
src=$1 build=$2 checked=${3:-}
fail() { echo "FAIL: $*" >&2; exit 1; }

t=$(mktemp -d "${TMPDIR:-/tmp}/feed-install.XXXXXX")
feedd_pid=
cleanup() {
  [ -n "$feedd_pid" ] && kill "$feedd_pid" 2>/dev/null && wait "$feedd_pid" 2>/dev/null
  rm -rf "$t"
}
trap cleanup EXIT

# ---- only a release build installs ---------------------------------------------
if [ -n "$checked" ]; then
  if DESTDIR=$t/refused cmake --install "$checked" --prefix /usr >"$t/refused.log" 2>&1; then
    fail "cmake --install of the checked build $checked went ahead"
  fi
  grep -q "is a checked build" "$t/refused.log" || { cat "$t/refused.log"; fail "refusal unclear"; }
  [ ! -e "$t/refused/usr/bin/feedd" ] || fail "the refused install left /usr/bin/feedd"
  # the seams are in the checked feedd: what the release one must lack
  grep -qa FEEDD_TEST_STALL "$checked/bin/feedd" || fail "checked feedd has no FEEDD_TEST_STALL"
  grep -qa 'lock rule broken: ' "$checked/lib/libfeedclient.so.0" || fail "checked library has no lock checks"
fi

# ---- install -----------------------------------------------------------------
stage=$t/stage
DESTDIR=$stage cmake --install "$build" --prefix /usr >"$t/install.log" ||
  { cat "$t/install.log"; fail "cmake --install"; }
p=$stage/usr
# shellcheck disable=SC2016  # ${prefix} is the .pc file's, not the shell's
libdir=$(sed -n 's/^libdir=${prefix}\///p' "$(find "$p" -name feedclient.pc)")
lib=$p/$libdir
for f in bin/feedd bin/feedctl bin/feedpack bin/feedbench \
         "$libdir/libfeedclient.so.0" "$libdir/libfeedclient.so" "$libdir/libfeedpack.so.0" \
         include/feed/client.h include/feed/stream.h include/feed/gpu.h \
         "$libdir/pkgconfig/feedclient.pc" "$libdir/cmake/feedclient/feedclientConfig.cmake" \
         "$libdir/cmake/feedclient/feedclientConfigVersion.cmake" \
         share/man/man8/feedd.8.gz share/man/man1/feedctl.1.gz share/man/man1/feedpack.1.gz \
         share/man/man5/feedd.yaml.5.gz share/doc/feedd/README.md \
         lib/systemd/system/feedd.service lib/systemd/system/feedd.socket \
         lib/sysusers.d/feedd.conf lib/tmpfiles.d/feedd.conf \
         lib/python3/dist-packages/feedclient/__init__.py \
         lib/python3/dist-packages/feedclient/pack/__init__.py; do
  [ -e "$p/$f" ] || fail "not installed: /usr/$f"
done
cmp "$stage/etc/feedd/feedd.yaml" "$src/configs/feedd.yaml" || fail "/etc/feedd/feedd.yaml"
grep -q '^ExecStart=/usr/bin/feedd ' "$p/lib/systemd/system/feedd.service" ||
  fail "the unit does not run /usr/bin/feedd: $(grep ExecStart= "$p/lib/systemd/system/feedd.service")"
if grep -rl -e "$src" -e "$build" -e "-rpath" "$p/$libdir/pkgconfig" "$p/$libdir/cmake"; then
  fail "build paths or an rpath in the files above"
fi

# ---- a release build ------------------------------------------------------------
for f in "$p/bin/feedd" "$p/bin/feedctl" "$p/bin/feedpack" "$p/bin/feedbench" \
         "$lib/libfeedclient.so.0"; do
  grep -qa 'feed-build-kind=release' "$f" || fail "$f: not a release build"
  nm -D --undefined-only "$f" >"$t/syms"  # a file: grep -q must not end a pipe early
  if grep -q '__assert_fail' "$t/syms"; then
    fail "$f: calls assert (no NDEBUG)"
  fi
  # proto/feed_lock.c's message, compiled only with FEED_LOCK_CHECKS
  if grep -qa 'lock rule broken: ' "$f"; then
    fail "$f: has lock checks"
  fi
  if grep -qa 'FEEDD_TEST_' "$f"; then
    fail "$f: reads a FEEDD_TEST_* variable: $(grep -ao 'FEEDD_TEST_[A-Z_]*' "$f" | sort -u)"
  fi
done

# ---- the library's ELF -----------------------------------------------------------
soname=$(readelf -d "$lib/libfeedclient.so.0" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ "$soname" = libfeedclient.so.0 ] || fail "SONAME is '$soname'"
# GNU ld adds an absolute symbol named after each version node: not an export.
nm -D --defined-only "$lib/libfeedclient.so.0" | awk '$2 != "A" {print $3}' >"$t/exports"
[ "$(grep -c '^feed_.*@@FEEDCLIENT_0$' "$t/exports")" -ge 10 ] || fail "no feed_*@@FEEDCLIENT_0 exports"
# later calls sit in later nodes (feedclient.map: FEEDCLIENT_0.2, ...)
if grep -Ev '^feed_.*@@FEEDCLIENT_0(\.[0-9]+)?$' "$t/exports"; then
  fail "libfeedclient.so.0 exports the symbols above"
fi

# ---- a consumer, against the staged prefix alone ------------------------------
export PKG_CONFIG_LIBDIR=$lib/pkgconfig PKG_CONFIG_PATH=
# shellcheck disable=SC2046
${CC:-cc} -Wall -Werror -o "$t/consumer_pc" "$src/tests/install/consumer.c" \
  $(pkg-config --cflags --libs feedclient) -ldl || fail "consumer with pkg-config"
cmake -S "$src/tests/install" -B "$t/cm" -DCMAKE_PREFIX_PATH="$p" \
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DCMAKE_C_FLAGS="-Wall -Werror" >"$t/cm.log" ||
  { cat "$t/cm.log"; fail "configure the consumer with find_package"; }
cmake --build "$t/cm" >>"$t/cm.log" || { cat "$t/cm.log"; fail "build the consumer"; }
grep -q "feedclient_DIR:PATH=$p/$libdir/cmake/feedclient" "$t/cm/CMakeCache.txt" ||
  fail "find_package found $(grep feedclient_DIR "$t/cm/CMakeCache.txt")"

# ---- the staged feedd serves what the staged feedpack packed ------------------
fm=/usr/share/datasets/fashion-mnist
"$p/bin/feedpack" idx "$fm/t10k-images-idx3-ubyte.gz" "$fm/t10k-labels-idx1-ubyte.gz" \
  -o "$t/fmnist" >/dev/null || fail "staged feedpack"
sock=$t/feedd.sock
# The staged feedd as a node runs it: socket activation (systemd makes the
# socket, feedd serves it: the first client waits in the backlog), a config
# file, metrics on a free loopback port.
cat >"$t/feedd.yaml" <<YAML
workers: 2
datasets:
  - name: fmnist
    path: $t/fmnist
YAML
# FEEDD_TEST_STALL names a file that exists: a checked feedd would hold
# every batch job while it does; the staged one reads no such variable.
: >"$t/stall"
start=(env FEEDD_TEST_STALL="$t/stall" FEEDD_TEST_ORDER_BLOCKS=1
       systemd-socket-activate --seqpacket -l "$sock" "$p/bin/feedd" --config "$t/feedd.yaml"
       --metrics 127.0.0.1:0)
"${start[@]}" 2>"$t/feedd.log" &
feedd_pid=$!
# Ready when the staged feedctl lists the dataset (or feedd has exited).
for _ in $(seq 300); do
  [ -S "$sock" ] && "$p/bin/feedctl" --socket "$sock" --timeout 1000 datasets 2>/dev/null |
    grep -q fmnist && break
  kill -0 "$feedd_pid" 2>/dev/null || { cat "$t/feedd.log"; fail "feedd exited"; }
  sleep 0.1
done
"$p/bin/feedctl" --socket "$sock" datasets | grep -q fmnist || { cat "$t/feedd.log"; fail "feedd not ready"; }
grep -q "socket activation" "$t/feedd.log" || { cat "$t/feedd.log"; fail "feedd did not say it serves systemd's socket"; }

want=$(/usr/bin/python3 -c "import gzip,sys; d=gzip.open(sys.argv[1]).read(); print(' '.join(map(str, d[8:40])))" \
       "$fm/t10k-labels-idx1-ubyte.gz")
for c in "$t/consumer_pc" "$t/cm/consumer"; do
  LD_LIBRARY_PATH=$lib "$c" "$sock" fmnist 32 >"$t/out" || fail "$c"
  [ "$(sed -n 1p "$t/out")" -ef "$lib/libfeedclient.so.0" ] ||
    fail "$c ran on $(sed -n 1p "$t/out"), not the staged library"
  [ "$(sed -n 3p "$t/out")" = 32 ] || fail "$c: batch of $(sed -n 3p "$t/out")"
  [ "$(sed -n 4p "$t/out")" = "$want" ] || fail "$c: labels $(sed -n 4p "$t/out"), want $want"
done

# ---- metrics count what the consumers read; SIGHUP adds a dataset ------------
base=$(sed -n 's|.*metrics: serving \(http://127\.0\.0\.1:[0-9]*\)/metrics.*|\1|p' "$t/feedd.log")
[ -n "$base" ] || { cat "$t/feedd.log"; fail "no metrics address in the log"; }
/usr/bin/python3 - "$base" <<'PY' || fail "metrics"
import sys, time, urllib.request
from prometheus_client.parser import text_string_to_metric_families
for _ in range(100):  # the consumers' closed streams are counted by the loop
    text = urllib.request.urlopen(sys.argv[1] + "/metrics", timeout=10).read().decode()
    got = sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
              if s.name == "feedd_batches_total" and s.labels.get("dataset") == "fmnist")
    if got >= 2:
        break
    time.sleep(0.1)
assert got >= 2, text
PY
"$p/bin/feedpack" idx "$fm/t10k-images-idx3-ubyte.gz" "$fm/t10k-labels-idx1-ubyte.gz" \
  -o "$t/second" >/dev/null || fail "staged feedpack (second)"
printf '  - name: second\n    path: %s\n' "$t/second" >>"$t/feedd.yaml"
kill -HUP "$feedd_pid"
for _ in $(seq 100); do
  "$p/bin/feedctl" --socket "$sock" datasets 2>/dev/null | grep -q second && break
  sleep 0.1
done
"$p/bin/feedctl" --socket "$sock" datasets | grep -q second || { cat "$t/feedd.log"; fail "SIGHUP did not add 'second'"; }

# ---- the staged Python package finds the staged library --------------------------
got=$(cd "$t" && env -u FEEDCLIENT_LIB PYTHONPATH="$p/lib/python3/dist-packages" \
      /usr/bin/python3 -c "import feedclient; print(feedclient.library_path)") ||
  fail "import feedclient from the staged package"
[ "$got" -ef "$lib/libfeedclient.so.0" ] || fail "feedclient loaded $got"
# ... and loads feedclient._fastiter (next() in C) from inside the package
got=$(cd "$t" && env -u FEEDCLIENT_LIB PYTHONPATH="$p/lib/python3/dist-packages" \
      /usr/bin/python3 -c "import feedclient._native as n; print(n.where)") ||
  fail "import feedclient._native from the staged package"
[ "$got" -ef "$p/lib/python3/dist-packages/feedclient/_fastiter.abi3.so" ] ||
  fail "feedclient._fastiter: $got"
# ... and feedclient.pack writes through the staged libfeedpack
(cd "$t" && env -u FEEDCLIENT_LIB PYTHONPATH="$p/lib/python3/dist-packages" /usr/bin/python3 -c \
  "from feedclient import pack; w = pack.Writer('packed', {'x': ('uint8', (2,))}); w.write({'x': [1, 2]}); w.close()") ||
  fail "feedclient.pack from the staged package"
"$p/bin/feedpack" verify "$t/packed" >/dev/null || fail "feedpack verify of feedclient.pack's dataset"
echo "install: ok ($(wc -l <"$t/exports") exports, consumers read $want)"
