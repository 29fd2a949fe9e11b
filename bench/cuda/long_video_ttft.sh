#!/usr/bin/env bash
# Issue 38's benchmark of what the user sees for a long video: starts vlm-server itself, sends streamed
# chat requests with an MP4 as a data: URL, methods switched per request (dense / MMInference / LOOK-M /
# SinkRouter / all three), prints TTFT and its parts (the server's --log-level debug timeline) and decode
# tok/s as a markdown table (bench/cuda/long_video_ttft.py), then a short text request's TTFT and a running
# stream's inter-token gap p99 while the 98K-token video is processed. The server starts with all three
# methods on (so each is set up) and every request names its own (text requests: dense).
# On the GPU machine, from the root of a checkout with the bundle and the videos carried (no ffmpeg there:
# bench/cuda/make_long_videos.sh makes them beforehand into .device/videos):
#   bench/cuda/long_video_ttft.sh BIN_DIR [MODEL_DIR]
#     MODEL_DIR absent: made by bench/cuda/make_qwen2vl_7b_random.py (Qwen2-VL-7B shapes, bf16, random)
#     with Qwen3's tokenizer from TOKENIZER (default tests/data/tokenizers/qwen3) into /tmp/q7b;
#     FAMILY=qwen3vl: made by bench/cuda/make_qwen3vl_8b_random.py (Qwen3-VL-8B shapes) into /tmp/q3vl8b,
#     and v400.mp4 sampled at 2.5 fps, 1,000 frames (500 groups x 196 = 98,000 video tokens).
# CPU check (tiny fixture, tiny.mp4, 8 tokens):  bench/cuda/long_video_ttft.sh --tiny BIN_DIR
# Env: VIDEOS (.device/videos), OUT (files: server log, table), PORT (18437), SKIP_ROWS
# ("v2048.mp4:dense,..." leaves rows out; a bare row name leaves it out for every video), ROWS
# (dense,mminference,look_m,sink_router,all), LONG ("v400.mp4 v2048.mp4": drop v2048 to skip 262K),
# CONCURRENT (v400.mp4; empty: no concurrent probe), SERVER_ARGS (more server flags), REQ_TIMEOUT (300 s),
# FAMILY (qwen2vl, qwen3vl), V400_FPS / V400_FRAMES (2 / 768; qwen3vl: 2.5 / 1000).
set -uo pipefail
TINY=
[ "${1:-}" = --tiny ] && { TINY=1; shift; }
BIN=${1:?usage: long_video_ttft.sh [--tiny] BIN_DIR [MODEL_DIR]}
MODEL=${2:-}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
VIDEOS=${VIDEOS:-$ROOT/.device/videos}
OUT=${OUT:-/tmp/long-video-ttft}
PORT=${PORT:-18437}
mkdir -p "$OUT"
log=$OUT/server.log
t0=$(date +%s)
stamp() { echo "== $1 at $(( $(date +%s) - t0 )) s"; }
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
date -u; git -C "$ROOT" rev-parse --short HEAD 2>/dev/null
ls -l "$VIDEOS" || { echo "no videos in $VIDEOS: run bench/cuda/make_long_videos.sh where ffmpeg is"; exit 1; }
if [ -n "$TINY" ]; then
  if [ -z "$MODEL" ]; then  # the fixture with Qwen3's tokenizer (same special-token ids), as the 7B maker does
    MODEL=$OUT/tiny-model; mkdir -p "$MODEL"
    cp "$ROOT"/tests/fixtures/qwen2vl_server/qwen2_vl_chat/* "$MODEL/"
    cp "${TOKENIZER:-$ROOT/tests/data/tokenizers/qwen3}"/tokenizer{,_config}.json "$MODEL/"
  fi
  DEVICE=${DEVICE:-cpu}; LONG=${LONG:-tiny.mp4}; CONCURRENT=${CONCURRENT-tiny.mp4}
  MAXTOK=${MAXTOK:-8}; FRAMES=64; PATCHES=65536; TOTAL_PIXELS=90316800
else
  DEVICE=${DEVICE:-cuda}; LONG=${LONG:-v400.mp4 v2048.mp4}; CONCURRENT=${CONCURRENT-v400.mp4}
  MAXTOK=${MAXTOK:-128}; FRAMES=2048
  PATCHES=${PATCHES:-1048576}            # 2,048 frames x 1,024 patches (448x448): the 262K video in one piece
  TOTAL_PIXELS=${TOTAL_PIXELS:-411041792} # 2,048 x 448 x 448: the 2,048 frames keep 448x448 (qwen-vl-utils: 90316800)
  FAMILY=${FAMILY:-qwen2vl}
  case $FAMILY in
    qwen2vl) maker=make_qwen2vl_7b_random.py; V400_FPS=${V400_FPS:-2}; V400_FRAMES=${V400_FRAMES:-768} ;;
    qwen3vl) maker=make_qwen3vl_8b_random.py; V400_FPS=${V400_FPS:-2.5}; V400_FRAMES=${V400_FRAMES:-1000} ;;
    *) echo "FAMILY must be qwen2vl or qwen3vl"; exit 2 ;;
  esac
  if [ -z "$MODEL" ]; then
    MODEL=/tmp/q7b; [ "$FAMILY" = qwen3vl ] && MODEL=/tmp/q3vl8b
    if [ ! -s "$MODEL/config.json" ]; then
      stamp "making the $FAMILY random checkpoint"
      timeout 400 python3 "$HERE/$maker" "${TOKENIZER:-$ROOT/tests/data/tokenizers/qwen3}" "$MODEL" \
        || { echo "checkpoint failed"; exit 1; }
    fi
  fi
  # Positions for 262K-token prompts (the released 7B says 32768), and 2,048 frames from one file.
  python3 - "$MODEL" <<'PY'
import json, sys
d = sys.argv[1]
c = json.load(open(f"{d}/config.json"))
for t in (c, c.get("text_config", {})):
    if "max_position_embeddings" in t:
        t["max_position_embeddings"] = 327680
json.dump(c, open(f"{d}/config.json", "w"), indent=2)
import os
if os.path.exists(f"{d}/video_preprocessor_config.json"):  # Qwen2-VL; Qwen3-VL's maker sets its own budget
    v = json.load(open(f"{d}/video_preprocessor_config.json"))
    v["max_frames"] = 2048
    json.dump(v, open(f"{d}/video_preprocessor_config.json", "w"), indent=2)
PY
fi
pid=
trap '[ -n "$pid" ] && kill -9 "$pid" 2>/dev/null' EXIT
trap 'exit 143' TERM INT   # timeout's TERM: the EXIT trap stops the server
# Starts the server with the method flags $1; sets pid and ready.
start_server() {
  stamp "server start ($1)"
  # shellcheck disable=SC2086  # SERVER_ARGS and $1 are words
  "$BIN/vlm-server" --model "$MODEL" --served-model-name m --device "$DEVICE" --host 127.0.0.1 --port "$PORT" \
    --log-level debug --no-enable-prefix-caching --max-video-frames "$FRAMES" --max-media-patches "$PATCHES" \
    --video-total-pixels "$TOTAL_PIXELS" --max-body-bytes 134217728 --max-video-seconds 600 \
    --sparse-prefill-min-len 4096 $1 ${SERVER_ARGS:-} >"$log" 2>&1 &
  pid=$!
  ready=
  for _ in $(seq 1500); do  # 300 s at most (weights load and warm)
    grep -q "ready:" "$log" && { ready=1; break; }
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.2
  done
  grep -vE "loaded layer|\] request |engine: request" "$log" | head -40
  if [ -z "$ready" ]; then
    echo "server not ready with '$1':"; tail -20 "$log"; kill -9 "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
  fi
}
start_server "--sparse-prefill mminference --look-m text-prior-pivot --sink-router on"
# Refused (a method the device cannot set up)? Then without them: the requests still name their methods.
[ -z "$ready" ] && start_server ""
[ -z "$ready" ] && exit 1
stamp ready
# Dense and the single methods at 262K are the slow rows: by default only dense, MMInference and all three run there.
export SKIP_ROWS=${SKIP_ROWS-v2048.mp4:look_m,v2048.mp4:sink_router}
vids=(); for v in $LONG; do vids+=(--video "$VIDEOS/$v"); done
conc=(); [ -n "$CONCURRENT" ] && conc=(--concurrent "$VIDEOS/$CONCURRENT")
timeout "${CLIENT_TIMEOUT:-1500}" python3 "$HERE/long_video_ttft.py" --url "http://127.0.0.1:$PORT" --log "$log" \
  "${vids[@]}" "${conc[@]}" --rows "${ROWS:-dense,mminference,look_m,sink_router,all}" --max-tokens "$MAXTOK" \
  --fps 2 --fps-for v2048.mp4=4 --max-frames-for v2048.mp4=2048 --fps-for "v400.mp4=${V400_FPS:-2}" \
  --max-frames-for "v400.mp4=${V400_FRAMES:-768}" --timeout "${REQ_TIMEOUT:-300}" | tee "$OUT/table.md"
rc=${PIPESTATUS[0]}
stamp "client rc=$rc"
kill "$pid" 2>/dev/null
for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
kill -9 "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
echo "=== server warnings/errors"
grep -iE "warn|error|refus" "$log" | grep -v "loaded layer" | head -30
echo "=== the requests' timeline lines"
grep -E "\] request |engine: request" "$log" | tail -30
gzip -f "$log"
exit "$rc"
