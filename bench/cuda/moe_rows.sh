#!/usr/bin/env bash
# Issue 41's MoE rows on one GPU in one call: a Qwen3-30B-A3B-shaped checkpoint of random bf16 weights
# (Qwen3-VL-30B-A3B's decoder), ours beside transformers and llama.cpp's CUDA build on the same weights:
# decode of 1 sequence at 1K context, 64 sequences at 1K, prefill of 8K tokens.
# The checkpoint (~61 GB) and its GGUF (~61 GB) do not fit the one-GPU machine's 64 GiB disk together:
# bench/cuda/make_qwen3moe_random.py draws every tensor from a generator seeded by its name, so the
# safetensors are written, measured and deleted, then the GGUF is written from the same generator
# (its units digest must equal the safetensors'), measured and deleted.
# Phases and the seconds expected on an H200 (one call of 600 s; MOE_ROWS_BUDGET, default 585, is the
# deadline every phase's timeout is cut to):
#   0. read rate: torch.sum over 8 GiB of f32 (the limit the decode rows are read against)      ~10 s
#   1. model.safetensors from the generator (the disk sets the pace, ~1 GB/s)                      ~75 s
#   2. ours: bench_cuda_decoder --batches 1,64 --context 1024 --steps 64 --prefill 8192 --reps 2
#      (load + upload ~35 s, rows ~20 s)                                                            ~60 s
#   3. transformers 5.17: bench/gpu/hf_speed.py, same shapes, 16 decode steps (load ~50 s)         ~110 s
#   4. rm the safetensors; the GGUF from the generator (skipped without LLAMA_BIN)                  ~75 s
#   5. llama.cpp: llama-bench -ngl 99 -fa 1 -p 8192 -n 128 -d 0,1024 -r 2 (pp8192 = prefill 8K,
#      tg128 @ d1024 = decode 1 at 1K; one load), then llama-batched-bench -npp 1024 -ntg 32 -npl 64
#      (S_TG = 64 sequences at 1K; a second load)                                                  ~110 s
#   6. rm the GGUF                                                                                  ~1 s
#   total ~440 s; the llama.cpp build is not in it (do it in an earlier call, e.g.
#   cmake -S llama.cpp -B lb -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a && cmake --build lb -j --target
#   llama-bench llama-batched-bench, then pass lb/bin).
# Usage, from an unpacked scripts/gpu_bundle.sh archive (cd vlm; bin/ holds bench_cuda_decoder):
#   LD_LIBRARY_PATH=$PWD/lib:/usr/local/cuda/lib64 bench/cuda/moe_rows.sh OUTDIR [LLAMA_BIN_DIR]
# MOE_ROWS_WORK: where the checkpoint and the GGUF go (default /tmp/moe-rows; deleted at exit).
# MOE_ROWS_DRY_RUN=1: the same phases on the "tiny" preset with the standard-library generator and no
# GPU: phases 1 and 4 run for real (the GGUF written from the generator must equal bench/hf_to_gguf.py's
# conversion of the safetensors, byte for byte; where $BIN or build/bin has vlm-generate, it generates 4
# tokens from the tiny checkpoint on the CPU), the GPU commands are printed, not run
# (tests/bench/check_qwen3moe_gguf.py runs it on the CPU).
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:-/tmp/moe-rows-out}
llama=${2:-}
dry=${MOE_ROWS_DRY_RUN:-0}
work=${MOE_ROWS_WORK:-/tmp/moe-rows}
start=$(date +%s)
deadline=$((start + ${MOE_ROWS_BUDGET:-585}))
preset=qwen3-30b-a3b; gen=(--backend torch --device cuda)
[ "$dry" = 1 ] && { preset=tiny; gen=(--backend python); }
mkdir -p "$out" "$work"
model=$work/qwen3moe-$preset-random  # the GGUF: $model.gguf (general.name as hf_to_gguf.py would write it)
trap 'rm -rf "$model" "$model.gguf" "$model.gguf.tmp" "$model.gguf.digest"' EXIT
bin=${BIN:-bin}
[ -x "$bin/bench_cuda_decoder" ] || bin=build/bin

# phase NAME CAP_SECONDS CMD...: runs CMD under a timeout of min(CAP, time left), logs its seconds.
phase() {
  local name=$1 cap=$2; shift 2
  local left=$((deadline - $(date +%s)))
  [ "$cap" -gt "$left" ] && cap=$left
  if [ "$cap" -le 5 ]; then echo "== $name: skipped, the call's budget is spent"; return 1; fi
  echo "== $name (timeout ${cap} s, $(( $(date +%s) - start )) s into the call)"
  local t0=$(date +%s) rc=0
  if [ "$dry" = 1 ] && [ "${GPU_PHASE:-0}" = 1 ]; then
    echo "dry run, not run: $*"
  else
    timeout "$cap" "$@" || rc=$?
  fi
  echo "== $name: rc $rc, $(( $(date +%s) - t0 )) s"
  return $rc
}

