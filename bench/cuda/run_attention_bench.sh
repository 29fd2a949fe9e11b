#!/usr/bin/env bash
# On the GPU machine: the CUDA attention tests, then bench_cuda_attention (the default kernels,
# then the prefill shapes through the other Hopper kernels (wgmma without warp specialization,
# warp-specialized without pingpong) and the mma.sync kernel, then ours beside cuDNN's fused
# attention) and torch SDPA (FlashAttention
# backend) on the same shapes, one after the other in this one call.
# Usage: bench/cuda/run_attention_bench.sh BIN_DIR [LOG_DIR]
#   BIN_DIR holds test_cuda and bench_cuda_attention (LD_LIBRARY_PATH set by the caller).
set -uo pipefail
BIN=${1:?bin dir}
LOG=${2:-.}
HERE=$(cd "$(dirname "$0")" && pwd)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee "$LOG/gpu.txt"
"$BIN/test_cuda" --gtest_filter='CudaAttention*' 2>&1 | tee "$LOG/test.log" | tail -25
"$BIN/bench_cuda_attention" 2>&1 | tee "$LOG/bench_ours.log"
echo "wgmma prefill kernel, all threads load and compute (VLM_CUDA_PREFILL_KERNEL=wgmma):" | tee -a "$LOG/bench_ours.log"
VLM_CUDA_PREFILL_KERNEL=wgmma "$BIN/bench_cuda_attention" prefill 2>&1 | tee -a "$LOG/bench_ours.log"
echo "warp-specialized wgmma prefill kernel without pingpong (VLM_CUDA_PREFILL_KERNEL=ws):" | tee -a "$LOG/bench_ours.log"
VLM_CUDA_PREFILL_KERNEL=ws "$BIN/bench_cuda_attention" prefill 2>&1 | tee -a "$LOG/bench_ours.log"
echo "mma.sync prefill kernel (VLM_CUDA_PREFILL_KERNEL=mma):" | tee -a "$LOG/bench_ours.log"
VLM_CUDA_PREFILL_KERNEL=mma "$BIN/bench_cuda_attention" prefill 2>&1 | tee -a "$LOG/bench_ours.log"
echo "cuDNN's fused flash attention (CudnnAttention) beside ours, prefill shapes:" | tee -a "$LOG/bench_ours.log"
"$BIN/bench_cuda_attention" cudnn 2>&1 | tee -a "$LOG/bench_ours.log"
python3 "$HERE/sdpa_attention.py" 2>&1 | tee "$LOG/bench_sdpa.log"
