#!/usr/bin/env bash
# check_deb.sh BUILD VERSION: `cpack -G DEB` in the (release) build tree
# (output in a temporary directory) and the package read back with
# dpkg-deb: its file name, control fields (Depends from dpkg-shlibdeps),
# conffiles, triggers, maintainer scripts (user from sysusers.d, units
# enabled and never started, both stopped on removal), files (man pages,
# copyright, changelog, the network drop-in as an example), lintian with
# no error, and the binaries hardened (RELRO, bind-now, fortify, stack
# protector).
set -euo pipefail
build=$1 version=$2
fail() { echo "FAIL: $*" >&2; exit 1; }

t=$(mktemp -d "${TMPDIR:-/tmp}/feed-deb.XXXXXX")
trap 'rm -rf "$t"' EXIT

(cd "$build" && cpack -G DEB -B "$t" >"$t/cpack.log" 2>&1) || { cat "$t/cpack.log"; fail "cpack -G DEB"; }
deb=$t/feedd_${version}_$(dpkg --print-architecture).deb
[ -f "$deb" ] || fail "no $(basename "$deb"); made: $(ls "$t")"

field() { dpkg-deb --field "$deb" "$1"; }
[ "$(field Package)" = feedd ] || fail "Package: $(field Package)"
[ "$(field Version)" = "$version" ] || fail "Version: $(field Version)"
depends=$(field Depends)
for d in libc6 libprotobuf-c1 libuv1 libzstd1; do
  grep -q "\b$d\b" <<<"$depends" || fail "Depends lacks $d: '$depends'"
done

dpkg-deb --ctrl-tarfile "$deb" | tar -x -C "$t" --one-top-level=ctrl
[ "$(cat "$t/ctrl/conffiles")" = /etc/feedd/feedd.yaml ] || fail "conffiles: $(cat "$t/ctrl/conffiles")"
dpkg-deb --info "$deb" >"$t/info"
grep -qx 'activate-noawait ldconfig' "$t/ctrl/triggers" || fail "no ldconfig trigger"
grep -q '\bpython3\b' <<<"$depends" || fail "Depends lacks python3: '$depends'"
for s in conffiles postinst prerm postrm shlibs triggers; do
  grep -qE "^ +[0-9]+ bytes, +[0-9]+ lines +\*? +$s " "$t/info" || fail "no $s in: $(cat "$t/info")"
done
grep -q 'systemd-sysusers feedd.conf' "$t/ctrl/postinst" || fail "postinst makes no user"
grep -q 'deb-systemd-helper enable "$u"' "$t/ctrl/postinst" || fail "postinst does not enable"
if grep -nE '(systemctl|deb-systemd-invoke) +(--[a-z]+ +)*(start|restart|enable --now)' \
     "$t/ctrl/postinst"; then
  fail "postinst starts the unit (line above)"
fi
for s in postinst prerm postrm; do
  [ -x "$t/ctrl/$s" ] || fail "$s not executable"
  sh -n "$t/ctrl/$s" || fail "$s: syntax"
done

dpkg-deb --contents "$deb" | awk '{print $6}' >"$t/files"
for f in ./usr/bin/feedd ./usr/bin/feedctl ./usr/bin/feedpack ./usr/bin/feedbench \
         ./usr/include/feed/client.h ./usr/lib/systemd/system/feedd.service \
         ./usr/lib/systemd/system/feedd.socket ./usr/lib/sysusers.d/feedd.conf \
         ./usr/lib/tmpfiles.d/feedd.conf ./etc/feedd/feedd.yaml \
         ./usr/share/man/man8/feedd.8.gz ./usr/share/man/man5/feedd.yaml.5.gz \
         ./usr/lib/python3/dist-packages/feedclient/__init__.py \
         ./usr/share/man/man1/feedbench.1.gz ./usr/share/doc/feedd/copyright \
         ./usr/share/doc/feedd/changelog.gz ./usr/share/doc/feedd/examples/feedd-network.conf \
         ./usr/share/lintian/overrides/feedd; do
  grep -qxF "$f" "$t/files" || fail "not in the package: $f"
done
grep -qE '^\./usr/lib/(.*/)?libfeedclient\.so\.0$' "$t/files" || fail "no libfeedclient.so.0"
grep -qE '^\./usr/lib/(.*/)?pkgconfig/feedclient\.pc$' "$t/files" || fail "no feedclient.pc"
grep -qE '^\./usr/lib/(.*/)?cmake/feedclient/feedclientConfig\.cmake$' "$t/files" ||
  fail "no feedclientConfig.cmake"

