#!/usr/bin/env bash
# Configures and builds one CMake preset (default: `default`, Release with debug info, into
# build/; `asan`: AddressSanitizer + UBSan into build-asan/).
set -euo pipefail
cd "$(dirname "$0")/.."
PRESET=${1:-default}
# ccache (installed by setup.sh) makes rebuilds of unchanged sources, and the second preset's
# plugins and tools, cheap; paths are relative to the source tree so clones share the cache.
launcher=()
if command -v ccache >/dev/null 2>&1; then
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}" CCACHE_NOHASHDIR=1
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache
            -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
cmake --preset "$PRESET" "${launcher[@]}" >/dev/null
cmake --build --preset "$PRESET"
