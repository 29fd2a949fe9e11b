#!/usr/bin/env bash
# Configures and builds vlm-server (Release, Ninja) into build/. Executables: build/bin/.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-Release} \
  -DVLM_BUILD_TESTS=ON -DVLM_BUILD_BENCH=ON "$@" >/dev/null
cmake --build "$BUILD_DIR" -j "$(nproc)"
