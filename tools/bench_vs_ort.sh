#!/usr/bin/env bash
# Capsule (`capsule bench` under onednn_cpu, onednn_cpu_bf16 and checked_cpu) against ONNX Runtime
# (onnxruntime-node's bundled CPU library, tools/bench/ort_bench.mjs) on the same models, input
# shapes and intra-op thread count, in interleaved rounds. A developer tool: CI does not run it
# (it installs onnxruntime-node from the npm registry).
#
#   bash tools/bench_vs_ort.sh [THREADS ...]      default: 2 1
#
# Environment: ROUNDS (default 5) rounds per model and thread count; each round runs each runtime
# once, WARMUP (default 3) untimed then ITERATIONS (default 10) timed runs in a fresh process.
# ONLY (a bash regular expression, case-sensitive: ONLY=ResNet) keeps the models whose name
# matches; PROFILES (default "onednn_cpu onednn_cpu_bf16 checked_cpu") the Capsule columns
# measured (the others print n/a). Reported: the median
# over every timed run of the rounds, in ms. CAPSULE (default build/bin/capsule); ORT_DIR (default build/ort) holds the npm install, made once with
# `npm install --ignore-scripts onnxruntime-node` (no post-install download: the package carries
# its CPU library). Without npm or the registry, the ONNX Runtime columns say so and stay empty.
# Run it on a quiet machine: oneDNN's and ORT's threads wait for each other, so other jobs on the
# cores distort every figure.
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS=("$@")
[ ${#THREADS[@]} -gt 0 ] || THREADS=(2 1)
ROUNDS=${ROUNDS:-5}
WARMUP=${WARMUP:-3}
ITERATIONS=${ITERATIONS:-10}
ONLY=${ONLY:-}
PROFILES=${PROFILES:-onednn_cpu onednn_cpu_bf16 checked_cpu}
CAPSULE=${CAPSULE:-build/bin/capsule}
ORT_DIR=${ORT_DIR:-build/ort}
for n in "${THREADS[@]}" "$ROUNDS" "$WARMUP" "$ITERATIONS"; do
  [[ "$n" =~ ^[0-9]+$ ]] || { echo "bench_vs_ort: '$n' is not a count" >&2; exit 2; }
done
[ -x "$CAPSULE" ] || { echo "bench_vs_ort: $CAPSULE not found; build first (bash tools/build.sh default)" >&2; exit 2; }

# Issue 12's models (MLP 784-256-256-10, LeNet-5, ResNet-18; seeded random weights) are written
# as ONNX files by tools/bench/make_models.py into $MODEL_DIR, once; it needs Debian's
# python3-onnx and python3-numpy (PYTHON, default /usr/bin/python3, the system interpreter that
# sees them).
MODEL_DIR=${MODEL_DIR:-build/bench-models}
PYTHON=${PYTHON:-/usr/bin/python3}
if [ ! -f "$MODEL_DIR/resnet18.onnx" ]; then
  if ! "$PYTHON" tools/bench/make_models.py "$MODEL_DIR"; then
    echo "bench_vs_ort: writing the benchmark models failed; install python3-onnx and python3-numpy (apt-get install python3-onnx python3-numpy)" >&2
    exit 2
  fi
fi

# name | model file | input shape (fixes the input for both runtimes)
MODELS=(
  "MLP 784-256-256-10, batch 1|$MODEL_DIR/mlp.onnx|input=1x784"
  "MLP 784-256-256-10, batch 64|$MODEL_DIR/mlp.onnx|input=64x784"
  "LeNet-5, batch 1|$MODEL_DIR/lenet5.onnx|input=1x1x28x28"
  "LeNet-5, batch 64|$MODEL_DIR/lenet5.onnx|input=64x1x28x28"
  "ResNet-18, batch 1|$MODEL_DIR/resnet18.onnx|input=1x3x224x224"
  "ResNet-18, batch 8|$MODEL_DIR/resnet18.onnx|input=8x3x224x224"
  "squeezenet1_1, batch 2|tests/data/models/squeezenet1_1/model.onnx|input=2x3x224x224"
  "mobilenet_v2, batch 2|tests/data/models/mobilenet_v2/model.onnx|input=2x3x224x224"
)

ort_ready=0
ort_note=""
install_ort() {
  local arch
  case "$(uname -m)" in x86_64) arch=x64 ;; aarch64) arch=arm64 ;; *) arch=$(uname -m) ;; esac
  if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    ort_note="node/npm not found: ONNX Runtime skipped"
    return
  fi
  if [ ! -f "$ORT_DIR/node_modules/onnxruntime-node/package.json" ]; then
    mkdir -p "$ORT_DIR"
    [ -f "$ORT_DIR/package.json" ] || echo '{"name": "capsule-ort-bench", "private": true}' > "$ORT_DIR/package.json"
    echo "installing onnxruntime-node into $ORT_DIR (npm install --ignore-scripts) ..." >&2
    if ! (cd "$ORT_DIR" && timeout 600 npm install --ignore-scripts --no-audit --no-fund onnxruntime-node >&2); then
      ort_note="npm install onnxruntime-node failed (registry unreachable?): ONNX Runtime skipped"
      return
    fi
  fi
  if ! ls "$ORT_DIR"/node_modules/onnxruntime-node/bin/napi-v*/linux/"$arch"/libonnxruntime.so* >/dev/null 2>&1; then
    ort_note="onnxruntime-node has no CPU library for linux/$arch under bin/: ONNX Runtime skipped"
    return
  fi
  ort_ready=1
  ort_note="onnxruntime-node $(node -p "require('./$ORT_DIR/node_modules/onnxruntime-node/package.json').version")"
}
install_ort
export ORT_NODE_MODULES="$PWD/$ORT_DIR"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

