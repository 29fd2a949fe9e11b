#!/usr/bin/env bash
# Issue 41's MoE decode forms on one GPU in one call (session 19, branch moe-down): the tests of the
# staged pair GEMVs (kernels/cuda/moe/moe_decode.h 2'. and 3'.), the layer test under each
# VLM_MOE_DECODE, one layer kernel by kernel (bench_cuda_moe: random bf16 weights it makes itself,
# no checkpoint), then the whole Qwen3-30B-A3B-shaped step (dummy weights made on the host) with
# the forms alternated. ~4-6 min on an H200 (the decoder's load ~35 s per form).
#   VLM_MOE_DECODE unset: fused router, pair gate|up, STAGED down+combine (the proposed default)
#   VLM_MOE_DECODE=v1: the same with session 18's warp-per-output down (3.)
#   VLM_MOE_DECODE=staged: staged gate|up too (2'.)
#   VLM_MOE_DECODE=old: the five launches (router GEMV, route+sort, mma gate|up, mma down, combine)
# A win: "kernel down_combine form=staged" us below "form=pair" (session 18: 14.67 us, 39 %) at T=1,
# "decode graph form=new" below "form=v1", and the step's "decode batch 1" ms below v1's (session
# 18: 3.597-3.600 ms). Batch 64 does not take these forms (pair GEMVs: T = 1 only).
# Usage, from a build tree's bin/ folder or an unpacked gpu bundle: bench/cuda/moe_decode_ab.sh BIN OUTDIR
set -uo pipefail
BIN=$(cd "${1:?BIN folder (test_cuda, bench_cuda_moe, bench_cuda_decoder)}" && pwd) || exit 2
mkdir -p "${2:?OUTDIR}" || exit 2
OUT=$(cd "$2" && pwd) || exit 2
cd "$(dirname "$0")/../.." || exit 2
"$BIN/test_cuda" --gtest_filter='CudaMoeDecode.*:CudaMoe.*:CudaMoeGemv.*:*CudaMoeLayer*' 2>&1 | tail -40 | tee "$OUT/t_moe.log"
for form in v1 staged old; do
  VLM_MOE_DECODE=$form "$BIN/test_cuda" --gtest_filter='*CudaMoeLayer*' 2>&1 | tail -5 | tee "$OUT/t_layer_$form.log"
done
"$BIN/bench_cuda_moe" --tokens 1,2,4,8 --peak 4430 2>&1 | tee "$OUT/bench_moe.txt" | grep -E "pair|staged|decode"
for form in new v1 new v1 staged old; do
  echo "# $form" | tee -a "$OUT/decoder.txt"
  env VLM_MOE_DECODE="$([ "$form" = new ] && echo "" || echo "$form")" "$BIN/bench_cuda_decoder" \
    --model bench/cuda/configs/qwen3_30b_a3b --load-format dummy --batches 1,64 --context 1024 --steps 64 \
    --prefill 0 --reps 2 2>&1 | grep -E "^decode" | tee -a "$OUT/decoder.txt"
done
