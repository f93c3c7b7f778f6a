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
  ctest --preset asan
fi
if [ "${FUZZ:-1}" != "0" ]; then
  bash tools/fuzz.sh "${FUZZ_SECONDS:-20}"
fi
if [ "${TSAN:-0}" != "0" ]; then
  bash tools/build.sh tsan
  ctest --preset tsan
fi
