#!/usr/bin/env bash
# The README's test command: installs dependencies, builds, and runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/fetch_test_data.sh
./scripts/build.sh
ctest --test-dir build --output-on-failure -j "$(nproc)"
# In CI also the short sanitizer and fuzz suites (docs/RELIABILITY.md): ASan+UBSan on the
# model, engine and server tests, and every fuzzer for 20 s. Locally: scripts/sanitize.sh.
if [ "${CI:-}" = "true" ]; then
  ./scripts/sanitize.sh --short
fi
