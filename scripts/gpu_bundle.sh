#!/usr/bin/env bash
# Packs the CUDA build for a GPU machine: the executables built under build/bin (vlm-server,
# vlm-bench, vlm-generate, vlm-random-model, bench_cuda_decoder, test_cuda; whichever exist),
# the shared libraries they need that a stock CUDA image lacks (what ldd resolves except glibc,
# libstdc++/libgcc and the CUDA libraries, which the image has under /usr/local/cuda/lib64; of
# FFmpeg's ~100 dependencies only what the allowed codecs load, stand-ins for the rest), bench/gpu_speed.sh with its Python peers, and the Qwen3 tokenizer the
# served benchmark uses (tests/data/tokenizers/qwen3, from scripts/fetch_test_data.sh) into
# build/vlm-gpu-bundle.tar.xz (must stay under 60 MiB). README.md ("On a GPU") says how to run it.
# Usage: scripts/gpu_bundle.sh [build-dir] [out-archive]
#   VLM_BUNDLE_BINS="test_cuda bench_cuda_attention" packs only those executables of build/bin
#   (a smaller archive for one test or benchmark).
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
# Libraries: the executables' own and what they need; through FFmpeg only what the allowed demuxers and
# decoders load, stand-ins (a few KiB each, same sonames and symbols) for the encoders, filters and
# protocols Debian's FFmpeg also names (scripts/bundle_stub_libs.py says why that is sound).
ldd "${bins[@]}" | awk '/=> \// { print $1, $3 }' | sort -u |
  python3 scripts/bundle_stub_libs.py "$stage/vlm/lib" "${bins[@]}"
strip --strip-unneeded "$stage"/vlm/lib/* 2>/dev/null || true
cp bench/gpu_speed.sh "$stage/vlm/bench/"
cp bench/gpu/*.py "$stage/vlm/bench/gpu/"
tok=tests/data/tokenizers/qwen3
[ -f "$tok/tokenizer.json" ] && cp "$tok/tokenizer.json" "$tok/tokenizer_config.json" "$stage/vlm/tokenizer/"
tar -C "$stage" -cf - vlm | xz -6 -T2 > "$out"
size=$(stat -c %s "$out")
echo "gpu_bundle: $out ($((size / 1024 / 1024)) MiB, ${#bins[@]} executables, $(ls "$stage/vlm/lib" | wc -l) libraries)"
[ "$size" -lt $((60 * 1024 * 1024)) ] || { echo "gpu_bundle: over 60 MiB" >&2; exit 1; }
