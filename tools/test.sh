#!/usr/bin/env bash
# Set up, build and run every test: the whole suite on the default build, then again under
# AddressSanitizer + UndefinedBehaviorSanitizer (skip that second pass with SANITIZE=0), then each
# libFuzzer target briefly on its seed corpus (FUZZ_SECONDS per target, default 20; FUZZ=0 skips
# it; tools/fuzz.sh runs them longer). TSAN=1 adds the ThreadSanitizer pass over the session and
# autograd tests (off by default: it builds the core and the reference plugin a third time).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
bash tools/build.sh default
ctest --preset default
if [ "${SANITIZE:-1}" != "0" ]; then
  bash tools/build.sh asan
  # capsule_tests (label `unit`) as two gtest shards, one process each: ctest would start one
  # instrumented process per test (about 0.65 s each, 9 of this stage's 14 minutes). The other
  # tests (C API, packaging, ONNX conformance, examples) run under ctest as usual.
  ctest --preset asan -LE '^unit$'
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
  shard_pids=()
  for shard in 0 1; do
    (cd build-asan/tests && GTEST_TOTAL_SHARDS=2 GTEST_SHARD_INDEX=$shard ../bin/capsule_tests) \
      >"build-asan/unit-shard-$shard.log" 2>&1 &
    shard_pids+=($!)
  done
  shards_failed=0
  for shard in 0 1; do
    if ! wait "${shard_pids[$shard]}"; then
      shards_failed=1
      echo "capsule_tests shard $shard failed under ASan + UBSan (build-asan/unit-shard-$shard.log):"
      grep -E "^\[  FAILED  \]|ERROR: |runtime error" "build-asan/unit-shard-$shard.log" | head -40 || true
      tail -n 40 "build-asan/unit-shard-$shard.log"
    fi
    grep -E "^\[  PASSED  \]|tests ran" "build-asan/unit-shard-$shard.log" | sed "s/^/shard $shard: /" || true
  done
  [ "$shards_failed" = 0 ]
fi
if [ "${FUZZ:-1}" != "0" ]; then
  bash tools/fuzz.sh "${FUZZ_SECONDS:-20}"
fi
if [ "${TSAN:-0}" != "0" ]; then
  bash tools/build.sh tsan
  ctest --preset tsan
fi
