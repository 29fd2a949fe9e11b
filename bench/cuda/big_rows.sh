#!/usr/bin/env bash
# Issue 43's 72B rows on one H200 in one call: a Qwen2-VL-72B-shaped decoder (bench/cuda/configs/
# qwen2_vl_72b/config.json: 80 layers x 8192, 64/8 heads, MLP 29568, vocabulary 152064) with
# --load-format dummy (no checkpoint on disk: the 146 GB of bf16 weights are made on the host from
# config.json, one layer's tensors at a time, and quantized to FP8 on the GPU as they arrive) and
# --quantization fp8: decode of 1 and of 64 sequences at 1K context. Prints the load time (the
# weights' making included), the GiB on the GPU, and ms/step and tokens/s of each row
# (bench_cuda_decoder's lines). Expected on an H200: load ~60-120 s (the host makes ~146 GB at a
# few GB/s per core), rows ~30 s; the budget (BIG_ROWS_BUDGET, default 585 s) caps the whole call.
# The memory plan it checks (tests/model/decoder/test_dummy_weights.cpp, Qwen2VL72BFitsOneH200InFp8):
# ~75 GB of FP8 decoder weights with the bf16 LM head and embedding, ~23 GB of bf16 KV cache for
# 64 x 1.1K tokens.
# Usage, from the repository root with an unpacked GPU bundle (scripts/gpu_bundle.sh) in /tmp/vlm:
#   BIN=/tmp/vlm/bin LD_LIBRARY_PATH=/tmp/vlm/lib:/usr/local/cuda/lib64 bench/cuda/big_rows.sh [OUTDIR]
# BIG_ROWS_FLAGS: more bench_cuda_decoder flags (e.g. "--kv-cache-dtype fp8" or "--steps 16");
# BIG_ROWS_MODEL: another config directory (e.g. a 7B one for a quick check).
set -uo pipefail
cd "$(dirname "$0")/../.."
bin=${BIN:-bin}
[ -x "$bin/bench_cuda_decoder" ] || bin=build/bin
out=${1:-/tmp/big-rows-out}
model=${BIG_ROWS_MODEL:-bench/cuda/configs/qwen2_vl_72b}
mkdir -p "$out"
start=$(date +%s)
echo "== big_rows: $model, --load-format dummy --quantization fp8, $(date -u +%FT%TZ)"
nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv,noheader 2>/dev/null || true
echo "host: $(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GiB memory"
# shellcheck disable=SC2086
timeout "${BIG_ROWS_BUDGET:-585}" "$bin/bench_cuda_decoder" --model "$model" --load-format dummy --quantization fp8 \
  --batches 1,64 --context 1024 --steps 32 --prefill 0 ${BIG_ROWS_FLAGS:-} 2>&1 | tee "$out/big_rows.log"
rc=${PIPESTATUS[0]}
[ "$rc" = 124 ] && echo "big_rows: timed out after ${BIG_ROWS_BUDGET:-585} s"
echo "== big_rows: rc=$rc, $(( $(date +%s) - start )) s in all"
exit "$rc"
