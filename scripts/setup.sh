# scripts/setup.sh: sourced by scripts/test and scripts/demo. Installs the
# Debian packages feedd needs when any is missing, then configures and
# builds one build tree. Root is expected (as on our machines and in CI).

FEED_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# Everything a fresh Debian 12 machine lacks to build, test and demo feedd.
FEED_PACKAGES=(
  cmake gcc make pkg-config
  libzstd-dev libxxhash-dev libprotobuf-c-dev protobuf-c-compiler
  libuv1-dev libcyaml-dev libyaml-dev libsystemd-dev check zlib1g-dev
  python3-numpy python3-pytest python3-zstandard python3-torch strace
  dataset-fashion-mnist libjson-c-dev
  libspng-dev libjpeg62-turbo-dev python3-pil python3-torchvision libjpeg-turbo-progs
  plasma-workspace-wallpapers
  binutils dpkg-dev python3-venv python3-pip python3-setuptools python3-wheel systemd
  libmicrohttpd-dev python3-prometheus-client
  libcurl4-openssl-dev nginx
  python3-matplotlib python3-psutil python3-doc zstd
  clang libclang-rt-14-dev
  lintian
  prometheus python3-yaml
  libarchive-dev libpython3-dev
)

feed_install() {
  local missing=()
  for p in "${FEED_PACKAGES[@]}" "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "setup: installing ${missing[*]}"
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
}

# feed_build DIR [cmake args...]: configure (once) and build into DIR.
# CUDA (kernels/*.cu) is built whenever nvcc is there: CMake finds it on
# PATH; CUDACXX points it at the toolkit's default place otherwise.
feed_build() {
  local dir=$1
  shift
  if [ -z "${CUDACXX:-}" ] && ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
    export CUDACXX=/usr/local/cuda/bin/nvcc
  fi
  cmake -S "$FEED_ROOT" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
  cmake --build "$dir" -j"$(nproc)"
}
