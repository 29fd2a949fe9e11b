#!/usr/bin/env bash
# On the GPU machine: the block-sparse attention tests, then bench_cuda_sparse_prefill and torch
# SDPA (FlashAttention backend) causal prefill on the same lengths, one after the other in this one call.
# Usage: bench/cuda/run_sparse_prefill_bench.sh BIN_DIR LOG_DIR [S ...]
#   BIN_DIR holds test_cuda and bench_cuda_sparse_prefill (LD_LIBRARY_PATH set by the caller).
set -uo pipefail
BIN=${1:?bin dir}
LOG=${2:?log dir}
shift 2
LENS=${*:-131072 262144 524288}
HERE=$(cd "$(dirname "$0")" && pwd)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee "$LOG/gpu.txt"
"$BIN/test_cuda" --gtest_filter="${VLM_TEST_FILTER:-CudaBlockSparse*:CudaGridSearch*:CudaGridPlan*:CudaAttention.Prefill*}" 2>&1 | tee "$LOG/test.log" | tail -15
# shellcheck disable=SC2086  # the lengths are words
"$BIN/bench_cuda_sparse_prefill" $LENS 2>&1 | tee "$LOG/bench_ours.log"
# shellcheck disable=SC2086
python3 "$HERE/sdpa_attention.py" prefill $LENS 2>&1 | tee "$LOG/bench_sdpa.log"
