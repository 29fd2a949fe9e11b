#!/bin/bash
# Issue 43's FP8 decode rows with the lt-tune knob (session 17), one GPU call (~6 min on an H200):
#  1. the tests of cuBLASLt autotuning, and the FP8 / cuBLASLt regression set;
#  2. bench_cuda_fp8_linear (heuristic-first vs autotuned cuBLASLt per shape, rows lt_*), --verbose:
#     each shape's candidates and choice in the log;
#  3. bench_cuda_decoder on a Qwen2-7B-shaped random bf16 checkpoint, batches 1 and 64 at 1K: bf16 and
#     FP8 weights, each with VLM_CUBLASLT_AUTOTUNE off / on.
# (Session 17's split-K FP8 GEMV, VLM_FP8_GEMV_SPLIT, was removed in session 18; its rows are in
# bench/RESULTS.md, session 17.)
# Usage: bench/cuda/fp8_decode_rows.sh BIN_DIR OUT_DIR [all|tests|linear|decode]
#   (BIN_DIR: the bundle's bin, e.g. /tmp/vlm/bin). Seconds on an H200, roughly: tests ~150, linear
#   ~90, decode ~200 (5 runs of bench_cuda_decoder, ~40 s each): "all" may not fit one 600 s call.
B=${1:?BIN_DIR}
OUT=${2:?OUT_DIR}
WHAT=${3:-all}
on() { [ "$WHAT" = all ] || [ "$WHAT" = "$1" ]; }
mkdir -p "$OUT"
S=$(date +%s); t() { echo "== $1 at $(( $(date +%s) - S )) s"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; date -u
on decode && ( timeout 150 "$B/vlm-random-model" --out /tmp/q2 --preset qwen2-7b --dtype bf16 --threads 8 > /tmp/q2.log 2>&1
  echo "q2 rc=$?" >> /tmp/q2.log ) &
if on tests; then
timeout 240 "$B/test_cuda" --gtest_filter='CudaLtAutotune.*:CudaFp8.*:*CudaFp8Gemv.*:*CudaOps.CublasLt*:*CudaFp8Mma*' \
  > "$OUT/tests.log" 2>&1; echo "tests rc=$?"
grep -E '^\[  (FAILED|PASSED|  SKIPPED) |^\[==========\] [0-9]+ tests' "$OUT/tests.log" | head -20
# The FP8 decoder against the fixtures with the knob on (the real decode steps: graphs, autotuning
# in the eager step before each capture).
VLM_CUBLASLT_AUTOTUNE=1 timeout 150 "$B/test_cuda" --gtest_filter='Models/CudaFp8Decoder.*' \
  > "$OUT/tests_knobs.log" 2>&1; echo "decoder tests (knobs on) rc=$?"
grep -E '^\[  (FAILED|PASSED|  SKIPPED) |^\[==========\] [0-9]+ tests' "$OUT/tests_knobs.log" | head -20
t tests
fi
if on linear; then
timeout 120 "$B/bench_cuda_fp8_linear" --peak 4800 --verbose > "$OUT/fp8_linear.txt" 2>&1; echo "fp8 linear rc=$?"
grep -E "lt_|autotune shapes" "$OUT/fp8_linear.txt" | grep -v "cuBLASLt autotune" | head -120
t "fp8 linear"
fi
on decode || exit 0
while ! grep -q "q2 rc" /tmp/q2.log; do sleep 2; done; tail -1 /tmp/q2.log
F="$B/bench_cuda_decoder --model /tmp/q2 --dtype bfloat16 --batches 1,64 --context 1024 --steps 64 --prefill 0 --reps 2"
for c in "bf16||" "bf16 autotune|VLM_CUBLASLT_AUTOTUNE=1|" "fp8||--quantization fp8" \
         "fp8 autotune|VLM_CUBLASLT_AUTOTUNE=1|--quantization fp8" "bf16 again||"; do
  IFS='|' read -r name envs args <<< "$c"; echo "# $name"
  env $envs timeout 80 $F $args > /tmp/f.txt 2>&1; echo "rc=$?"
  grep -E "^decode|error|fail" /tmp/f.txt; { echo "# $name"; cat /tmp/f.txt; } >> "$OUT/decode_rows.txt"
done
t done
