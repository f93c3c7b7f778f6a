#!/usr/bin/env bash
# Packs what tools/gpu_check.sh needs on a GPU machine into gpu-bundle/ (ignored by git): the
# built `capsule` and `capsule_tests` (stripped), the native CUDA and reference plugins with their
# manifests, the Debian libraries those link (not the CUDA ones: the GPU machine brings its own
# runtime, cuBLAS and cuDNN), and Fashion-MNIST. The GPU machine's image has no Debian packages
# and no network, so nothing is built there. About 55 MB, under the device tool's 64 MiB carry.
#
#   bash tools/build.sh default && bash tools/gpu_bundle.sh
#   then, through the device tool: run `bash tools/gpu_check.sh` with carry ["gpu-bundle"]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
OUT=gpu-bundle
for f in "$BUILD/bin/capsule" "$BUILD/bin/capsule_tests" "$BUILD/bin/plugins/libcapsule_native_cuda.so"; do
  [ -f "$f" ] || { echo "gpu_bundle: $f is missing; build first (bash tools/build.sh default)" >&2; exit 2; }
done
grep -qx '/gpu-bundle/' .git/info/exclude 2>/dev/null || echo '/gpu-bundle/' >> .git/info/exclude
rm -rf "$OUT"
mkdir -p "$OUT/bin/plugins" "$OUT/lib" "$OUT/fashion-mnist"
strip -o "$OUT/bin/capsule" "$BUILD/bin/capsule"
strip -o "$OUT/bin/capsule_tests" "$BUILD/bin/capsule_tests"
strip -o "$OUT/bin/libcapsule_onnx_import.so" "$BUILD/bin/libcapsule_onnx_import.so"  # `capsule` loads it for .onnx
for p in native_cuda reference; do
  strip -o "$OUT/bin/plugins/libcapsule_$p.so" "$BUILD/bin/plugins/libcapsule_$p.so"
  cp "$BUILD/bin/plugins/$p.capsule.json" "$OUT/bin/plugins/"
done
# Every shared library of those files that is neither glibc's, the C++ runtime's nor CUDA's.
for f in "$OUT"/bin/capsule "$OUT"/bin/capsule_tests "$OUT"/bin/*.so "$OUT"/bin/plugins/*.so; do
  ldd "$f" | awk '$3 ~ /^\// {print $3}'
done | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|libgcc_s.so*|libstdc++.so*|ld-linux*) ;;
    libcuda*|libcublas*|libcudnn*|libnv*) ;;
    *) cp -L "$lib" "$OUT/lib/" ;;
  esac
done
# libstdc++ too: the GPU image's may be older than Debian 12's GCC 12 one.
cp -L "$(g++ -print-file-name=libstdc++.so.6)" "$OUT/lib/"
cp /usr/share/datasets/fashion-mnist/*.gz "$OUT/fashion-mnist/" 2>/dev/null ||
  echo "gpu_bundle: no Fashion-MNIST here (apt-get install dataset-fashion-mnist); the training check will skip" >&2
du -sh "$OUT"
