#!/usr/bin/env bash
# Issue 39's GPU gate (docs/WRITTEN_ONCE.md, steps 4 and 5b): the same benchmarks from two unpacked
# scripts/gpu_bundle.sh archives, OLD (the code before a refactor) and NEW, alternated on one
# Qwen2-7B-shaped random bf16 checkpoint, each writing its outputs raw (bench_cuda_decoder
# --dump-logits, bench_cuda_vision --dump); then cmp of the dumps (the same kernels in the same
# order must give the same bits) and each row's new/old speed. Prints PASS/FAIL per check.
# Usage (on the GPU machine): bench/cuda/compare_bundles.sh OLD_DIR NEW_DIR [OUT_DIR] [parts=dv]
#   OLD_DIR, NEW_DIR: unpacked bundles (bin/ with bench_cuda_decoder, bench_cuda_vision,
#   vlm-random-model; lib/). OLD_DIR may hold bin/ only (the same libraries: the device tool
#   carries 64 MiB, two whole bundles do not fit). parts: d = decoder, v = vision (OLD's binary
#   against NEW's). Dumps stay in /tmp (GBs).
set -uo pipefail
old=${1:?old bundle dir}; new=${2:?new bundle dir}; out=${3:-/tmp/compare_bundles}; parts=${4:-dv}
mkdir -p "$out"
model=/tmp/vlm-qwen2-7b-bf16
run() {  # run BUNDLE_DIR BINARY ARGS...: with the bundle's own libraries (NEW's when it has none)
  local dir=$1; shift
  local lib=$dir/lib; [ -d "$lib" ] || lib=$new/lib
  LD_LIBRARY_PATH="$lib:/usr/local/cuda/lib64" "$dir/bin/$@"
}
status=0
check() {  # check NAME A B: cmp of two dumps
  if cmp -s "$2" "$3"; then echo "PASS $1: identical ($(stat -c %s "$2") bytes)"
  else echo "FAIL $1: the dumps differ ($(cmp "$2" "$3" 2>&1 | head -1))"; status=1; fi
}
ratios() {  # ratios NAME OLD_LOG NEW_LOG: each timing line's new/old (lower is better for ms)
  python3 - "$1" "$2" "$3" <<'PY'
import re, sys
name, a, b = sys.argv[1:]
def rows(path):
    out = {}
    for line in open(path):
        m = re.match(r'^(decode batch \d+ context \d+): ([0-9.]+) ms/step', line)
        if m: out[m.group(1)] = (float(m.group(2)), 'ms'); continue
        m = re.match(r'^(prefill \d+ tokens): .*?([0-9.]+) tokens/s', line)
        if m: out[m.group(1)] = (float(m.group(2)), 'tok/s'); continue
        m = re.match(r'^(vision \S+ \S+) ([0-9.]+) ms', line)
        if m: out[m.group(1)] = (float(m.group(2)), 'ms')
    return out
ra, rb = rows(a), rows(b)
for k in ra:
    if k in rb:
        (va, unit), (vb, _) = ra[k], rb[k]
        speed = va / vb if unit == 'ms' else vb / va   # > 1: new is faster
        print(f"{name} {k}: old {va} new {vb} {unit}, new speed {speed:.3f}x old {'PASS' if speed >= 0.97 else 'SLOWER'}")
PY
}
if [[ $parts == *d* ]]; then
  [ -f $model/config.json ] || run "$new" vlm-random-model --out $model --preset qwen2-7b --dtype bf16 --threads "$(nproc)" >/dev/null || exit 1
  args=(--model $model --dtype bfloat16 --batches 1,64 --context 1024 --steps 64 --prefill 8192,32768 --reps 2)
  for i in 1 2; do  # old, new, old, new: the pair's spread is the noise
    run "$old" bench_cuda_decoder "${args[@]}" --dump-logits /tmp/dec_old_$i.f32 > "$out/dec_old_$i.log" 2>&1
    run "$new" bench_cuda_decoder "${args[@]}" --dump-logits /tmp/dec_new_$i.f32 > "$out/dec_new_$i.log" 2>&1
  done
  check "decoder logits old vs new" /tmp/dec_old_1.f32 /tmp/dec_new_1.f32
  check "decoder logits old run to run" /tmp/dec_old_1.f32 /tmp/dec_old_2.f32
  for i in 1 2; do ratios "decoder run $i" "$out/dec_old_$i.log" "$out/dec_new_$i.log"; done
fi
if [[ $parts == *v* ]]; then
  for i in 1 2; do
    run "$old" bench_cuda_vision --reps 10 --dump /tmp/vis_old_$i.f32 > "$out/vis_old_$i.log" 2>&1
    run "$new" bench_cuda_vision --reps 10 --dump /tmp/vis_new_$i.f32 > "$out/vis_new_$i.log" 2>&1
  done
  check "vision rows old vs new" /tmp/vis_old_1.f32 /tmp/vis_new_1.f32
  check "vision rows old run to run" /tmp/vis_old_1.f32 /tmp/vis_old_2.f32
  for i in 1 2; do ratios "vision run $i" "$out/vis_old_$i.log" "$out/vis_new_$i.log"; done
fi
exit $status
