#!/usr/bin/env bash
# Issues 42/43's 72B rows in one call: a Qwen2-VL-72B-shaped decoder (bench/cuda/configs/
# qwen2_vl_72b/config.json: 80 layers x 8192, 64/8 heads, MLP 29568, vocabulary 152064, untied head)
# with --load-format dummy (no checkpoint on disk: the 146 GB of bf16 weights are made on the host
# from config.json, one layer's tensors at a time; under TP each rank makes only its slices, so a
# TP=2 load makes ~146 GB + the replicated 2.5 GB embedding, not 2 x 146 GB) and, by default,
# --quantization fp8 (quantized on the GPU as they arrive): decode of 1 and of 64 sequences at 1K
# context. Prints the load time (the weights' making included), the GiB on each GPU, and ms/step and
# tokens/s of each row (bench_cuda_decoder's lines). Expected on an H200: load ~60-120 s (the host
# makes ~146 GB at a few GB/s per core), rows ~30 s; the budget (BIG_ROWS_BUDGET, default 585 s)
# caps the whole call.
# BIG_ROWS_TP=N: --tensor-parallel-size N (GPUs 0..N-1; default 1). BIG_ROWS_QUANT=none: bf16
# weights (default fp8).
# Memory plans (per GPU; --gpu-memory-utilization 0.9 of an H200's ~140 GiB = ~126 GiB):
#  - FP8, TP=1 (tests/model/decoder/test_dummy_weights.cpp, Qwen2VL72BFitsOneH200InFp8): ~75 GB of
#    FP8 decoder weights with the bf16 LM head and embedding, ~23 GB of bf16 KV cache for 64 x 1.1K.
#  - bf16, TP=2 (does not fit one H200): layers 80 x 877.6M params / 2 = 35.1B -> 70.2 GB, the
#    embedding replicated 2.5 GB, the LM head's vocabulary half 1.25 GB: ~74 GB (69 GiB) of weights
#    per GPU; KV per token per GPU 2 x 80 layers x 4 KV heads x 128 x 2 B = 160 KiB, so 64 x 1.1K
#    tokens are ~11 GiB and the ~55 GiB left after weights and activations hold ~350K tokens.
#  - FP8, TP=2: ~35 GB of FP8 layers + 3.75 GB bf16 embedding / head half per GPU.
# Usage, from the repository root with an unpacked GPU bundle (scripts/gpu_bundle.sh) in /tmp/vlm:
#   BIN=/tmp/vlm/bin LD_LIBRARY_PATH=/tmp/vlm/lib:/usr/local/cuda/lib64 bench/cuda/big_rows.sh [OUTDIR]
#   72B bf16 on two GPUs:  BIG_ROWS_TP=2 BIG_ROWS_QUANT=none BIN=... bench/cuda/big_rows.sh /tmp/big-bf16-tp2
#   72B FP8 on two GPUs:   BIG_ROWS_TP=2 BIN=... bench/cuda/big_rows.sh /tmp/big-fp8-tp2
# BIG_ROWS_FLAGS: more bench_cuda_decoder flags (e.g. "--kv-cache-dtype fp8" or "--steps 16");
# BIG_ROWS_MODEL: another config directory (e.g. a 7B one for a quick check).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
bin=${BIN:-bin}
[ -x "$bin/bench_cuda_decoder" ] || bin=build/bin
out=${1:-/tmp/big-rows-out}
model=${BIG_ROWS_MODEL:-bench/cuda/configs/qwen2_vl_72b}
tp=${BIG_ROWS_TP:-1}
quant=${BIG_ROWS_QUANT:-fp8}
case "$quant" in fp8|none) ;; *) echo "big_rows: BIG_ROWS_QUANT=$quant (fp8 or none)" >&2; exit 2 ;; esac
case "$tp" in ''|*[!0-9]*|0) echo "big_rows: BIG_ROWS_TP=$tp (a GPU count >= 1)" >&2; exit 2 ;; esac
mkdir -p "$out"
start=$(date +%s)
echo "== big_rows: $model, --load-format dummy --quantization $quant --tensor-parallel-size $tp, $(date -u +%FT%TZ)"
nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv,noheader 2>/dev/null || true
echo "host: $(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GiB memory"
# shellcheck disable=SC2086
timeout "${BIG_ROWS_BUDGET:-585}" "$bin/bench_cuda_decoder" --model "$model" --load-format dummy --quantization "$quant" \
  --tensor-parallel-size "$tp" --batches 1,64 --context 1024 --steps 32 --prefill 0 ${BIG_ROWS_FLAGS:-} 2>&1 | tee "$out/big_rows.log"
rc=${PIPESTATUS[0]}
[ "$rc" = 124 ] && echo "big_rows: timed out after ${BIG_ROWS_BUDGET:-585} s"
echo "== big_rows: rc=$rc, $(( $(date +%s) - start )) s in all"
exit "$rc"
