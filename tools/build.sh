#!/usr/bin/env bash
# Configures and builds one CMake preset (default: `default`, Release with debug info, into
# build/; `asan`: AddressSanitizer + UBSan into build-asan/).
set -euo pipefail
cd "$(dirname "$0")/.."
PRESET=${1:-default}
cmake --preset "$PRESET" >/dev/null
cmake --build --preset "$PRESET"
