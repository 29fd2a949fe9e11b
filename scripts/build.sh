#!/usr/bin/env bash
# Configures and builds vlm-server (Release, Ninja) into build/. Executables: build/bin/.
# BUILD_TARGETS="vlm-server ..." builds only those targets (scripts/serve.sh: what serving needs).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-Release} \
  -DVLM_BUILD_TESTS=ON -DVLM_BUILD_BENCH=ON "$@" >/dev/null
# shellcheck disable=SC2086  # the targets are words
cmake --build "$BUILD_DIR" -j "$(nproc)" ${BUILD_TARGETS:+--target $BUILD_TARGETS}
