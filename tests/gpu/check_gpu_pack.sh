#!/usr/bin/env bash
# check_gpu_pack.sh BUILD_DIR: scripts/gpu-check --pack makes a pack that
# needs nothing of this machine's libraries, and its run script says "no
# GPU" and exits 77 where none is seen (here). Checks:
# - the pack is under 64 MiB and holds run, the binaries, the Python
#   package and both datasets;
# - with only the pack's lib/ on the library path, every library each
#   binary needs resolves inside the pack, except glibc's and the NVIDIA
#   driver's (ldd);
# - DIR/run exits 77 with its "no GPU seen" line, with an empty
#   LD_LIBRARY_PATH and a PATH that hides nvidia-smi.
# Exit 77 itself where nvcc is missing (no CUDA build to pack).
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
build=$1
if ! command -v nvcc >/dev/null && [ ! -x /usr/local/cuda/bin/nvcc ]; then
  echo "check_gpu_pack: no nvcc here: nothing to pack"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "check_gpu_pack: FAILED: $*"; exit 1; }

FEED_GPU_BUILD="$build/gpu-pack-build" "$src/scripts/gpu-check" --pack "$work/pack" \
  >"$work/pack.log" 2>&1 || { cat "$work/pack.log"; fail "gpu-check --pack exited non-zero"; }
P=$work/pack
size=$(du -sm "$P" | cut -f1)
[ "$size" -lt 64 ] || fail "the pack is $size MiB"
for f in run e2e_torch.py e2e_resnet.py data/jpeg_files bin/feedd bin/feedctl bin/feedpack bin/feedbench bin/check_convert_gpu \
         bin/check_client_gpu_device bin/check_ipc_gpu bin/check_ipc_event_gpu bin/check_nvjpeg_gpu bin/gpu_convert lib/libfeedclient.so.0 \
         python/feedclient/__init__.py data/fmnist/manifest.pb data/jpeg/manifest.pb; do
  [ -e "$P/$f" ] || fail "the pack lacks $f"
done
[ -x "$P/run" ] || fail "run is not executable"

glibc='^(linux-vdso|ld-linux|libc|libm|libdl|librt|libpthread|libutil|libresolv)[.-]'
checked=0
for f in "$P"/bin/* "$P"/lib/libfeedclient.so.0; do
  while read -r name arrow path rest; do
    [ "$arrow" = "=>" ] || continue
    [[ $name =~ $glibc || $name =~ ^libcuda\.so ]] && continue
    case $path in
      "$P"/*) checked=$((checked + 1)) ;;
      *) fail "$(basename "$f") needs $name, found at '$path', outside the pack" ;;
    esac
  done < <(LD_LIBRARY_PATH="$P/lib:$P/lib/fallback" ldd "$f")
done
[ "$checked" -gt 20 ] || fail "only $checked libraries resolved inside the pack"

set +e
out=$(env LD_LIBRARY_PATH= PATH=/usr/bin:/bin "$P/run" "$work/report" 2>&1)
rc=$?
set -e
[ "$rc" -eq 77 ] || fail "run exited $rc, not 77, with no GPU: $out"
grep -q "no GPU seen" <<<"$out" || fail "run said: $out"
echo "check_gpu_pack: passed ($size MiB, $checked libraries resolved inside the pack)"
