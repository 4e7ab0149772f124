#!/usr/bin/env bash
# check_deb.sh BUILD VERSION: `cpack -G DEB` in the build tree (output in a
# temporary directory) and the package read back with dpkg-deb: its file
# name, control fields (Depends from dpkg-shlibdeps), conffiles, maintainer
# scripts (user from sysusers.d, unit enabled and never started) and files.
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
for s in conffiles postinst prerm postrm shlibs; do
  grep -qE "^ +[0-9]+ bytes, +[0-9]+ lines +\*? +$s " "$t/info" || fail "no $s in: $(cat "$t/info")"
done
grep -q 'systemd-sysusers feedd.conf' "$t/ctrl/postinst" || fail "postinst makes no user"
grep -q 'deb-systemd-helper enable feedd.service' "$t/ctrl/postinst" || fail "postinst does not enable"
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
         ./usr/lib/python3/dist-packages/feedclient/__init__.py; do
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
            "deb-systemd-helper enable feedd.service"; do
  grep -qxF "$want" "$t/calls" || fail "postinst did not run '$want': $(cat "$t/calls")"
done
if grep -E ' (start|restart|try-restart|reload-or-restart) ' "$t/calls"; then
  fail "a first install starts the unit (above)"
fi
: >"$t/calls"
PATH=$t/stubs:$PATH sh "$t/ctrl/prerm" remove || fail "prerm remove"
PATH=$t/stubs:$PATH sh "$t/ctrl/postrm" purge || fail "postrm purge"
if [ -d /run/systemd/system ]; then   # the scripts touch systemd only where it runs
  grep -qxF "systemctl stop feedd.service" "$t/calls" || fail "prerm did not stop: $(cat "$t/calls")"
fi
grep -qxF "deb-systemd-helper purge feedd.service" "$t/calls" || fail "postrm purge: $(cat "$t/calls")"

dpkg-deb -x "$deb" "$t/root"
# The package's sysusers.d snippet makes the user the unit runs as.
systemd-sysusers --root="$t/root" feedd.conf || fail "systemd-sysusers on the package's snippet"
user=$(sed -n 's/^User=//p' "$t/root/usr/lib/systemd/system/feedd.service")
grep -q "^$user:" "$t/root/etc/passwd" || fail "sysusers.d did not make the unit's user '$user'"
grep -q '^ExecStart=/usr/bin/feedd ' "$t/root/usr/lib/systemd/system/feedd.service" ||
  fail "the unit does not run /usr/bin/feedd"
echo "deb: ok ($(basename "$deb"), $(wc -l <"$t/files") entries, Depends: $depends)"
