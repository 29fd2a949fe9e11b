#!/usr/bin/env bash
# The README's test command: installs dependencies, builds, and runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/fetch_test_data.sh
./scripts/build.sh
ctest --test-dir build --output-on-failure -j "$(nproc)"
