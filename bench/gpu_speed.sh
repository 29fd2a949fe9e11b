#!/usr/bin/env bash
# GPU speed of the CUDA backend (issue 20) beside Hugging Face transformers, in one run on one GPU:
#  0. a Qwen2-7B-shaped checkpoint with random bf16 weights (vlm-random-model --preset qwen2-7b,
#     15.2 GB), made here, with the Qwen3 tokenizer for the served run;
#  1. bench_cuda_decoder: decode of 1 and 64 sequences at 1K context (ms/step, tokens/s; CUDA
#     graphs, then again eagerly), prefill of 8K and 32K tokens (tokens/s);
#  2. bench/gpu/hf_speed.py: transformers (bf16, SDPA) on the same checkpoint and shapes;
#  3. served: vlm-server --device cuda, vlm-bench 256 prompts of 1024 tokens in / 128 out at
#     concurrency 64 (throughput, TTFT/TPOT percentiles).
# Run from an unpacked scripts/gpu_bundle.sh archive (README.md, "On a GPU"):
#   cd vlm && LD_LIBRARY_PATH=$PWD/lib:/usr/local/cuda/lib64 bench/gpu_speed.sh [OUTDIR] [sections=0123]
# VLM_SPEED_FP8=1: section 1 runs its graph rows (decode 1 and 64 at 1K, prefill 8K and 32K) again with
# --quantization fp8 right after the bf16 ones, in the same call (issue 43: FP8 vs bf16 side by side;
# the lines of the FP8 run follow a "# fp8" line in vlm_speed.txt).
# VLM_SPEED_KV_FP8=1: decode 1 and 8 at 32K context (no prefill rows) with a bf16 cache then
# --kv-cache-dtype fp8, after a "# kv fp8" line (issue 43 item 2: FP8 KV vs bf16 KV, one call).
# VLM_DUMP_LOGITS=FILE: section 1's graph run also writes bench_cuda_decoder --dump-logits FILE
# (each configuration's last step's logits, raw f32: old vs new binaries compared with cmp, issue 39).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-/tmp/vlm-gpu-speed}; sections=${2:-0123}
mkdir -p "$out"
# VLM_SPEED_PRESET: the vlm-random-model preset (qwen2-7b; qwen3-8b for issue 40's rows;
# qwen3-30b-a3b for issue 41's MoE rows: ~61 GB of bf16 weights, so it needs a machine with more
# than 64 GiB of disk (nvidia-h200-x2: its runs use one GPU) and its runs get 400 s each unless
# VLM_BENCH_TIMEOUT says otherwise; targets: decode 1 seq at 1K <= 3.0 ms/token, 64 seqs >= 3,800
# tok/s, prefill 8K >= 40K tok/s). On the one-GPU machine (64 GiB disk) bench/cuda/moe_rows.sh makes
# those rows instead, with transformers and llama.cpp on the same weights, one file on the disk at a time.
preset=${VLM_SPEED_PRESET:-qwen2-7b}
default_timeout=150; [ "$preset" = qwen3-30b-a3b ] && default_timeout=400
tmo=${VLM_BENCH_TIMEOUT:-$default_timeout}
model=/tmp/vlm-$preset-bf16
echo "# bench/gpu_speed.sh $(date -u '+%Y-%m-%d %H:%M UTC'); $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader)"
if [[ $sections == *0* && ! -f $model/config.json ]]; then
  t0=$(date +%s)
  tok=(); [ -f tokenizer/tokenizer.json ] && tok=(--tokenizer-from tokenizer)
  bin/vlm-random-model --out "$model" --preset "$preset" --dtype bf16 --threads "$(nproc)" "${tok[@]}" || exit 1
  echo "model written in $(( $(date +%s) - t0 )) s: $(du -sh "$model" | cut -f1)"
fi
if [[ $sections == *1* ]]; then
  dump=(); [ -n "${VLM_DUMP_LOGITS:-}" ] && dump=(--dump-logits "$VLM_DUMP_LOGITS")
  timeout $tmo bin/bench_cuda_decoder --model "$model" --dtype bfloat16 --batches 1,64 --context 1024 --steps 64 \
    --prefill 8192,32768 --reps 2 "${dump[@]}" 2>&1 | tee "$out/vlm_speed.txt" | grep -v "^\[" || echo "bench_cuda_decoder failed"
  if [[ ${VLM_SPEED_FP8:-0} == 1 ]]; then
    echo "# fp8" | tee -a "$out/vlm_speed.txt"
    timeout ${VLM_BENCH_TIMEOUT:-150} bin/bench_cuda_decoder --model "$model" --dtype bfloat16 --batches 1,64 --context 1024 --steps 64 \
      --prefill 8192,32768 --reps 2 --quantization fp8 2>&1 | tee -a "$out/vlm_speed.txt" | grep -v "^\[" || echo "bench_cuda_decoder (fp8) failed"
  fi
  if [[ ${VLM_SPEED_KV_FP8:-0} == 1 ]]; then
    echo "# kv fp8" | tee -a "$out/vlm_speed.txt"
    for kv in auto fp8; do
      timeout ${VLM_BENCH_TIMEOUT:-150} bin/bench_cuda_decoder --model "$model" --dtype bfloat16 --batches 1,8 \
        --context 32768 --steps 32 --prefill 0 --kv-cache-dtype $kv 2>&1 | tee -a "$out/vlm_speed.txt" | grep -v "^\[" ||
        echo "bench_cuda_decoder (kv $kv) failed"
    done
  fi
  # The same decode steps without CUDA graphs (--enforce-eager 1), for the graphs' share.
  timeout $tmo bin/bench_cuda_decoder --model "$model" --dtype bfloat16 --batches 1,64 --context 1024 --steps 64 \
    --prefill 0 --enforce-eager 1 2>&1 | tee -a "$out/vlm_speed.txt" | grep "^decode" || echo "bench_cuda_decoder (eager) failed"
fi
if [[ $sections == *2* ]]; then
  timeout $tmo python3 bench/gpu/hf_speed.py --model "$model" --batches 1,64 --context 1024 --steps 16 \
    --prefill 8192,32768 --reps 1 2>&1 | tee "$out/hf_speed.txt" | grep -v Warning || echo "hf_speed failed"
fi
if [[ $sections == *3* ]]; then
  port=8019
  bin/vlm-server --model "$model" --device cuda --dtype bfloat16 --port $port --max-num-seqs 64 \
    --max-num-batched-tokens 8192 --max-model-len 4096 --gpu-memory-utilization 0.9 --log-level warn \
    > "$out/server.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 "$tmo"); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
    kill -0 $pid 2>/dev/null || break
    sleep 1
  done
  timeout $tmo bin/vlm-bench --base-url "http://127.0.0.1:$port" --endpoint completions --prompt-ids \
    --dataset random --num-prompts 256 --input-len 1024 --output-len 128 --max-concurrency 64 --warmup 4 \
    --percentiles 50,90,99 --timeout 140 --result-json "$out/served.json" --no-progress 2>&1 | tee "$out/served.txt"
  kill $pid 2>/dev/null; wait $pid 2>/dev/null
  tail -5 "$out/server.log"
fi
