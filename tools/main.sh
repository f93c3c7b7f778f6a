#!/usr/bin/env bash
# The main job on its default input: install what is missing (Debian packages, including the
# Fashion-MNIST dataset), build the `capsule` tool and the reference plugin, then train the MLP
# (784-256-256-10) on Fashion-MNIST under the default profile checked_cpu and print the test
# accuracy. Extra arguments go to `capsule train` (e.g. --model lenet --optimizer adam).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
cmake --preset default >/dev/null
cmake --build --preset default --target capsule capsule_reference
./build/bin/capsule train --profile checked_cpu --model mlp --epochs 5 \
  --output build/fashion_mnist_mlp.json "$@"