# The maintainer scripts, run with every command they call replaced by a
# stub that logs it: a first install makes the user and directories and
# enables the unit; nothing starts it; removal stops it.
mkdir -p "$t/stubs"
for c in systemd-sysusers systemd-tmpfiles deb-systemd-helper deb-systemd-invoke systemctl; do
  printf '#!/bin/sh\necho "%s $*" >>"%s"\n' "$c" "$t/calls" >"$t/stubs/$c"
  chmod +x "$t/stubs/$c"
done
PATH=$t/stubs:$PATH sh "$t/ctrl/postinst" configure "" || fail "postinst configure"
for want in "systemd-sysusers feedd.conf" "systemd-tmpfiles --create feedd.conf" \
            "deb-systemd-helper enable feedd.socket" "deb-systemd-helper enable feedd.service"; do
  grep -qxF "$want" "$t/calls" || fail "postinst did not run '$want': $(cat "$t/calls")"
done
if grep -E ' (start|restart|try-restart|reload-or-restart) ' "$t/calls"; then
  fail "a first install starts the unit (above)"
fi
: >"$t/calls"
PATH=$t/stubs:$PATH sh "$t/ctrl/prerm" remove || fail "prerm remove"
PATH=$t/stubs:$PATH sh "$t/ctrl/postrm" purge || fail "postrm purge"
if [ -d /run/systemd/system ]; then   # the scripts touch systemd only where it runs
  grep -qxF "deb-systemd-invoke stop feedd.socket feedd.service" "$t/calls" ||
    fail "prerm did not stop the socket and the service: $(cat "$t/calls")"
fi
for u in feedd.socket feedd.service; do
  grep -qxF "deb-systemd-helper purge $u" "$t/calls" || fail "postrm purge $u: $(cat "$t/calls")"
done
# Where systemd does not run here, prerm's stop is checked as if it did:
# the script with /run/systemd/system's test made true.
: >"$t/calls"
sed 's|\[ -d /run/systemd/system \]|true|' "$t/ctrl/prerm" >"$t/prerm.systemd"
PATH=$t/stubs:$PATH sh "$t/prerm.systemd" remove || fail "prerm remove (systemd)"
grep -qxF "deb-systemd-invoke stop feedd.socket feedd.service" "$t/calls" ||
  fail "prerm did not stop the socket and the service: $(cat "$t/calls")"
: >"$t/calls"
PATH=$t/stubs:$PATH sh "$t/prerm.systemd" upgrade || fail "prerm upgrade (systemd)"
[ ! -s "$t/calls" ] || fail "prerm upgrade stopped something: $(cat "$t/calls")"

dpkg-deb -x "$deb" "$t/root"
# The package's sysusers.d snippet makes the user the unit runs as.
systemd-sysusers --root="$t/root" feedd.conf || fail "systemd-sysusers on the package's snippet"
user=$(sed -n 's/^User=//p' "$t/root/usr/lib/systemd/system/feedd.service")
grep -q "^$user:" "$t/root/etc/passwd" || fail "sysusers.d did not make the unit's user '$user'"
grep -q '^ExecStart=/usr/bin/feedd ' "$t/root/usr/lib/systemd/system/feedd.service" ||
  fail "the unit does not run /usr/bin/feedd"
# The binaries as Debian's hardening asks: full RELRO with bind-now,
# fortified libc calls, the stack protector; and a release build.
for f in usr/bin/feedd usr/bin/feedctl usr/bin/feedpack usr/bin/feedbench; do
  # (into files: grep -q ending a pipe early would fail it under pipefail)
  readelf -lW "$t/root/$f" >"$t/elf"
  readelf -dW "$t/root/$f" >>"$t/elf"
  nm -D --undefined-only "$t/root/$f" >"$t/syms"
  grep -q GNU_RELRO "$t/elf" || fail "$f: no RELRO"
  grep -qE 'BIND_NOW|FLAGS_1.*NOW' "$t/elf" || fail "$f: not bind-now"
  grep -q '__stack_chk_fail' "$t/syms" || fail "$f: no stack protector"
  grep -qa 'feed-build-kind=release' "$t/root/$f" || fail "$f: not a release build"
done
nm -D --undefined-only "$t/root/usr/bin/feedd" >"$t/syms"
grep -qE '__[a-z]+_chk@' "$t/syms" || fail "feedd: not fortified"

# lintian (Debian package lintian): no error; warnings are printed.
command -v lintian >/dev/null || fail "lintian absent (Debian package lintian; scripts/setup.sh installs it)"
lintian --tag-display-limit 0 --fail-on error "$deb" >"$t/lintian" 2>&1 ||
  fail "lintian found errors in $(basename "$deb"):
$(cat "$t/lintian")"
cat "$t/lintian"
echo "deb: ok ($(basename "$deb"), $(wc -l <"$t/files") entries, Depends: $depends)"
