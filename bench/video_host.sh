#!/usr/bin/env bash
# The host media work of a long-video request (issue 38) beside FFmpeg's own decoding, in one run:
# a 400 s, 448x448, 4 fps H.264 MP4 (1,600 frames; made here with the ffmpeg CLI from a moving
# test pattern, command below) sampled at fps 2 (768 frames), through bench_video_host (decode_video
# + qwen2vl_preprocess with the tiny Qwen2-VL fixture's video processor settings, or MODEL=DIR's,
# or MODEL=7b for Qwen2-VL-7B's), alternating with `ffmpeg -threads 2 -i FILE -f null -`, ROUNDS
# rounds; prints each time, the medians and their ratio (issue 38's CI target: <= 1.5).
# The CPU backend's path makes the rows while the file decodes (Qwen2VLVideoRows), so its line
# shows nearly all the time under "decode" and "preprocess" ~0; FUSED=0: the rows made after
# decoding instead (decode_video's frames, then qwen2vl_preprocess: the path before) for an A/B.
# FRAMES8=1: the CUDA backend's host path instead (decode, then the 8-bit frames kept for the GPU's
# preprocessing; no rows made on the host) — bench_video_host --frames8.
# Usage: bench/video_host.sh [BIN_DIR]   env: ROUNDS=5 THREADS=0 (0: the machine's) MODEL=... FILE=... FRAMES8=0 FUSED=1
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-build/bin}
ROUNDS=${ROUNDS:-5}
THREADS=${THREADS:-0}
MODEL=${MODEL:-tests/fixtures/qwen2vl_server/qwen2_vl_chat}
FILE=${FILE:-/tmp/vlm_video_host/video_400s_448_4fps.mp4}
# The clip: testsrc2 moves every frame (x264 does real work); x264 defaults (B-frames, b-pyramid).
MAKE=(ffmpeg -hide_banner -loglevel error -y -f lavfi -i "testsrc2=size=448x448:rate=4:duration=400"
      -c:v libx264 -pix_fmt yuv420p -preset medium "$FILE")
if [[ ! -s $FILE ]]; then
  mkdir -p "$(dirname "$FILE")"
  echo "making $FILE: ${MAKE[*]}"
  "${MAKE[@]}"
fi
model_args=(--model "$MODEL")
[[ $MODEL == 7b ]] && model_args=()
echo "file: $FILE ($(stat -c %s "$FILE") bytes); model settings: $MODEL; threads: $THREADS; $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg)"
ours=() theirs=()
for ((r = 0; r < ROUNDS; ++r)); do
  t0=$(date +%s.%N)
  ffmpeg -hide_banner -loglevel error -threads 2 -i "$FILE" -f null -
  t1=$(date +%s.%N)
  ff=$(echo "$t1 - $t0" | bc -l)
  line=$("$BIN/bench_video_host" "$FILE" "${model_args[@]}" --fps 2 --rounds 1 --threads "$THREADS" --frames8 "${FRAMES8:-0}" --fused "${FUSED:-1}")
  host=$(sed -n 's/.*host media \([0-9.]*\) s.*/\1/p' <<<"$line")
  printf 'round %d: ffmpeg -threads 2 decode %.3f s | ours %s\n' "$r" "$ff" "${line#round 0: }"
  theirs+=("$ff") ours+=("$host")
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
mo=$(median "${ours[@]}") mt=$(median "${theirs[@]}")
printf 'median: host media %.3f s, ffmpeg -threads 2 %.3f s, ratio %.2f (load after: %s)\n' "$mo" "$mt" "$(echo "$mo / $mt" | bc -l)" "$(cut -d' ' -f1-3 /proc/loadavg)"
