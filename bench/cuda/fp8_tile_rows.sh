#!/bin/bash
# Issue 43's FP8 decode products (fp8_tile_gemm for 5..64 rows, fp8_gemv for 1..4), one GPU call
# (~6 min on an H200), with session 20's opt-in switches off and on:
#  VLM_FP8_SPLITK_FUSED=1 (split products reduce in their own launch), VLM_FP8_TILE_DEEP=1 (the deep
#  pipeline for 17..64 rows), VLM_FP8_GEMV_WIDE=1 (the GEMV's 8 loads a lane in flight, 1..4 rows).
#  1. tests: fp8_tile in its four forms against the naive FP8 GEMM and against each other bitwise
#     (Kernels/CudaFp8Tile.*), the FP8 GEMVs (CudaFp8Gemv.*, the Wide form too), the FP8 regression
#     set, and the FP8 decoder on the fixtures with the switches off and on;
#  2. bench_cuda_fp8_linear, plain (host-enqueued launches, session 19's rows) and --graph (the
#     same rows timed as replays of a captured graph: the decoder's conditions): rows quant+tile(S=..),
#     tile_S<n>, tile_noquant, quant+tile_fused / _deep / _fused_deep, gemv_simple / _wide, beside
#     quant+cublaslt and bf16_cublaslt (GB/s and peak % of 4.8 TB/s);
#  3. bench_cuda_decoder on the Qwen2-7B-shaped config with dummy weights, batches 1 and 64 at 1K:
#     bf16, FP8 default, FP8 with each switch, FP8 with all three, FP8 VLM_FP8_DECODE=old (cuBLASLt).
# Usage: bench/cuda/fp8_tile_rows.sh BIN_DIR OUT_DIR [all|tests|linear|decode]
B=${1:?BIN_DIR}
OUT=${2:?OUT_DIR}
WHAT=${3:-all}
on() { [ "$WHAT" = all ] || [ "$WHAT" = "$1" ]; }
mkdir -p "$OUT"
S=$(date +%s); t() { echo "== $1 at $(( $(date +%s) - S )) s"; }
ALL="VLM_FP8_SPLITK_FUSED=1 VLM_FP8_TILE_DEEP=1 VLM_FP8_GEMV_WIDE=1"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; date -u
if on tests; then
timeout 300 "$B/test_cuda" --gtest_filter='*CudaFp8Tile*:CudaFp8.*:*CudaFp8Gemv.*' > "$OUT/tests.log" 2>&1
echo "tests rc=$?"
grep -E '^\[  (FAILED|PASSED|  SKIPPED) |^\[==========\] [0-9]+ tests|Failure|rel_error|Which is|differ' "$OUT/tests.log" | head -40
for envs in "" "$ALL"; do
  env $envs timeout 150 "$B/test_cuda" --gtest_filter='Models/CudaFp8Decoder.*' > "$OUT/tests_dec.log" 2>&1
  echo "decoder tests (${envs:-switches off}) rc=$?"
  grep -E '^\[  (FAILED|PASSED|  SKIPPED) |^\[==========\] [0-9]+ tests|\[ fp8 \]' "$OUT/tests_dec.log" | head -30
  { echo "# ${envs:-off}"; cat "$OUT/tests_dec.log"; } >> "$OUT/tests_decoder.log"
done
t tests
fi
if on linear; then
timeout 200 "$B/bench_cuda_fp8_linear" --peak 4800 > "$OUT/fp8_linear.txt" 2>&1; echo "fp8 linear rc=$?"
grep -E "M=1 (gemv|bf16_gemv)|M=(8|16|32|64) (quant|tile|bf16_cublaslt)" "$OUT/fp8_linear.txt" | head -300
timeout 200 "$B/bench_cuda_fp8_linear" --peak 4800 --graph > "$OUT/fp8_linear_graph.txt" 2>&1; echo "fp8 linear --graph rc=$?"
grep -E "M=1 (gemv|bf16_gemv)|M=(8|16|32|64) (quant|tile|bf16_cublaslt)" "$OUT/fp8_linear_graph.txt" | sed 's/^fp8lin/graph/' | head -300
t "fp8 linear"
fi
on decode || exit 0
F="$B/bench_cuda_decoder --model bench/cuda/configs/qwen2_vl_7b --load-format dummy --batches 1,64 --context 1024 --steps 64 --prefill 0 --reps 3"
for c in "bf16||" "fp8 default||--quantization fp8" "fp8 fused|VLM_FP8_SPLITK_FUSED=1|--quantization fp8" \
         "fp8 deep|VLM_FP8_TILE_DEEP=1|--quantization fp8" "fp8 gemv wide|VLM_FP8_GEMV_WIDE=1|--quantization fp8" \
         "fp8 all three|$ALL|--quantization fp8" "fp8 old|VLM_FP8_DECODE=old|--quantization fp8"; do
  IFS='|' read -r name envs args <<< "$c"; echo "# $name"
  env $envs timeout 100 $F $args > /tmp/f.txt 2>&1; echo "rc=$?"
  grep -E "^decode|error|fail" /tmp/f.txt; { echo "# $name"; cat /tmp/f.txt; } >> "$OUT/decode_rows.txt"
done
t done
