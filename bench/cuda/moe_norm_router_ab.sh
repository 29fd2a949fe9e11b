#!/usr/bin/env bash
# Issue 41's norm-fused router (session 19, branch moe-router; kernels/cuda/moe/moe_decode.h 1n.)
# on one GPU in one call: its tests (against rms_norm + moe_router_route_sort bit for bit, and the
# naive references), the MoE layer tests with VLM_MOE_NORM_ROUTER=1 and =0, bench_cuda_moe's rows
# (random bf16 weights it makes itself), then the Qwen3-30B-A3B-shaped step (dummy weights) with
# the switch alternated (1, 0, 1, 0). ~4 min on an H200 (the decoder's load ~35 s per run).
# A win: "kernel norm_router_route_sort form=fused" us well below "form=separate" at T=1 (the
# brief's target ~4-5 us against ~13.5 = rms_norm 3.05 + router 10.5 on the timeline), "decode
# graph form=norm_fused" below "form=norm_sep", and the step's "decode batch 1" ms below the =0
# runs (~3.60 ms in session 19; 48 layers x ~8 us saved would be ~0.4 ms). Batch 64 does not take
# the fused router (T > 8): its rows must not move.
# Usage, from a build tree's bin/ folder: bench/cuda/moe_norm_router_ab.sh BIN OUTDIR
set -uo pipefail
BIN=$(cd "${1:?BIN folder (test_cuda, bench_cuda_moe, bench_cuda_decoder)}" && pwd) || exit 2
mkdir -p "${2:?OUTDIR}" || exit 2
OUT=$(cd "$2" && pwd) || exit 2
cd "$(dirname "$0")/../.." || exit 2
"$BIN/test_cuda" --gtest_filter='CudaMoeNormRouter.*:CudaMoeDecode.*' 2>&1 | tail -30 | tee "$OUT/t_norm_router.log"
for on in 1 0; do
  VLM_MOE_NORM_ROUTER=$on "$BIN/test_cuda" --gtest_filter='*CudaMoeLayer*:CudaMoe.*' 2>&1 | tail -5 |
    tee "$OUT/t_layer_norm_router_$on.log"
done
"$BIN/bench_cuda_moe" --tokens 1,2,4,8 --peak 4430 2>&1 | tee "$OUT/bench_moe.txt" | grep -E "router|decode"
for on in 1 0 1 0; do
  echo "# VLM_MOE_NORM_ROUTER=$on" | tee -a "$OUT/decoder.txt"
  VLM_MOE_NORM_ROUTER=$on "$BIN/bench_cuda_decoder" --model bench/cuda/configs/qwen3_30b_a3b --load-format dummy \
    --batches 1,64 --context 1024 --steps 64 --prefill 0 --reps 2 2>&1 | grep -E "^decode" | tee -a "$OUT/decoder.txt"
done
