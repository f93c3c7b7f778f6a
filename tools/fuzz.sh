#!/usr/bin/env bash
# Builds the libFuzzer targets (CMake preset `fuzz`: clang 14, ASan + UBSan, core library and
# fuzzers only) and runs each target for SECONDS_PER_TARGET seconds (default 300) on a scratch
# copy of its seed corpus, tests/fuzz/corpus/<target>/, so new inputs never dirty the checkout;
# FUZZ_JOBS targets at a time (default: one per core).
# Fails when any target crashes, reports a sanitizer error, throws anything but capsule::Error,
# times out on one input (10 s) or exceeds 2 GB. Crashing inputs are kept under
# build-fuzz/artifacts/<target>/, logs under build-fuzz/logs/.
#
#   tools/fuzz.sh [SECONDS_PER_TARGET]      FUZZ_TARGETS="graph onnx" tools/fuzz.sh 60
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_TARGET=${1:-300}
TARGETS=${FUZZ_TARGETS:-"graph onnx npy safetensors manifest profile idx evidence plan_lock json"}

cmake --preset fuzz >/dev/null
cmake --build --preset fuzz

scratch=$(mktemp -d "${TMPDIR:-/tmp}/capsule-fuzz.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
mkdir -p build-fuzz/logs
# One target per core at a time (each libFuzzer process is single-threaded); the summaries are
# printed in TARGETS order once all have finished.
JOBS=${FUZZ_JOBS:-$(nproc)}
run_target() {
  local name=$1 corpus="$scratch/$1" log="build-fuzz/logs/$1.log"
  mkdir -p "$corpus" "build-fuzz/artifacts/$name"
  cp -r "tests/fuzz/corpus/$name/." "$corpus/"
  local options=(-max_total_time="$SECONDS_PER_TARGET" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 -print_funcs=0
                 -artifact_prefix="build-fuzz/artifacts/$name/")
  [ -f "tests/fuzz/$name.dict" ] && options+=(-dict="tests/fuzz/$name.dict")
  if build-fuzz/bin/fuzz_"$name" "${options[@]}" "$corpus" >"$log" 2>&1; then
    local runs cov
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
    echo "fuzz: $name: ok, $runs inputs in ${SECONDS_PER_TARGET} s, $cov, corpus $(ls "$corpus" | wc -l) files" >"$scratch/$name.result"
  else
    { echo "fuzz: $name: FAILED (log: $log); the last lines:"; tail -40 "$log"; } >"$scratch/$name.result"
    touch "$scratch/$name.failed"
  fi
}
for name in $TARGETS; do
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n || true; done
  run_target "$name" &
done
wait
failed=()
for name in $TARGETS; do
  if [ ! -f "$scratch/$name.result" ]; then
    echo "fuzz: $name: FAILED before it ran (no corpus or binary? see the messages above)"
    failed+=("$name")
    continue
  fi
  cat "$scratch/$name.result"
  if [ -f "$scratch/$name.failed" ]; then failed+=("$name"); fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: faults in ${failed[*]}; reproduce with build-fuzz/bin/fuzz_<target> <artifact>"
  exit 1
fi
