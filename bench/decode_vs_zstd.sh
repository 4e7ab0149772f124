#!/usr/bin/env bash
# bench/decode_vs_zstd.sh: the format reader's single-core block decode
# rate next to `zstd -b3 -B65536` on the same bytes, both pinned to one core.
#
#   bench/decode_vs_zstd.sh [BUILD_DIR]
#
# Packs Fashion-MNIST's training images (zstd level 3, 64 KiB blocks, as
# zstd -b3 -B65536 cuts them), then alternates the two measurements five
# times and prints the median of each and their ratio. Ingest rate and
# compression ratio come from feedpack's own summary line.
set -euo pipefail
build=${1:-build}
src=/usr/share/datasets/fashion-mnist
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cpu=$(( $(nproc) - 1 ))

echo "ingest: $("$build"/bin/feedpack idx "$src"/train-images-idx3-ubyte.gz "$src"/train-labels-idx1-ubyte.gz -o "$work/fm")"
zcat "$src"/train-images-idx3-ubyte.gz > "$work/images.idx"

ours=() theirs=()
for i in 1 2 3 4 5; do
  ours+=("$(taskset -c "$cpu" "$build"/bin/bench_decode "$work/fm" --rounds 5 |
            sed 's/.*"decode_mb_per_s": \([0-9.]*\).*/\1/')")
  theirs+=("$(taskset -c "$cpu" zstd -q -b3 -e3 -B65536 -i3 "$work/images.idx" 2>&1 |
              tr '\r' '\n' | grep -o '[0-9.]* MB/s' | tail -1 | cut -d' ' -f1)")
done
median() { printf '%s\n' "$@" | sort -g | sed -n "$(( ($# + 1) / 2 ))p"; }
mo=$(median "${ours[@]}")
mt=$(median "${theirs[@]}")
echo "reader decode (1 core):   $mo MB/s  (runs: ${ours[*]})"
echo "zstd -b3 -B65536 (1 core): $mt MB/s  (runs: ${theirs[*]})"
awk -v a="$mo" -v b="$mt" 'BEGIN { printf "ratio: %.3f\n", a / b }'
