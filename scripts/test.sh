#!/usr/bin/env bash
# The README's test command: installs dependencies, builds, and runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/fetch_test_data.sh
./scripts/build.sh
ctest --test-dir build --output-on-failure -j "$(nproc)"
# In CI also the short hardening suite (docs/RELIABILITY.md): an ASan+UBSan build (clang 14) of
# test_model, test_engine and test_server, run with leak detection, and the libFuzzer targets
# replaying their regression inputs and fuzzing 20 s each; any report fails CI. Locally, and
# for the TSan suite: scripts/sanitize.sh.
# Then a short soak: 200 streaming requests plus 100 misbehaving clients against the demo model
# (tools/soak/soak.py: no crash, 0 KV blocks in use, each request ended once, RSS bound).
if [ "${CI:-}" = "true" ]; then
  ./scripts/sanitize.sh --short
  python3 tools/soak/soak.py --bin-dir build/bin --requests 200 --concurrency 16 --misbehave 100
fi
