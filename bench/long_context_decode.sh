#!/usr/bin/env bash
# Whole decode steps at long context (issues 10 and 11): full cache vs LOOK-M 20% vs SinkRouter
# at skip ratios 0/40/60/80 %, at 8K, 32K and 128K context, on a Qwen2-0.5B-shaped model with
# random bf16 weights (vlm-random-model --preset qwen2-0.5b), without prefill: the harness
# (bench/bench_long_context_decode.cpp) fills the paged cache with synthetic K/V and times real
# decode steps, variants interleaved in the same run (one process per context; ratios within a
# context come from one run).
# Usage: bench/long_context_decode.sh [contexts=8192,32768,131072] [reps=5] [threads=2] [extra args...]
# Needs a build (scripts/build.sh). Writes the model once to /tmp/vlm-bench-qwen2-0.5b-bf16.
# Memory: ~1.5 GiB of KV at 128K (bf16) plus the 0.9 GiB of mmapped weights.
set -euo pipefail
cd "$(dirname "$0")/.."
contexts=${1:-8192,32768,131072}; reps=${2:-5}; threads=${3:-2}
shift $(( $# < 3 ? $# : 3 ))
model=/tmp/vlm-bench-qwen2-0.5b-bf16
[ -f "$model/model.safetensors" ] || build/bin/vlm-random-model --out "$model" --preset qwen2-0.5b --dtype bf16
echo "commit $(git rev-parse --short HEAD) ($(git rev-parse --abbrev-ref HEAD)), $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores," \
     "load: $(cut -d' ' -f1-3 /proc/loadavg), OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}"
for L in ${contexts//,/ }; do
  build/bin/bench_long_context_decode --model "$model" --contexts "$L" --reps "$reps" --threads "$threads" "$@"
  echo "load after L=$L: $(cut -d' ' -f1-3 /proc/loadavg)"
done
