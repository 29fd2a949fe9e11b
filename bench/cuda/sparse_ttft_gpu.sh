#!/usr/bin/env bash
# Issue 22's end-to-end GPU run (bench/RESULTS.md, "End to end: TTFT ... dense vs MMInference"),
# from the root of a checkout on the GPU machine with a lean archive of this build:
#   VLM_BUNDLE_BINS="test_cuda bench_cuda_sparse_ttft bench_cuda_sparse_prefill vlm-random-model" \
#     scripts/gpu_bundle.sh build DIR/vlm.tar.xz
#   OUT=/tmp/out bench/cuda/sparse_ttft_gpu.sh DIR/vlm.tar.xz
# Runs, in this order: the sparse GPU tests; (meanwhile) vlm-random-model --preset qwen2-7b;
# bench_cuda_sparse_prefill's mminference-gpu patterns (the one-shot search and the search on the
# first 8K chunk only, their errors against dense); bench_cuda_sparse_ttft at 128K with 8K chunks
# (dense, mminference = the defaults: search once per prompt, long items split; mminference-nosplit;
# mminference-chunk: search every chunk), the same with VLM_CUDA_PROFILE=1 (summed per op by
# sum_step_profile.py), at 128K with 32K chunks (dense, mminference), and 512K with mminference.
# Outputs in $OUT.
# Knobs: SKIP_TESTS, SKIP_KERNEL (set: leave out), TEST_FILTER, KERNEL_LENGTHS, RUNS (';'-separated argument lists
# of bench_cuda_sparse_ttft runs, each may start with VAR=value words for its environment, e.g.
# "VLM_CUDA_SPARSE_KERNEL=mma --lengths 131072 --modes mminference": the mma.sync kernel), PROFILES
# (the same for the profiled runs), VLM_BENCH_HLINE (passed on to bench_cuda_sparse_prefill).
set -u
archive=${1:?usage: sparse_ttft_gpu.sh ARCHIVE}
OUT=${OUT:-/tmp/vlm-sparse-ttft}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
tar -C /tmp -xJf "$archive" || exit 1
export LD_LIBRARY_PATH=/tmp/vlm/lib:/usr/local/cuda/lib64
B=/tmp/vlm/bin
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt"; date -u >> "$OUT/gpu.txt"
( $B/vlm-random-model --out /tmp/m7b --preset qwen2-7b --dtype bf16 --threads 14 > "$OUT/model.txt" 2>&1 ) &
mp=$!
t0=$(date +%s)
stamp() { echo "== $1 at $(( $(date +%s) - t0 )) s" >> "$OUT/log.txt"; }
if [ -z "${SKIP_TESTS:-}" ]; then
  timeout 200 $B/test_cuda --gtest_filter="${TEST_FILTER:-CudaSparsePrefillDecoder.*:CudaBlockSparse*:CudaGrid*:*CudaOps*SiluMul*}" \
    > "$OUT/test_cuda.txt" 2>&1
  echo "rc=$?" >> "$OUT/test_cuda.txt"; stamp tests
fi
if [ -z "${SKIP_KERNEL:-}" ]; then
  VLM_BENCH_PATTERNS=mminference-gpu timeout 150 $B/bench_cuda_sparse_prefill ${KERNEL_LENGTHS:-131072 262144} > "$OUT/kernel.txt" 2>&1
  echo "rc=$?" >> "$OUT/kernel.txt"; stamp kernel
fi
wait $mp
stamp model
T=$B/bench_cuda_sparse_ttft
RUNS=${RUNS:-"--lengths 131072 --modes dense,mminference,mminference-nosplit,mminference-chunk;\
--lengths 131072 --modes dense,mminference --chunk 32768 --warmup 32768;\
--lengths 524288 --modes mminference --warmup 8192"}
PROFILES=${PROFILES-"--lengths 131072 --modes mminference,mminference-nosplit,dense --warmup 4096"}
IFS=';' read -ra runs <<< "$RUNS"
IFS=';' read -ra profiles <<< "$PROFILES"
# Runs entry $2 (leading VAR=value words: its environment) with the environment words $1.
run_entry() {
  local envs=($1) args=() w
  for w in $2; do
    if [ ${#args[@]} -eq 0 ] && [[ $w == [A-Z]*=* ]]; then envs+=("$w"); else args+=("$w"); fi
  done
  env "${envs[@]}" timeout 150 $T --model /tmp/m7b "${args[@]}"
}
for r in "${runs[@]}"; do
  echo "== bench_cuda_sparse_ttft $r"
  run_entry "" "$r"
  echo "rc=$?"; stamp "$r"
done > "$OUT/ttft.txt" 2>&1
for r in "${profiles[@]}"; do
  echo "== VLM_CUDA_PROFILE=1 bench_cuda_sparse_ttft $r"
  run_entry "VLM_CUDA_PROFILE=1" "$r"
  echo "rc=$?"; stamp "profile $r"
done > "$OUT/profile_raw.txt" 2>&1
python3 "$HERE/sum_step_profile.py" "$OUT/profile_raw.txt" > "$OUT/profile.txt"
gzip -f "$OUT/profile_raw.txt"
