#!/usr/bin/env bash
# The long-video benchmark's MP4s (issue 38; bench/cuda/long_video_ttft.sh), made on a machine with
# Debian's ffmpeg (the GPU machine has no ffmpeg CLI: carry the folder there, it is git-ignored):
#   bench/cuda/make_long_videos.sh [DIR]        (default .device/videos)
# Writes, H.264 (libx264, yuv420p, crf 45: a low-detail moving pattern, so the files stay small):
#   v400.mp4   448x448, 4 fps, 400 s (1,600 frames): fps 2 -> 768 frames (max_frames) -> 98,304 video tokens
#   v2048.mp4  448x448, 4 fps, 512 s (2,048 frames): all 2,048 frames (fps 4, max_frames 2048) ->
#              262,144 video tokens with the total-pixel budget raised (--video-total-pixels)
#   tiny.mp4   64x64, 4 fps, 4 s (16 frames): the CPU check with the tiny fixture (--tiny)
#   bad_codec.mp4  64x48 MPEG-4 Part 2 (a codec the server refuses): bench/cuda/bad_video_gpu.sh
# Every frame differs (a moving square and a frame counter band), as a real video's would.
set -euo pipefail
DIR=${1:-.device/videos}
mkdir -p "$DIR"
make() {  # NAME SIZE SECONDS
  local name=$1 size=$2 secs=$3
  [ -s "$DIR/$name" ] && { echo "kept $DIR/$name"; return; }
  local side=${size%x*}
  ffmpeg -hide_banner -loglevel error -y \
    -f lavfi -i "color=c=0x204060:s=$size:r=4:d=$secs" \
    -f lavfi -i "color=c=0xe0c020:s=$((side / 7))x$((side / 7)):r=4:d=$secs" \
    -filter_complex "[0][1]overlay=x='mod(t*37\,W-w)':y='mod(t*23\,H-h)',drawbox=x=0:y=0:w='mod(t*12\,iw)':h=$((side / 14)):c=white:t=fill" \
    -c:v libx264 -preset veryfast -crf 45 -pix_fmt yuv420p -g 64 -movflags +faststart "$DIR/$name"
  echo "wrote $DIR/$name $(stat -c %s "$DIR/$name") bytes"
}
make tiny.mp4 64x64 4  # (56x56 crashes main's server: sws_scale overruns an unpadded RGB row buffer)
make v400.mp4 448x448 400
make v2048.mp4 448x448 512
[ -s "$DIR/bad_codec.mp4" ] || ffmpeg -hide_banner -loglevel error -y -f lavfi -i testsrc2=s=64x48:r=10:d=1 -c:v mpeg4 \
  "$DIR/bad_codec.mp4"
du -sh "$DIR"
