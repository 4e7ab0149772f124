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
         ./usr/share/man/man8/feedd.8 ./usr/share/man/man5/feedd.yaml.5 \
         ./usr/lib/python3/dist-packages/feedclient/__init__.py; do
  grep -qxF "$f" "$t/files" || fail "not in the package: $f"
done
grep -qE '^\./usr/lib/(.*/)?libfeedclient\.so\.0$' "$t/files" || fail "no libfeedclient.so.0"
grep -qE '^\./usr/lib/(.*/)?pkgconfig/feedclient\.pc$' "$t/files" || fail "no feedclient.pc"
grep -qE '^\./usr/lib/(.*/)?cmake/feedclient/feedclientConfig\.cmake$' "$t/files" ||
  fail "no feedclientConfig.cmake"

dpkg-deb -x "$deb" "$t/root"
grep -q '^ExecStart=/usr/bin/feedd ' "$t/root/usr/lib/systemd/system/feedd.service" ||
  fail "the unit does not run /usr/bin/feedd"
echo "deb: ok ($(basename "$deb"), $(wc -l <"$t/files") entries, Depends: $depends)"