median() { sort -g "$1" | awk '{v[NR] = $1} END {if (NR == 0) print "n/a"; else if (NR % 2) printf "%.3f", v[(NR + 1) / 2]; else printf "%.3f", (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (a !~ /^[0-9.]+$/ || b !~ /^[0-9.]+$/ || b == 0) print "n/a"; else printf "%.2fx", a / b}'; }

measured() { [[ " $PROFILES " == *" $1 "* ]]; }

# The timed runs of one `capsule bench --json` (its runs_ms array, one value a line).
ours() {  # PROFILE THREADS MODEL SHAPE
  if ! "$CAPSULE" --threads "$2" bench --profile "$1" "$3" --input-shape "$4" --warmup "$WARMUP" \
      --iterations "$ITERATIONS" --json >"$work/bench.json" 2>"$work/bench.err"; then
    echo "bench_vs_ort: capsule bench --profile $1 $3 failed:" >&2
    cat "$work/bench.err" >&2
    exit 1
  fi
  awk '/"runs_ms": \[/ {f = 1; next} f && /\]/ {f = 0} f {gsub(/[ ,]/, ""); print}' "$work/bench.json"
}

# Same computation: ORT's output against ours on the model's recorded input.
if [ "$ort_ready" = 1 ]; then
  dir=tests/data/models/squeezenet1_1
  for profile in onednn_cpu checked_cpu; do
    "$CAPSULE" run --profile "$profile" --quiet "$dir/model.onnx" --input "input=$dir/input.npy" \
      --output-dir "$work/out-$profile" >/dev/null
    echo "squeezenet1_1 outputs, $profile against ONNX Runtime: $(node tools/bench/ort_bench.mjs check \
      "$dir/model.onnx" 1 "input=$dir/input.npy" "$work/out-$profile/output.npy")"
  done
fi

echo
echo "$ROUNDS interleaved rounds of $WARMUP warm-up + $ITERATIONS timed runs each; medians of the timed runs, ms; $ort_note"
echo
echo "| model | threads | onednn_cpu ms | onednn_cpu_bf16 ms | checked_cpu ms | ORT ms | onednn_cpu / ORT | onednn_cpu_bf16 / ORT | checked_cpu / ORT |"
echo "|---|---|---|---|---|---|---|---|---|"
for entry in "${MODELS[@]}"; do
  IFS='|' read -r name model shape <<<"$entry"
  [[ -z "$ONLY" || "$name" =~ $ONLY ]] || continue
  for t in "${THREADS[@]}"; do
    : >"$work/dnn"; : >"$work/bf16"; : >"$work/ref"; : >"$work/ort"
    for ((r = 0; r < ROUNDS; ++r)); do
      measured onednn_cpu && ours onednn_cpu "$t" "$model" "$shape" >>"$work/dnn"
      measured onednn_cpu_bf16 && ours onednn_cpu_bf16 "$t" "$model" "$shape" >>"$work/bf16"
      measured checked_cpu && ours checked_cpu "$t" "$model" "$shape" >>"$work/ref"
      if [ "$ort_ready" = 1 ]; then
        node tools/bench/ort_bench.mjs time "$model" "$t" "$WARMUP" "$ITERATIONS" "$shape" >>"$work/ort"
      fi
    done
    dnn=$(median "$work/dnn"); bf16=$(median "$work/bf16"); ref=$(median "$work/ref"); ort=$(median "$work/ort")
    echo "| $name | $t | $dnn | $bf16 | $ref | $ort | $(ratio "$dnn" "$ort") | $(ratio "$bf16" "$ort") | $(ratio "$ref" "$ort") |"
  done
done
