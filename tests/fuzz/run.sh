#!/usr/bin/env bash
# Runs every libFuzzer target for a bounded time, all at once.
#   tests/fuzz/run.sh [SECONDS] [BUILD_DIR]     (defaults: 60, build-fuzz)
# Builds them first (clang, -DDDPLAUNCH_SANITIZE=fuzzer). Each starts from
# its seed corpus (tests/fuzz/corpus/<target>, never written to) plus what
# earlier runs found in BUILD_DIR/corpus/<target>. A crash, a sanitizer
# report, a leak or an input slower than 10 s fails the run; the input is
# left in BUILD_DIR/artifacts/ and its log printed.
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds="${1:-60}"
dir="${2:-build-fuzz}"
targets=(fuzz_protocol fuzz_records fuzz_argv fuzz_nodelist fuzz_store_server fuzz_lines)

cmake -S . -B "$dir" -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DDDPLAUNCH_SANITIZE=fuzzer -DDDPLAUNCH_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" \
  -DCMAKE_UNITY_BUILD=ON >/dev/null
cmake --build "$dir" -j "${JOBS:-$(nproc)}" --target ddplaunch_fuzzers

mkdir -p "$dir/artifacts"
run_one() {
  local t="$1"
  mkdir -p "$dir/corpus/$t"
  if "$dir/tests/fuzz/$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix="$dir/artifacts/$t-" \
      "$dir/corpus/$t" "tests/fuzz/corpus/$t" >"$dir/$t.log" 2>&1; then
    echo "fuzz: $t: $(grep -m1 -o 'stat::number_of_executed_units: *[0-9]*' "$dir/$t.log" |
      grep -o '[0-9]*$') runs in ${seconds} s, no finding"
  else
    echo "fuzz: $t FAILED; its log:"
    tail -60 "$dir/$t.log"
    return 1
  fi
}
# All at once: each gets SECONDS of wall time (a share of the cores), so the
# whole run takes SECONDS however many targets there are.
failed=0
pids=()
for t in "${targets[@]}"; do
  run_one "$t" & pids+=($!)
done
for pid in "${pids[@]}"; do
  wait "$pid" || failed=1
done
exit $failed
