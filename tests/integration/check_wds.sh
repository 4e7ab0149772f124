#!/bin/sh
# check_wds.sh BIN IMAGES: `feedpack wds` reading several tars at once on
# its worker threads (so ThreadSanitizer's run of the integration label
# watches them): GNU tar shards of the fixture photos with captions and
# labels, one of them gzipped, packed with -j 1 and -j 4 into datasets of
# the same version, every image of which decodes (verify --decode); and a
# truncated shard refused naming the tar and the member.
set -eu
bin=$1 images=$2
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
fail() { echo "check_wds: FAIL: $*" >&2; exit 1; }

n=0
for s in 0 1 2 3; do
  mkdir -p "$t/src$s"
  for f in "$images"/photo_*.jpg; do
    key=$(printf '%02d%04d' "$s" "$n")
    cp "$f" "$t/src$s/$key.jpg"
    printf 'photo %s' "$key" >"$t/src$s/$key.txt"
    printf '%d' $((n % 3)) >"$t/src$s/$key.cls"
    n=$((n + 1))
  done
  (cd "$t/src$s" && tar --sort=name -cf "$t/shard-$s.tar" .)
done
gzip "$t/shard-2.tar"
tars="$t/shard-0.tar $t/shard-1.tar $t/shard-2.tar.gz $t/shard-3.tar"

# shellcheck disable=SC2086  # the tar list splits on purpose
"$bin/feedpack" wds $tars -o "$t/one" -j 1 --fields jpg,txt,cls >/dev/null || fail "wds -j 1"
# shellcheck disable=SC2086
"$bin/feedpack" wds $tars -o "$t/four" -j 4 --fields jpg,txt,cls >"$t/out" || fail "wds -j 4"
grep -q "^packed $n samples into $t/four" "$t/out" || fail "summary: $(cat "$t/out")"
v1=$("$bin/feedpack" inspect "$t/one" | sed -n 's/^version: *//p')
v4=$("$bin/feedpack" inspect "$t/four" | sed -n 's/^version: *//p')
[ -n "$v1" ] && [ "$v1" = "$v4" ] || fail "-j 1 wrote $v1, -j 4 wrote $v4"
"$bin/feedpack" verify "$t/four" --decode >/dev/null || fail "verify --decode"

size=$(stat -c %s "$t/shard-1.tar")
head -c $((size / 2)) "$t/shard-1.tar" >"$t/cut.tar"
if "$bin/feedpack" wds "$t/shard-0.tar" "$t/cut.tar" -o "$t/cut" -j 2 2>"$t/err"; then
  fail "a truncated tar was packed"
fi
grep -q "^feedpack: $t/cut.tar: \(member\|after member\) " "$t/err" || fail "error: $(cat "$t/err")"
[ ! -e "$t/cut" ] || fail "a dataset was left from the truncated tar"
echo "check_wds: ok ($n samples)"
