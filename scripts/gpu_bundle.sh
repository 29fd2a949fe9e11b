#!/usr/bin/env bash
# Packs the CUDA build for a GPU machine: the executables built under build/bin (vlm-server,
# vlm-bench, vlm-generate, vlm-random-model, bench_cuda_decoder, test_cuda; whichever exist),
# the shared libraries they need that a stock CUDA image lacks (everything ldd resolves except
# glibc, libstdc++/libgcc and the CUDA libraries, which the image has under
# /usr/local/cuda/lib64), bench/gpu_speed.sh with its Python peers, and the Qwen3 tokenizer the
# served benchmark uses (tests/data/tokenizers/qwen3, from scripts/fetch_test_data.sh) into
# build/vlm-gpu-bundle.tar.xz (must stay under 60 MiB; ~15 MiB). README.md ("On a GPU") says how to run it.
# Usage: scripts/gpu_bundle.sh [build-dir] [out-archive]
#   VLM_BUNDLE_BINS="test_cuda bench_cuda_attention" packs only those executables of build/bin
#   (a smaller archive for one test or benchmark; the FFmpeg libraries alone are ~40 MiB).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
out=${2:-$build/vlm-gpu-bundle.tar.xz}
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/vlm/bin" "$stage/vlm/lib" "$stage/vlm/bench/gpu" "$stage/vlm/tokenizer"
bins=()
for b in ${VLM_BUNDLE_BINS:-vlm-server vlm-bench vlm-generate vlm-random-model bench_cuda_decoder test_cuda}; do
  [ -x "$build/bin/$b" ] && bins+=("$build/bin/$b")
done
[ ${#bins[@]} -gt 0 ] || { echo "gpu_bundle: no executables in $build/bin (build first)" >&2; exit 1; }
cp "${bins[@]}" "$stage/vlm/bin/"
strip --strip-unneeded "$stage"/vlm/bin/* 2>/dev/null || true
# Libraries: the union of what the executables need, minus the base system and CUDA.
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libpthread|libdl\.so|librt\.so|libgcc_s|libstdc\+\+|libcuda|libcudart|libcublas|libnvJitLink)'
ldd "${bins[@]}" | awk '/=> \// { print $1, $3 }' | sort -u | while read -r name path; do
  [[ "$name" =~ $skip ]] && continue
  cp -L "$path" "$stage/vlm/lib/$name"
done
strip --strip-unneeded "$stage"/vlm/lib/* 2>/dev/null || true
cp bench/gpu_speed.sh "$stage/vlm/bench/"
cp bench/gpu/*.py "$stage/vlm/bench/gpu/"
tok=tests/data/tokenizers/qwen3
[ -f "$tok/tokenizer.json" ] && cp "$tok/tokenizer.json" "$tok/tokenizer_config.json" "$stage/vlm/tokenizer/"
tar -C "$stage" -cf - vlm | xz -6 -T2 > "$out"
size=$(stat -c %s "$out")
echo "gpu_bundle: $out ($((size / 1024 / 1024)) MiB, ${#bins[@]} executables, $(ls "$stage/vlm/lib" | wc -l) libraries)"
[ "$size" -lt $((60 * 1024 * 1024)) ] || { echo "gpu_bundle: over 60 MiB" >&2; exit 1; }
