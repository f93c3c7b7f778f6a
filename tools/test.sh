#!/usr/bin/env bash
# Set up, build and run every test: the whole suite on the default build, then again under
# AddressSanitizer + UndefinedBehaviorSanitizer (skip that second pass with SANITIZE=0).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
bash tools/build.sh default
ctest --preset default
if [ "${SANITIZE:-1}" != "0" ]; then
  bash tools/build.sh asan
  ctest --preset asan
fi
