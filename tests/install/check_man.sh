#!/usr/bin/env bash
# check_man.sh SRC BIN: the man pages in man/ stay true to the programs.
# Every long option a program's --help prints (feedd, feedctl, each
# feedpack command) and every command must appear in its page, and every
# key of configs/feedd.yaml (set or commented out) in feedd.yaml(5). A
# flag or key added without its page fails here, naming it. feedbench's
# options, likewise, in feedbench.1.
set -euo pipefail
src=$1 bin=$2
missing=()

# in_page PAGE WORD...: each WORD must appear in PAGE (roff writes - as \-).
in_page() {
  local page=$1 w
  shift
  for w in "$@"; do
    grep -qF -- "${w//-/\\-}" "$src/man/$page" || missing+=("$page: $w")
  done
}
opts() { grep -oE -- '--[a-z][a-z-]*' | sort -u; }

mapfile -t o < <("$bin/feedd" --help | opts)
in_page feedd.8 "${o[@]}"
mapfile -t o < <("$bin/feedctl" --help | opts)
in_page feedctl.1 "${o[@]}" status datasets
mapfile -t cmds < <("$bin/feedpack" --help | sed -n 's/^  feedpack \([a-z]*\) .*/\1/p')
[ ${#cmds[@]} -ge 5 ] || { echo "FAIL: feedpack --help lists ${#cmds[@]} commands"; exit 1; }
for c in "${cmds[@]}"; do
  in_page feedpack.1 "feedpack $c"
  mapfile -t o < <("$bin/feedpack" "$c" --help | opts | grep -vx -- --help || true)
  in_page feedpack.1 "${o[@]}"
done
mapfile -t o < <("$bin/feedbench" --help 2>&1 | opts)
[ ${#o[@]} -ge 20 ] || { echo "FAIL: feedbench --help lists ${#o[@]} options"; exit 1; }
in_page feedbench.1 "${o[@]}"
mapfile -t keys < <(sed -nE 's/^(#? *)(- )?([a-z_]+):.*/\3/p' "$src/configs/feedd.yaml" | sort -u)
[ ${#keys[@]} -ge 10 ] || { echo "FAIL: only ${#keys[@]} keys found in configs/feedd.yaml"; exit 1; }
in_page feedd.yaml.5 "${keys[@]/%/:}"

if [ ${#missing[@]} -ne 0 ]; then
  printf 'FAIL: not in the man page: %s\n' "${missing[@]}"
  exit 1
fi
echo "man: ok"
