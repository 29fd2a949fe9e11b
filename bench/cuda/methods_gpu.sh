#!/usr/bin/env bash
# Issue 23's GPU run (bench/RESULTS.md, "GPU: SinkRouter and LOOK-M at long context"), from the
# root of a checkout on the GPU machine with a lean archive of this build beside it:
#   VLM_BUNDLE_BINS="test_cuda bench_cuda_sink_router bench_cuda_long_decode vlm-random-model" \
#     scripts/gpu_bundle.sh build DIR/vlm.tar.xz
#   OUT=/tmp/out bench/cuda/methods_gpu.sh DIR/vlm.tar.xz
# Runs: HF's bf16 logits for the closeness tests, test_cuda, bench_cuda_sink_router, and (while those
# run) vlm-random-model --preset qwen2-7b, then bench_cuda_long_decode on it. Outputs in $OUT.
# Knobs: SKIP_TESTS, SKIP_HF, SKIP_MODEL (set: leave that part out), TEST_FILTER (gtest filter),
# LONG_ARGS (extra bench_cuda_long_decode flags), LONG_TIMEOUT (seconds, default 200),
# CALIB_PROMPTS (a file of token-id prompts: then vlm-calibrate-sink --device cuda on the model too).
set -u
archive=${1:?usage: methods_gpu.sh ARCHIVE}
OUT=${OUT:-/tmp/vlm-methods-gpu}
mkdir -p "$OUT"
tar -C /tmp -xJf "$archive" || exit 1
export LD_LIBRARY_PATH=/tmp/vlm/lib:/usr/local/cuda/lib64
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/gpu.txt"; date -u >> "$OUT/gpu.txt"
( [ -n "${SKIP_MODEL:-}" ] || /tmp/vlm/bin/vlm-random-model --out /tmp/m7b --preset qwen2-7b --dtype bf16 --threads 14 \
    > "$OUT/model.txt" 2>&1 ) &
mp=$!
t0=$(date +%s)
if [ -z "${SKIP_TESTS:-}" ]; then
  [ -n "${SKIP_HF:-}" ] || timeout 90 python3 bench/gpu/hf_bf16_logits.py tests/fixtures/models /tmp/hfbf16 > "$OUT/hf.txt" 2>&1
  VLM_HF_BF16_DIR=/tmp/hfbf16 timeout 150 /tmp/vlm/bin/test_cuda ${TEST_FILTER:+--gtest_filter=$TEST_FILTER} \
    > "$OUT/test_cuda.txt" 2>&1
  echo "rc=$? after $(( $(date +%s) - t0 )) s" >> "$OUT/test_cuda.txt"
fi
timeout 90 /tmp/vlm/bin/bench_cuda_sink_router > "$OUT/bench_attn.txt" 2>&1
echo "rc=$? after $(( $(date +%s) - t0 )) s" >> "$OUT/bench_attn.txt"
wait $mp
if [ -z "${SKIP_MODEL:-}" ]; then
  # shellcheck disable=SC2086  # LONG_ARGS are words
  timeout "${LONG_TIMEOUT:-200}" /tmp/vlm/bin/bench_cuda_long_decode --model /tmp/m7b ${LONG_ARGS:-} > "$OUT/long.txt" 2>&1
  echo "rc=$? after $(( $(date +%s) - t0 )) s" >> "$OUT/long.txt"
  if [ -n "${CALIB_PROMPTS:-}" ]; then
    timeout 90 /tmp/vlm/bin/vlm-calibrate-sink --device cuda --model /tmp/m7b --prompts "$CALIB_PROMPTS" \
      --prompt-format ids --lengths 1024,4096 --decode-steps 4 --out "$OUT/sink_router.json" > "$OUT/calib.txt" 2>&1
    echo "rc=$? after $(( $(date +%s) - t0 )) s" >> "$OUT/calib.txt"
  fi
fi
grep -E "FAILED|PASSED|rc=" "$OUT/test_cuda.txt" 2>/dev/null | head -30
cat "$OUT/bench_attn.txt" "$OUT/long.txt" "$OUT/calib.txt" 2>/dev/null
