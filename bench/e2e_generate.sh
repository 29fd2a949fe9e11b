#!/usr/bin/env bash
# End-to-end prefill and decode speed of vlm-generate on a random-weight model of a real shape.
# Usage: bench/e2e_generate.sh [preset=qwen2-0.5b] [dtype=bf16] [threads=2]
# Needs a build (scripts/build.sh). Writes the model once to /tmp/vlm-bench-<preset>-<dtype>.
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${1:-qwen2-0.5b}; dtype=${2:-bf16}; threads=${3:-2}
model=/tmp/vlm-bench-$preset-$dtype
[ -f "$model/model.safetensors" ] || build/bin/vlm-random-model --out "$model" --preset "$preset" --dtype "$dtype"
ids() { awk -v n="$1" -v s="$2" 'BEGIN { srand(s); for (i = 0; i < n; i++) printf "%s%d", (i ? "," : ""), 100 + int(rand() * 100000) }'; }
for len in 512 2048; do
  for env in "" "env -u OPENBLAS_CORETYPE"; do
    if [ -n "$env" ]; then label="OPENBLAS_CORETYPE unset"; else label="OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}"; fi
    echo "== prompt $len, $label"
    $env build/bin/vlm-generate --model "$model" --prompt-ids "$(ids "$len" "$len")" --max-tokens 64 \
      --threads "$threads" --top-logprobs 0 --ignore-eos 2>&1 >/dev/null
  done
done
