#!/usr/bin/env bash
# The main job on its default input: set up, build, and plan the bundled example graph under
# checked_cpu, printing the detailed report and the gate result.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
bash tools/build.sh default
./build/bin/capsule plan --profile checked_cpu --detailed examples/mlp.json
