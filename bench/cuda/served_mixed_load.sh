#!/usr/bin/env bash
# The served mixed load of issue 21 on the GPU machine, one server, up to three phases in one run:
#   1. text alone:  vlm-bench --dataset random (chat, 128 tokens in, 256 out, 16 requests at
#                   concurrency 8): the text requests' TTFT / TPOT / ITL without media;
#   2. mixed:       vlm-bench --dataset random-mm with 448x448 images (1 a request) and 8-frame
#                   448x448 videos (--video-part: one video_url part of 8 frames), 16 + 16 in
#                   flight (concurrency 32 in all), and, once they are under way (their PNGs take
#                   seconds to build), the same text run as phase 1;
#   3. long video:  64-frame 448x448 videos two at a time beside the text run again (the text
#                   TPOT / ITL while 64-frame videos encode: 32768 patches each).
# Prints each vlm-bench table under a "=== phase / stream" header and the server's access log
# (timestamps: the phases' overlap can be checked); the server is stopped by its pid.
#   [PHASES=123] [SERVER_ARGS=...] bench/cuda/served_mixed_load.sh BIN_DIR MODEL_DIR [PORT]
set -uo pipefail
BIN=${1:?bin dir} MODEL=${2:?model dir} PORT=${3:-18431}
PHASES=${PHASES:-123}
url=http://127.0.0.1:$PORT
log=$(mktemp /tmp/served_mixed.XXXXXX)
# shellcheck disable=SC2086  # SERVER_ARGS are words
"$BIN/vlm-server" --model "$MODEL" --served-model-name m --device cuda --host 127.0.0.1 --port "$PORT" \
  --max-video-frames 64 --max-body-bytes 134217728 --log-level info ${SERVER_ARGS:-} 2>"$log" &
pid=$!
for _ in $(seq 900); do grep -q "ready:" "$log" && break; kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
echo "=== server ${SERVER_ARGS:-} (defaults otherwise)"
grep -E "GPU|ready|error" "$log" | grep -v "loaded layer" | head -20
bench() { "$BIN/vlm-bench" --base-url "$url" --model m --endpoint chat --no-progress --percentiles 50,90,99 --timeout 240 "$@" 2>&1; }
text=(--dataset random --input-len 128 --output-len 256 --num-prompts 16 --max-concurrency 8 --seed 1)
mm=(--dataset random-mm --image-size 448 --input-len 64 --output-len 128)
echo "=== 1 text alone"
bench "${text[@]}"
if [[ $PHASES == *2* ]]; then
  bench "${mm[@]}" --images-per-request 1 --num-prompts 320 --max-concurrency 16 --seed 2 >/tmp/mm_images.txt &
  a=$!
  bench "${mm[@]}" --images-per-request 0 --video-frames 8 --video-part --num-prompts 160 --max-concurrency 16 \
    --seed 3 >/tmp/mm_videos.txt &
  b=$!
  sleep 15
  echo "=== 2 text beside images + 8-frame videos (concurrency 32) from $(date +%T.%N)"
  bench "${text[@]}"
  echo "=== 2 text done at $(date +%T.%N)"
  wait "$a" "$b"
  echo "=== 2 images (concurrency 16 of the 32)"
  cat /tmp/mm_images.txt
  echo "=== 2 8-frame videos (concurrency 16 of the 32)"
  cat /tmp/mm_videos.txt
fi
if [[ $PHASES == *3* ]]; then
  bench --dataset random-mm --image-size 448 --input-len 32 --output-len 16 --images-per-request 0 --video-frames 64 \
    --video-part --num-prompts 8 --max-concurrency 2 --seed 4 >/tmp/mm_video64.txt &
  c=$!
  sleep 25  # vlm-bench builds the 512 PNG frames first (~2 s a request; 24 requests took 50 s)
  echo "=== 3 text beside 64-frame videos (two at a time) from $(date +%T.%N)"
  bench "${text[@]}"
  echo "=== 3 text done at $(date +%T.%N)"
  wait "$c"
  echo "=== 3 64-frame videos"
  cat /tmp/mm_video64.txt
fi
kill "$pid"
wait "$pid" 2>/dev/null
echo "=== server log (warnings, errors)"
grep -iE "warn|error" "$log" | head -20
