#!/usr/bin/env bash
# Set up, build and run every test (CTest runs the GoogleTest suites and the CLI checks).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
bash tools/build.sh
ctest --test-dir build --output-on-failure -j 2
