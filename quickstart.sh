#!/usr/bin/env bash
# ddplaunch quick start on Debian 12:
#   ./quickstart.sh demo   install what is missing, build, run the demo job
#   ./quickstart.sh test   install what is missing, build, run the whole test suite
# Environment: BUILD_DIR (default: build), JOBS (default: number of CPUs).
set -euo pipefail
cd "$(dirname "$0")"
mode="${1:-demo}"
BUILD_DIR="${BUILD_DIR:-build}"
JOBS="${JOBS:-$(nproc)}"

packages=(build-essential cmake pkg-config libcli11-dev libspdlog-dev libfmt-dev nlohmann-json3-dev
          libgtest-dev libssl-dev openmpi-bin libopenmpi-dev python3 python3-pytest python3-torch)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "quickstart: installing ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" = 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -q
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$BUILD_DIR" -j "$JOBS"

case "$mode" in
  demo)
    exec "$BUILD_DIR/ddplaunch" --nproc-per-node 2 --python /usr/bin/python3 -- examples/ddp_gloo.py
    ;;
  test)
    cd "$BUILD_DIR"
    exec ctest --output-on-failure -j "$JOBS" --timeout 600
    ;;
  *)
    echo "usage: $0 demo|test" >&2
    exit 2
    ;;
esac
