#!/usr/bin/env bash
# Engine decode throughput: decode tokens/s for 1, 4 and 16 parallel sequences through the
# continuous-batching engine (vlm-generate --parallel N), measured side by side in one run,
# repetitions interleaved (1, 4, 16, 1, 4, 16, ...); prints the median of each.
# Model: random bf16 weights in the Qwen2-0.5B shape (vlm-random-model), bf16 KV cache, 32-token
# prompts (a different one per sequence), 64 generated tokens each, greedy, no logprobs.
# "Decode" counts only the steps that ran no prefill (all sequences decoding together).
# Usage: bench/engine_decode.sh [reps=3] [threads=2] [kv_dtype=bf16]
# Needs a build (scripts/build.sh). Writes the model once to /tmp/vlm-bench-qwen2-0.5b-bf16.
set -euo pipefail
cd "$(dirname "$0")/.."
reps=${1:-3}; threads=${2:-2}; kv=${3:-bf16}
model=/tmp/vlm-bench-qwen2-0.5b-bf16
[ -f "$model/model.safetensors" ] || build/bin/vlm-random-model --out "$model" --preset qwen2-0.5b --dtype bf16
prompt_args=""
for s in $(seq 1 16); do
  ids=$(awk -v n=32 -v s="$s" 'BEGIN { srand(s); for (i = 0; i < n; i++) printf "%s%d", (i ? "," : ""), 100 + int(rand() * 100000) }')
  prompt_args="$prompt_args --prompt-ids $ids"
done
echo "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}, threads $threads, KV $kv, $(date -u '+%Y-%m-%d %H:%M UTC'), load: $(cut -d' ' -f1-3 /proc/loadavg)"
declare -A rates
for rep in $(seq 1 "$reps"); do
  for n in 1 4 16; do
    line=$(build/bin/vlm-generate --model "$model" $prompt_args --parallel "$n" --max-tokens 64 --ignore-eos \
             --no-logprobs --threads "$threads" --kv-dtype "$kv" 2>&1 >/dev/null | grep '^decode steps')
    rate=$(sed -E 's/.*= ([0-9.]+) tokens\/s/\1/' <<<"$line")
    echo "rep $rep, N=$n: $line"
    rates[$n]="${rates[$n]:-} $rate"
  done
done
echo
echo "| parallel sequences | decode tokens/s (median of $reps) | per sequence | all runs |"
echo "| ---: | ---: | ---: | --- |"
for n in 1 4 16; do
  med=$(tr ' ' '\n' <<<"${rates[$n]}" | grep . | sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }')
  per=$(awk -v m="$med" -v n="$n" 'BEGIN { printf "%.1f", m / n }')
  echo "| $n | $med | $per |${rates[$n]} |"
done
