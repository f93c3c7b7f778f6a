#!/usr/bin/env bash
# Installs every build and test dependency from Debian's packages. Idempotent: packages already
# present are skipped, and apt-get runs only when something is missing.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config ccache
  nlohmann-json3-dev libsimdjson-dev libspdlog-dev libfmt-dev libboost-dev libcli11-dev nettle-dev
  libgtest-dev libgmock-dev libbenchmark-dev zlib1g-dev dataset-fashion-mnist
  libonnx-dev libonnx-testdata libprotobuf-dev protobuf-compiler libdnnl-dev
  clang-14 libclang-rt-14-dev libtorch-dev libcpp-httplib-dev libgrpc++-dev protobuf-compiler-grpc
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all dependencies present"
fi
