#!/usr/bin/env bash
# Capsule under libtorch_forward_cpu (every node a LibTorch capsule, groups of them one call)
# against LibTorch running the same model as TorchScript directly (tools/bench/torchscript_bench.cpp),
# in interleaved rounds: issue 13's measure of the plugin boundary's per-call overhead. The models
# (LeNet-5 at batch 64, ResNet-18 at batch 1) come from tools/bench/torchscript_models.py, which
# writes each as TorchScript and as ONNX from one PyTorch module. A developer tool: CI does not
# run it (it needs python3-torch to write the models).
#
#   bash tools/bench_vs_torchscript.sh [THREADS ...]      default: 1 2
#
# Environment: ROUNDS (default 5), WARMUP (default 3), ITERATIONS (default 10) as in
# tools/bench_vs_ort.sh; PROFILES (default "libtorch_forward_cpu") the Capsule profiles measured;
# CAPSULE (default build/bin/capsule); MODEL_DIR (default build/torchscript-models); PYTHON
# (default /usr/bin/python3, with python3-torch). Reported: medians over every timed run, in ms.
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS=("$@")
[ ${#THREADS[@]} -gt 0 ] || THREADS=(1 2)
ROUNDS=${ROUNDS:-5}
WARMUP=${WARMUP:-3}
ITERATIONS=${ITERATIONS:-10}
PROFILES=${PROFILES:-libtorch_forward_cpu}
CAPSULE=${CAPSULE:-build/bin/capsule}
MODEL_DIR=${MODEL_DIR:-build/torchscript-models}
PYTHON=${PYTHON:-/usr/bin/python3}
RUNNER=$MODEL_DIR/torchscript_bench
for n in "${THREADS[@]}" "$ROUNDS" "$WARMUP" "$ITERATIONS"; do
  [[ "$n" =~ ^[0-9]+$ ]] || { echo "bench_vs_torchscript: '$n' is not a count" >&2; exit 2; }
done
[ -x "$CAPSULE" ] || { echo "bench_vs_torchscript: $CAPSULE not found; build first" >&2; exit 2; }
if [ ! -f "$MODEL_DIR/resnet18.pt" ]; then
  "$PYTHON" tools/bench/torchscript_models.py "$MODEL_DIR" ||
    { echo "bench_vs_torchscript: writing the models failed; apt-get install python3-torch" >&2; exit 2; }
fi
if [ ! -x "$RUNNER" ] || [ tools/bench/torchscript_bench.cpp -nt "$RUNNER" ]; then
  echo "compiling $RUNNER ..." >&2
  g++ -std=c++17 -O2 -o "$RUNNER" tools/bench/torchscript_bench.cpp -I/usr/include/torch/csrc/api/include \
    -ltorch -ltorch_cpu -lc10 ||
    { echo "bench_vs_torchscript: compiling the TorchScript runner failed (libtorch-dev?)" >&2; exit 2; }
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
median() { sort -g "$1" | awk '{v[NR] = $1} END {if (NR == 0) print "n/a"; else if (NR % 2) printf "%.3f", v[(NR + 1) / 2]; else printf "%.3f", (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (a !~ /^[0-9.]+$/ || b !~ /^[0-9.]+$/ || b == 0) print "n/a"; else printf "%.2fx", a / b}'; }
ours() {  # PROFILE THREADS MODEL SHAPE
  "$CAPSULE" --threads "$2" bench --profile "$1" "$3" --input-shape "$4" --warmup "$WARMUP" \
    --iterations "$ITERATIONS" --json >"$work/bench.json" 2>"$work/bench.err" ||
    { echo "bench_vs_torchscript: capsule bench --profile $1 $3 failed:" >&2; cat "$work/bench.err" >&2; exit 1; }
  awk '/"runs_ms": \[/ {f = 1; next} f && /\]/ {f = 0} f {gsub(/[ ,]/, ""); print}' "$work/bench.json"
}

# name | model stem | input shape
MODELS=("LeNet-5, batch 64|lenet5|input=64x1x28x28" "ResNet-18, batch 1|resnet18|input=1x3x224x224")

# Same computation: each runtime's output against PyTorch's on the recorded input.
for entry in "${MODELS[@]}"; do
  IFS='|' read -r name stem _ <<<"$entry"
  for profile in $PROFILES; do
    "$CAPSULE" run --profile "$profile" --quiet "$MODEL_DIR/$stem.onnx" --input "input=$MODEL_DIR/$stem.input.npy" \
      --output-dir "$work/out" >/dev/null
    got=$("$PYTHON" -c "import numpy as np, sys; print('%.3g' % abs(np.load(sys.argv[1]) - np.load(sys.argv[2])).max())" \
      "$work/out/output.npy" "$MODEL_DIR/$stem.output.npy")
    echo "$name: $profile max |output - PyTorch| = $got; TorchScript: $("$RUNNER" "$MODEL_DIR/$stem.pt" \
      "$MODEL_DIR/$stem.input.npy" 1 --check "$MODEL_DIR/$stem.output.npy")"
  done
done

echo
echo "$ROUNDS interleaved rounds of $WARMUP warm-up + $ITERATIONS timed runs each; medians of the timed runs, ms"
echo
header="| model | threads | TorchScript (LibTorch) |"
rule="|---|---|---|"
for profile in $PROFILES; do header+=" Capsule $profile | ratio |"; rule+="---|---|"; done
echo "$header"
echo "$rule"
for entry in "${MODELS[@]}"; do
  IFS='|' read -r name stem shape <<<"$entry"
  for t in "${THREADS[@]}"; do
    : >"$work/torchscript"
    for profile in $PROFILES; do : >"$work/$profile"; done
    for ((r = 0; r < ROUNDS; ++r)); do
      "$RUNNER" "$MODEL_DIR/$stem.pt" "$MODEL_DIR/$stem.input.npy" "$t" "$WARMUP" "$ITERATIONS" >>"$work/torchscript"
      for profile in $PROFILES; do ours "$profile" "$t" "$MODEL_DIR/$stem.onnx" "$shape" >>"$work/$profile"; done
    done
    peer=$(median "$work/torchscript")
    row="| $name | $t | $peer |"
    for profile in $PROFILES; do
      m=$(median "$work/$profile")
      row+=" $m | $(ratio "$m" "$peer") |"
    done
    echo "$row"
  done
done
