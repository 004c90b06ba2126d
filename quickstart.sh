#!/usr/bin/env bash
# ddplaunch quick start on Debian 12:
#   ./quickstart.sh demo   install what is missing, build, run the demo job
#   ./quickstart.sh test   install what is missing, build, run the whole test suite
# Environment: BUILD_DIR (default: build), JOBS (default: number of CPUs),
# TEST_JOBS (tests at once; default: twice JOBS, as most of a test's time is
# spent waiting on the processes it started),
# SANITIZE=0 to skip the ASan+UBSan and TSan runs of the test suite and the
# fuzz targets; FUZZ_SECONDS (default: 30) bounds each fuzz target's run.
set -euo pipefail
cd "$(dirname "$0")"
mode="${1:-demo}"
BUILD_DIR="${BUILD_DIR:-build}"
JOBS="${JOBS:-$(nproc)}"
TEST_JOBS="${TEST_JOBS:-$((JOBS * 2))}"
# Each stage's line says how long the run has taken so far (CI's 30-minute budget).
say() { printf 'quickstart: [%dm%02ds] %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*"; }

packages=(build-essential cmake pkg-config libcli11-dev libspdlog-dev libfmt-dev nlohmann-json3-dev
          libgtest-dev libssl-dev openmpi-bin libopenmpi-dev libpmix-dev libhwloc-dev python3 python3-pytest python3-pytest-timeout python3-torch
          python3-mpi4py python3-h5py-mpi
          clang-format clang libclang-rt-14-dev git iproute2 slurmctld slurmd slurm-client munge elfutils help2man
          strace openssh-server openssh-client nftables libmicrohttpd-dev)
# What only the test suite drives: a real Prometheus server scrapes
# --metrics-port, headless Chromium renders node 0's live page, and gdb
# with Python's gdb extension (python3-dbg) shows `ddplaunch stacks`'
# Python frames, Debian's LAMMPS runs its own melt example across the
# tree of agents, debootstrap makes the Debian 11 root the binary is run in
# (glibc 2.31), and the wheel is installed into a fresh venv.
if [ "$mode" = test ]; then
  packages+=(prometheus chromium gdb python3-dbg lammps lammps-examples debootstrap python3-venv python3-wheel)
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  say "installing ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" = 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -q
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# -O2 with line tables (-g1): stacks and sanitizer reports name files and
# lines, and each file compiles in two thirds of the time full -g takes.
optimized=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG"
           "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG")
say "building ($BUILD_DIR)"
cmake -S . -B "$BUILD_DIR" "${optimized[@]}" >/dev/null
cmake --build "$BUILD_DIR" -j "$JOBS"

case "$mode" in
  demo)
    # Two nodes on loopback, each with two workers: one PyTorch gloo job of 4 ranks.
    port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    run_node() {
      "$BUILD_DIR/ddplaunch" --nnodes 2 --node-rank "$1" --nproc-per-node 2 --master-port "$port" \
        --prefix "[node $1 rank {rank}]: " --python /usr/bin/python3 -- examples/ddp_gloo.py 5
    }
    run_node 1 &
    node1=$!
    rc0=0 rc1=0
    run_node 0 || rc0=$?
    wait "$node1" || rc1=$?
    say "node 0 exited $rc0, node 1 exited $rc1"
    exit $((rc0 || rc1))
    ;;
  test)
    say "the suite ($BUILD_DIR)"
    (cd "$BUILD_DIR" && ctest --output-on-failure -j "$TEST_JOBS" --timeout 600)
    # The same suite again under ASan+UBSan and under TSan (SANITIZE=0 skips them).
    if [ "${SANITIZE:-1}" != 0 ]; then
      for sanitizer in address thread; do
        dir="$BUILD_DIR-$sanitizer"
        say "building under -DDDPLAUNCH_SANITIZE=$sanitizer ($dir)"
        # A unity build (a few sources per compiler run): these trees are
        # built once, from scratch, and it takes 2 min instead of 5 on 2
        # cores. The main build above compiles each file alone, so a file
        # that misses an include still fails there.
        cmake -S . -B "$dir" "${optimized[@]}" -DDDPLAUNCH_SANITIZE="$sanitizer" \
          -DDDPLAUNCH_BUILD_BENCH=OFF -DCMAKE_UNITY_BUILD=ON >/dev/null
        cmake --build "$dir" -j "$JOBS"
        say "the suite under -DDDPLAUNCH_SANITIZE=$sanitizer ($dir)"
        # The unit tests in one process (a sanitizer's start-up, paid 428
        # times under ctest, took longer than the tests), then the rest.
        timeout 600 "$dir/tests/unit_tests" --gtest_brief=1
        (cd "$dir" && ctest --output-on-failure -j "$TEST_JOBS" --timeout 600 -L integration)
      done
      # Every libFuzzer target for a bounded time (FUZZ_SECONDS each, all at once).
      say "the fuzz targets, ${FUZZ_SECONDS:-30} s each ($BUILD_DIR-fuzz)"
      JOBS="$JOBS" tests/fuzz/run.sh "${FUZZ_SECONDS:-30}" "$BUILD_DIR-fuzz"
    fi
    say "done"
    ;;
  *)
    echo "usage: $0 demo|test" >&2
    exit 2
    ;;
esac
