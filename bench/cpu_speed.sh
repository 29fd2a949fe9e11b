#!/usr/bin/env bash
# CPU speed of the whole engine (issue 12) on a Qwen2-0.5B-shaped model with random bf16 weights
# (tools/vlm-random-model --preset qwen2-0.5b --dtype bf16), through tools/vlm-generate:
#  1. prompt tokens/s at 512, 2048 and 8192 tokens (prefill in chunks of 512, one generated
#     token) with --dtype bfloat16 (the default --dtype auto for this bf16 checkpoint: the AVX512-BF16 dot-product GEMM) and, at
#     512/2048, with --dtype float32 (exact: OpenBLAS on f32-converted
#     panels), side by side;
#  Sections 2 and 3 run with --dtype bfloat16 too (at M >= 16 rows: the 16-sequence row).
#  2. generation tokens/s after a prompt of ~0 (8 tokens), 4096 and 32736 tokens (32 tokens
#     generated, so the last one sees the model's whole 32768-token window; only steps without
#     prefill count);
#  3. aggregate generation tokens/s for 1, 4 and 16 parallel sequences (32-token prompts, 64
#     generated tokens each, all decoding together).
# bf16 KV cache, greedy, no logprobs, --ignore-eos. Every run is bounded by `timeout` (default
# 590 s); a run that times out prints "timeout" instead of a rate.
# Usage: bench/cpu_speed.sh [threads=2] [sections=123] [long=1]
#   long=0 skips the 8192 prefill and the 32768 context.
# Needs a build (scripts/build.sh). Writes the model once to /tmp/vlm-bench-qwen2-0.5b-bf16.
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${1:-2}; sections=${2:-123}; long=${3:-1}
limit=${CPU_SPEED_TIMEOUT:-590}
model=/tmp/vlm-bench-qwen2-0.5b-bf16
[ -f "$model/model.safetensors" ] || build/bin/vlm-random-model --out "$model" --preset qwen2-0.5b --dtype bf16
ids() { awk -v n="$1" -v s="$2" 'BEGIN { srand(s); for (i = 0; i < n; i++) printf "%s%d", (i ? "," : ""), 100 + int(rand() * 100000) }'; }
# gen ARGS... -> vlm-generate's summary lines (stderr), or "timeout"
gen() {
  timeout "$limit" build/bin/vlm-generate --model "$model" --threads "$threads" --kv-dtype bf16 \
    --no-logprobs --ignore-eos "$@" 2>&1 >/dev/null || echo "timeout or failure (rc $?)"
}
prefill_rate() {  # prompt_len summary -> tokens/s
  awk -v n="$1" '/^prefill steps:/ { printf "%.1f", n / $3; found = 1 } END { if (!found) printf "n/a" }' <<<"$2"
}
decode_rate() {
  sed -nE 's/^decode steps.*= ([0-9.]+) tokens\/s/\1/p' <<<"$1" | grep . || echo n/a
}

echo "# bench/cpu_speed.sh: threads $threads, $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD)," \
     "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}, load: $(cut -d' ' -f1-3 /proc/loadavg)"

if [[ $sections == *1* ]]; then
  echo
  echo "| prompt tokens | bf16 activations: prefill s | tokens/s | f32 activations: prefill s | tokens/s |"
  echo "| ---: | ---: | ---: | ---: | ---: |"
  lens="512 2048"; [ "$long" = 1 ] && lens="$lens 8192"
  for len in $lens; do
    p=$(ids "$len" "$len")
    out_b=$(gen --prompt-ids "$p" --max-tokens 1 --dtype bfloat16)
    rb=$(prefill_rate "$len" "$out_b"); sb=$(awk '/^prefill steps:/ { print $3 }' <<<"$out_b")
    if [ "$len" -le 2048 ]; then
      out_f=$(gen --prompt-ids "$p" --max-tokens 1 --dtype float32)
      rf=$(prefill_rate "$len" "$out_f"); sf=$(awk '/^prefill steps:/ { print $3 }' <<<"$out_f")
    else
      rf="-"; sf="-"
    fi
    echo "| $len | ${sb:-n/a} | $rb | ${sf:-n/a} | $rf |"
  done
fi

if [[ $sections == *2* ]]; then
  echo
  echo "| context (prompt tokens) | generation tokens/s (32 tokens) | prefill s |"
  echo "| ---: | ---: | ---: |"
  ctxs="8 4096"; [ "$long" = 1 ] && ctxs="$ctxs 32736"
  ids_file=$(mktemp); trap 'rm -f "$ids_file"' EXIT
  for ctx in $ctxs; do
    ids "$ctx" "$((ctx + 1))" >"$ids_file"  # a file: 32K ids exceed one argument's size limit
    out=$(gen --prompt-ids "@$ids_file" --max-tokens 32 --dtype bfloat16)
    echo "| $ctx | $(decode_rate "$out") | $(awk '/^prefill steps:/ { print $3 }' <<<"$out") |"
  done
fi

if [[ $sections == *3* ]]; then
  prompt_args=()
  for s in $(seq 1 16); do prompt_args+=(--prompt-ids "$(ids 32 "$s")"); done
  echo
  echo "| parallel sequences | aggregate generation tokens/s | per sequence | same with --dtype float32 |"
  echo "| ---: | ---: | ---: | ---: |"
  for n in 1 4 16; do
    r=$(decode_rate "$(gen "${prompt_args[@]}" --parallel "$n" --max-tokens 64 --dtype bfloat16)")
    rf="same path"  # fewer than kBf16DotMinM = 16 rows never take the bf16 path
    [ "$n" -ge 16 ] && rf=$(decode_rate "$(gen "${prompt_args[@]}" --parallel "$n" --max-tokens 64 --dtype float32)")
    echo "| $n | $r | $(awk -v r="$r" -v n="$n" 'BEGIN { if (r + 0 > 0) printf "%.1f", r / n; else print "n/a" }') | $rf |"
  done
fi
