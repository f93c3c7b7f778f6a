#!/usr/bin/env bash
# Set up, build and run every test: the whole suite on the default build, then again under
# AddressSanitizer + UndefinedBehaviorSanitizer (skip that second pass with SANITIZE=0), then each
# libFuzzer target briefly on its seed corpus (FUZZ_SECONDS per target, default 20; FUZZ=0 skips
# it; tools/fuzz.sh runs them longer). TSAN=1 adds the ThreadSanitizer pass over the session and
# autograd tests (off by default: it builds the core and the reference plugin a third time).
#
# In both passes the unit suite (capsule_tests, ctest label `unit`) runs as two gtest shards, one
# process each, and the other tests under ctest. ctest would start one process per unit test:
# 2,300 starts, 290 of them loading LibTorch (about 1 s each), took about 3.5 of the default
# pass's 4.7 minutes on 2 cores (two shards: under 1), and under ASan (0.65 s per instrumented
# start) 9 of 14. `ctest --preset
# default` alone still runs every test in its own process.
set -euo pipefail
cd "$(dirname "$0")/.."

# Runs build dir $1's capsule_tests as two shards in parallel, each bounded by UNIT_TIMEOUT
# seconds (default 1200: a hung test fails the run rather than stalling it); prints each shard's
# summary, and on failure its failed tests and log tail. Fails when either shard failed.
run_unit_shards() {
  local dir=$1 label=$2 pids=() failed=0 shard
  for shard in 0 1; do
    (cd "$dir/tests" && GTEST_TOTAL_SHARDS=2 GTEST_SHARD_INDEX=$shard \
      timeout "${UNIT_TIMEOUT:-1200}" ../bin/capsule_tests) >"$dir/unit-shard-$shard.log" 2>&1 &
    pids+=($!)
  done
  for shard in 0 1; do
    if ! wait "${pids[$shard]}"; then
      failed=1
      echo "capsule_tests shard $shard failed $label ($dir/unit-shard-$shard.log):"
      grep -E "^\[  FAILED  \]|ERROR: |runtime error" "$dir/unit-shard-$shard.log" | head -40 || true
      tail -n 40 "$dir/unit-shard-$shard.log"
    fi
    grep -E "^\[  PASSED  \]|^\[  SKIPPED \] [0-9]+ tests|tests ran" "$dir/unit-shard-$shard.log" | sed "s/^/shard $shard: /" || true
  done
  [ "$failed" = 0 ]
}

# The two unit shards run side by side on the cores: libgomp's idle threads sleep after about
# 200 µs instead of 3 ms of spinning (see tools/openmp_spinning.hpp).
[ -n "${OMP_WAIT_POLICY:-}" ] || export GOMP_SPINCOUNT="${GOMP_SPINCOUNT:-20000}"
bash tools/setup.sh
bash tools/build.sh default
ctest --preset default -LE '^unit$'
run_unit_shards build "on the default build"
if [ "${SANITIZE:-1}" != "0" ]; then
  bash tools/build.sh asan
  ctest --preset asan -LE '^unit$'
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
  run_unit_shards build-asan "under ASan + UBSan"
fi
if [ "${FUZZ:-1}" != "0" ]; then
  bash tools/fuzz.sh "${FUZZ_SECONDS:-20}"
fi
if [ "${TSAN:-0}" != "0" ]; then
  bash tools/build.sh tsan
  ctest --preset tsan
fi
