#!/usr/bin/env bash
# The README's serve command: installs dependencies, builds, and runs the model.
# Until the HTTP server lands (issue 5) this runs the one-shot generator on the bundled tiny
# model (or on MODEL_DIR, with PROMPT_IDS), so the whole path from checkpoint to tokens works.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/build.sh
MODEL_DIR=${MODEL_DIR:-tests/fixtures/models/qwen2_tiny}
PROMPT_IDS=${PROMPT_IDS:-1,17,42,99,7,256,3}
exec build/bin/vlm-generate --model "$MODEL_DIR" --prompt-ids "$PROMPT_IDS" --max-tokens "${MAX_TOKENS:-16}" "$@"
