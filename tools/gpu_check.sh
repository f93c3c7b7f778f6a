#!/usr/bin/env bash
# Every GPU check of issue 14 in one run, on a machine with an NVIDIA GPU, from gpu-bundle/
# (tools/gpu_bundle.sh, made on the build machine). Writes its log to $OUT/gpu_check.log when OUT
# is set (the device tool), else to gpu_check.log. Steps never stop the script: each reports its
# exit code, and the summary at the end lists them.
#   1. the device and the plugin's probe (nvidia-smi, `capsule plugins`)
#   2. the CUDA unit tests (capsule_tests --gtest_filter='Cuda*': values against host references,
#      backward kernels against finite differences)
#   3. the shared conformance cases (`capsule verify native_cuda`)
#   4. squeezenet1_1 and mobilenet_v2 under checked_cuda against checked_cpu (1e-4 relative)
#   5. `capsule train --profile checked_cuda --model lenet` (1 epoch) against checked_cpu
#   6. latency: `capsule bench` under checked_cuda, and PyTorch on the same GPU when importable
set -uo pipefail
cd "$(dirname "$0")/.."
B=$PWD/gpu-bundle
LOG=${OUT:-.}/gpu_check.log
exec > >(tee "$LOG") 2>&1
[ -x "$B/bin/capsule" ] || { echo "gpu_check: gpu-bundle/ is missing; run tools/gpu_bundle.sh where the project builds"; exit 2; }

# The CUDA libraries: the toolkit's, else those of the Python packages (nvidia-*-cu13).
CUDA_LIBS=
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib; do [ -d "$d" ] && CUDA_LIBS="$CUDA_LIBS:$d"; done
for m in cudnn cublas cuda_runtime; do
  d=$(python3 -c "import nvidia.$m, os; print(os.path.join(list(nvidia.$m.__path__)[0], 'lib'))" 2>/dev/null) && CUDA_LIBS="$CUDA_LIBS:$d"
done
export LD_LIBRARY_PATH="$B/lib$CUDA_LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# The tests look for the sources and plugins where the build machine had them.
SRC=$(grep -a -o -m1 '/[[:alnum:]_./-]*/tests/built_plugins.hpp' "$B/bin/capsule_tests" | head -n1 |
  sed 's|/tests/built_plugins.hpp||')
if [ -n "$SRC" ] && [ ! -e "$SRC" ]; then mkdir -p "$(dirname "$SRC")" && ln -s "$PWD" "$SRC"; fi
mkdir -p build/bin && [ -e build/bin/plugins ] || ln -s "$B/bin/plugins" build/bin/plugins

WORK=${TMPDIR:-/tmp}/gpu-check-out  # outputs of the runs (not sent back: $OUT takes few files)
mkdir -p "$WORK"
declare -a SUMMARY
step() {  # step NAME COMMAND...: runs it, records its exit code
  local name=$1; shift
  echo; echo "=== $name: $*"
  local start=$SECONDS
  "$@"; local rc=$?
  SUMMARY+=("$name: exit $rc ($((SECONDS - start)) s)")
}
C="$B/bin/capsule"

step device nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
step plugins "$C" plugins
step unit-tests "$B/bin/capsule_tests" --gtest_filter='Cuda*' --gtest_brief=1
step conformance "$C" verify --plugin native_cuda

compare() {  # compare MODEL: outputs under checked_cuda against checked_cpu, 1e-4 relative
  local dir=tests/data/models/$1 work=$WORK/$1
  mkdir -p "$work/cpu" "$work/cuda"
  "$C" run --quiet --profile checked_cpu "$dir/model.onnx" --input "input=$dir/input.npy" --output-dir "$work/cpu" &&
    "$C" run --quiet --profile checked_cuda "$dir/model.onnx" --input "input=$dir/input.npy" --output-dir "$work/cuda" &&
    python3 - "$work" <<'PY'
import glob, os, sys
import numpy as np
work = sys.argv[1]
worst = 0.0
for cpu in sorted(glob.glob(os.path.join(work, "cpu", "*.npy"))):
    a, b = np.load(cpu), np.load(os.path.join(work, "cuda", os.path.basename(cpu)))
    rel = float(np.max(np.abs(a - b)) / max(np.max(np.abs(a)), 1e-30))
    worst = max(worst, rel)
    print(f"{os.path.basename(cpu)}: max |cuda - cpu| / max |cpu| = {rel:.3g}")
sys.exit(0 if worst <= 1e-4 else 1)
PY
}
step squeezenet compare squeezenet1_1
step mobilenet compare mobilenet_v2

train() {  # train PROFILE: one epoch of LeNet-5 on Fashion-MNIST
  [ -f "$B/fashion-mnist/train-images-idx3-ubyte.gz" ] || { echo "no Fashion-MNIST in the bundle"; return 77; }
  "$C" train --profile "$1" --model lenet --epochs 1 --optimizer adam --lr 0.002 --data "$B/fashion-mnist" \
    --output "$WORK/lenet-$1.json"
}
step train-cuda train checked_cuda
step train-cpu train checked_cpu

bench() {  # bench MODEL SHAPE
  "$C" bench --profile checked_cuda "$1" --input-shape "input=$2" --warmup 10 --iterations 50
}
[ -f build/bench-models/resnet18.onnx ] || python3 tools/bench/make_models.py build/bench-models >/dev/null 2>&1
# tests/data/models/mobilenet_v2 is fixed at batch 2: torchvision's, exported with a free batch.
python3 - "$WORK/mobilenet_v2.onnx" <<'PY' >/dev/null 2>&1
import sys, torch, torchvision
model = torchvision.models.mobilenet_v2().eval()
torch.onnx.export(model, torch.randn(1, 3, 224, 224), sys.argv[1], input_names=["input"], output_names=["output"],
                  dynamic_axes={"input": {0: "N"}, "output": {0: "N"}}, opset_version=13, dynamo=False)
PY
for shape in 1x3x224x224 32x3x224x224; do
  [ -f build/bench-models/resnet18.onnx ] && step "bench-resnet18-$shape" bench build/bench-models/resnet18.onnx "$shape"
  [ -f "$WORK/mobilenet_v2.onnx" ] && step "bench-mobilenet-$shape" bench "$WORK/mobilenet_v2.onnx" "$shape"
done
step bench-mobilenet-fixed-batch-2 bench tests/data/models/mobilenet_v2/model.onnx 2x3x224x224
torch_bench() {
  python3 - <<'PY'
import time, torch, torchvision
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
for name in ("resnet18", "mobilenet_v2"):
    model = getattr(torchvision.models, name)().eval().cuda()
    for batch in (1, 32):
        x = torch.randn(batch, 3, 224, 224, device="cuda")
        with torch.no_grad():
            for _ in range(10): model(x)
            torch.cuda.synchronize()
            times = []
            for _ in range(50):
                t = time.perf_counter(); model(x); torch.cuda.synchronize(); times.append(time.perf_counter() - t)
        times.sort()
        print(f"PyTorch {torch.__version__} {name} batch {batch}: median {1e3 * times[len(times) // 2]:.3f} ms (fp32, no TF32)")
PY
}
step torch-bench torch_bench

echo; echo "=== summary"
printf '%s\n' "${SUMMARY[@]}"