echo "# bench/cuda/moe_rows.sh $(date -u '+%Y-%m-%d %H:%M UTC') preset $preset; $(git rev-parse --short HEAD 2>/dev/null || cat VERSION 2>/dev/null)"
[ "$dry" = 1 ] || nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
df -BG --output=avail "$work" | tail -1 | sed 's/^/disk free at start: /'

GPU_PHASE=1 phase "0. read rate" 30 python3 -c '
import torch, time
x = torch.ones(2 << 30, device="cuda"); torch.cuda.synchronize()
ts = []
for _ in range(5):
    t = time.perf_counter(); x.sum().item(); ts.append(time.perf_counter() - t)
print(f"read rate: {x.numel() * 4 / min(ts) / 1e9:.0f} GB/s (torch.sum over 8 GiB f32, best of 5)")' 2>&1 | tee "$out/read_rate.txt"

phase "1. safetensors" 150 python3 bench/cuda/make_qwen3moe_random.py --out "$model" --format safetensors \
  --preset "$preset" "${gen[@]}" 2>&1 | tee "$out/make_safetensors.txt"
du -sh "$model" 2>/dev/null
if [ "$dry" = 1 ] && [ -x "$bin/vlm-generate" ]; then  # our loader reads the generator's checkpoint (CPU)
  "$bin/vlm-generate" --model "$model" --device cpu --prompt-ids 1,2,3,4,5 --max-tokens 4 2>&1 |
    grep -E "^generated|rror" | sed 's/^/dry run, ours on the CPU: /'
fi

GPU_PHASE=1 phase "2. ours" 120 "$bin/bench_cuda_decoder" --model "$model" --dtype bfloat16 --batches 1,64 \
  --context 1024 --steps 64 --prefill 8192 --reps 2 2>&1 | tee "$out/ours.txt" | grep -v "^\["

GPU_PHASE=1 phase "3. transformers" 160 python3 bench/gpu/hf_speed.py --model "$model" --batches 1,64 \
  --context 1024 --steps 16 --prefill 8192 --reps 1 2>&1 | tee "$out/hf.txt" | grep -v Warning

if [ -n "$llama" ] || [ "$dry" = 1 ]; then
  [ "$dry" = 1 ] && python3 bench/hf_to_gguf.py "$model" "$work/converted.gguf" >/dev/null
  rm -rf "$model"
  phase "4. gguf" 150 python3 bench/cuda/make_qwen3moe_random.py --out "$model.gguf" --format gguf \
    --preset "$preset" "${gen[@]}" 2>&1 | tee "$out/make_gguf.txt"
  a=$(grep -o "units digest: [0-9a-f]*" "$out/make_safetensors.txt"); b=$(grep -o "units digest: [0-9a-f]*" "$out/make_gguf.txt")
  if [ -n "$a" ] && [ "$a" = "$b" ]; then echo "same weights: the two runs' $a"; else echo "WEIGHTS DIFFER: '$a' vs '$b'"; fi
  if [ "$dry" = 1 ]; then
    cmp "$model.gguf" "$work/converted.gguf" && echo "dry run: the generator's GGUF equals hf_to_gguf.py's conversion"
    rm -f "$work/converted.gguf"
  fi
  GPU_PHASE=1 phase "5a. llama-bench" 90 "$llama/llama-bench" -m "$model.gguf" -ngl 99 -fa 1 -p 8192 -n 128 \
    -d 0,1024 -r 2 2>&1 | tee "$out/llama_bench.txt" | grep -E "^\||error|^==|dry run"
  GPU_PHASE=1 phase "5b. llama-batched-bench" 90 "$llama/llama-batched-bench" -m "$model.gguf" -ngl 99 -fa on \
    -c 69632 -b 2048 -ub 512 -npp 1024 -ntg 32 -npl 64 2>&1 | tee "$out/llama_batched.txt" | grep -E "^\||error|^==|dry run"
else
  echo "== 4-5: no LLAMA_BIN_DIR given: llama.cpp rows skipped"
fi
rm -rf "$model" "$model.gguf" "$model.gguf.digest"
echo "== done in $(( $(date +%s) - start )) s; rows in $out (ours.txt, hf.txt, llama_bench.txt, llama_batched.txt)"
df -BG --output=avail "$work" | tail -1 | sed 's/^/disk free at end: /'
