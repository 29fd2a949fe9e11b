#!/bin/bash
# Session 19's FP8 wgmma product (fp8_tile_gemm, VLM_FP8_DECODE=tile; issue 43's 64 sequences), one
# GPU call (~5 min on an H200):
#  1. tests: fp8_tile against the naive FP8 GEMM (Kernels/CudaFp8Tile.*),
#     the FP8 regression set, and the FP8 decoder on the fixtures with VLM_FP8_DECODE=tile;
#  2. bench_cuda_fp8_linear: rows quant+tile(S=..) and tile_S<n> beside quant+cublaslt
#     and bf16_cublaslt (GB/s and peak % of 4.8 TB/s);
#  3. bench_cuda_decoder on the Qwen2-7B config with dummy weights, batches 1 and 64 at 1K: bf16,
#     FP8 default paths (tile since call B), FP8 VLM_FP8_DECODE=old (cuBLASLt).
# Usage: bench/cuda/fp8_tile_rows.sh BIN_DIR OUT_DIR [all|tests|linear|decode]
B=${1:?BIN_DIR}
OUT=${2:?OUT_DIR}
WHAT=${3:-all}
on() { [ "$WHAT" = all ] || [ "$WHAT" = "$1" ]; }
mkdir -p "$OUT"
S=$(date +%s); t() { echo "== $1 at $(( $(date +%s) - S )) s"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; date -u
if on tests; then
timeout 240 "$B/test_cuda" --gtest_filter='*CudaFp8Tile*:CudaFp8.*:*CudaFp8Gemv.*' > "$OUT/tests.log" 2>&1
echo "tests rc=$?"
grep -E '^\[  (FAILED|PASSED|  SKIPPED) |^\[==========\] [0-9]+ tests|Failure|rel_error|Which is' "$OUT/tests.log" | head -40
VLM_FP8_DECODE=tile timeout 150 "$B/test_cuda" --gtest_filter='Models/CudaFp8Decoder.*' > "$OUT/tests_tile.log" 2>&1
echo "decoder tests (tile) rc=$?"
grep -E '^\[  (FAILED|PASSED|  SKIPPED) |^\[==========\] [0-9]+ tests|\[ fp8 \]' "$OUT/tests_tile.log" | head -30
t tests
fi
if on linear; then
timeout 200 "$B/bench_cuda_fp8_linear" --peak 4800 > "$OUT/fp8_linear.txt" 2>&1; echo "fp8 linear rc=$?"
grep -E "M=(8|16|32|64) (quant|tile|bf16_cublaslt)" "$OUT/fp8_linear.txt" | head -200
t "fp8 linear"
fi
on decode || exit 0
F="$B/bench_cuda_decoder --model bench/cuda/configs/qwen2_vl_7b --load-format dummy --batches 1,64 --context 1024 --steps 64 --prefill 0 --reps 2"
for c in "bf16||" "fp8 default (tile)||--quantization fp8" "fp8 old|VLM_FP8_DECODE=old|--quantization fp8"; do
  IFS='|' read -r name envs args <<< "$c"; echo "# $name"
  env $envs timeout 100 $F $args > /tmp/f.txt 2>&1; echo "rc=$?"
  grep -E "^decode|error|fail" /tmp/f.txt; { echo "# $name"; cat /tmp/f.txt; } >> "$OUT/decode_rows.txt"
done
t done
