#!/usr/bin/env bash
# On the GPU machine: the GPU vision tests, then bench_cuda_vision and transformers'
# Qwen2-VL-7B vision tower (bench/cuda/hf_vision_encode.py) on the same shapes, one after the
# other in this one call (bench/RESULTS.md, "GPU vision encoders").
# Usage: bench/cuda/run_vision_bench.sh BIN_DIR [LOG_DIR] [DUMP_FILE]
#   BIN_DIR holds test_cuda and bench_cuda_vision (LD_LIBRARY_PATH set by the caller).
#   DUMP_FILE: bench_cuda_vision --dump DUMP_FILE (every shape's output rows, raw f32, ~0.9 GB:
#   old vs new binaries compared with cmp, issue 39); keep it out of the device tool's $OUT.
#   The transformers peer times the Qwen2-VL shapes only (CLIP/SigLIP rows have no peer yet).
set -uo pipefail
BIN=${1:?bin dir}
LOG=${2:-.}
DUMP=(); [ -n "${3:-}" ] && DUMP=(--dump "$3")
HERE=$(cd "$(dirname "$0")" && pwd)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$LOG/gpu.txt"
"$BIN/test_cuda" --gtest_filter='*Vision*:*Varlen*:*CudaEngine*' 2>&1 | tee "$LOG/test.log" | grep -E "gpu vision|PASSED|FAILED"
"$BIN/bench_cuda_vision" --reps 10 "${DUMP[@]}" 2>&1 | tee "$LOG/bench_ours.log"
python3 "$HERE/hf_vision_encode.py" --reps 10 2>&1 | tee "$LOG/bench_hf.log"
