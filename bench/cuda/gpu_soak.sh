#!/usr/bin/env bash
# Issue 45's GPU soak: starts vlm-server itself and drives it with bench/cuda/gpu_soak.py (10,000
# chat requests at concurrency 64 by default: text, one image, 8-frame videos given as frames, video
# files; prefix caching on; the attention methods switched per request; a fifth of the requests
# streamed and dropped after their first chunk), then checks 0 5xx, 0 KV blocks in use at the end,
# server RSS and GPU memory flat after warm-up, and prints a markdown summary (docs/RELIABILITY.md).
#   bench/cuda/gpu_soak.sh BIN_DIR [MODEL_DIR]
#     MODEL_DIR absent: the tiny Qwen2-VL fixture (tests/fixtures/qwen2vl_server/qwen2_vl_chat) with
#     Qwen3's tokenizer from TOKENIZER (default tests/data/tokenizers/qwen3), as
#     bench/cuda/long_video_ttft.sh --tiny builds it. A Qwen2-VL-7B-shaped checkpoint
#     (bench/cuda/make_qwen2vl_7b_random.py TOKENIZER_DIR /tmp/q7b) runs every method on the GPU;
#     the tiny one's head size (16) has no GPU sparse prefill, so METHODS leaves mminference out
#     there by default on cuda (a request asking for it would get a 400).
# Env: DEVICE (cuda), REQUESTS (10000), CONCURRENCY (64), MAX_TOKENS (16), CANCEL (0.2), METHODS
# (none,mminference,look_m,sink_router,all), VIDEOS (.device/videos: tiny.mp4 from
# bench/cuda/make_long_videos.sh; else tests/fixtures/video/h264.mp4), OUT (/tmp/gpu-soak: server
# log, result JSON), PORT (18445), SERVER_ARGS (more server flags), RSS_BOUND / GPU_BOUND (MiB, 256),
# SAMPLE_S (memory sampling period, 2 s), CLIENT_TIMEOUT (s, 900). CPU check: DEVICE=cpu REQUESTS=200 CONCURRENCY=16 bench/cuda/gpu_soak.sh build/bin
set -uo pipefail
BIN=${1:?usage: gpu_soak.sh BIN_DIR [MODEL_DIR]}
MODEL=${2:-}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=${ROOT:-$(cd "$HERE/../.." && pwd)}  # a checkout (fixtures, tokenizer); set it when this script is copied elsewhere
DEVICE=${DEVICE:-cuda}
OUT=${OUT:-/tmp/gpu-soak}
PORT=${PORT:-18445}
VIDEOS=${VIDEOS:-$ROOT/.device/videos}
mkdir -p "$OUT"
log=$OUT/server.log
t0=$(date +%s)
stamp() { echo "== $1 at $(( $(date +%s) - t0 )) s"; }
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader
date -u; git -C "$ROOT" rev-parse --short HEAD 2>/dev/null; nproc
MAXLEN=32768
if [ -z "$MODEL" ]; then
  MODEL=$OUT/tiny-model; mkdir -p "$MODEL"
  cp "$ROOT"/tests/fixtures/qwen2vl_server/qwen2_vl_chat/* "$MODEL/"
  cp "${TOKENIZER:-$ROOT/tests/data/tokenizers/qwen3}"/tokenizer{,_config}.json "$MODEL/"
  # Head size 16 runs on the GPU's reference attention kernel: contexts up to 12,000 tokens.
  MAXLEN=8192
  [ "$DEVICE" = cuda ] && METHODS=${METHODS:-none,look_m,sink_router}
fi
METHODS=${METHODS:-none,mminference,look_m,sink_router,all}
VIDEO=$VIDEOS/tiny.mp4
[ -s "$VIDEO" ] || VIDEO=$ROOT/tests/fixtures/video/h264.mp4
ls -l "$VIDEO"
pid=
trap '[ -n "$pid" ] && kill -9 "$pid" 2>/dev/null' EXIT
trap 'exit 143' TERM INT
stamp "server start"
# Prefix caching is on by default; sparse prefill from 512-token prompts so the long questions take it.
# shellcheck disable=SC2086  # SERVER_ARGS are words
"$BIN/vlm-server" --model "$MODEL" --served-model-name m --device "$DEVICE" --host 127.0.0.1 --port "$PORT" \
  --max-model-len "$MAXLEN" --max-num-seqs 64 --sparse-prefill-min-len 512 --max-video-frames 8 \
  --max-waiting 4096 --media-queue 256 --media-workers 8 --max-body-bytes 16777216 --log-level warn \
  ${SERVER_ARGS:-} >"$log" 2>&1 &
pid=$!
ready=
for _ in $(seq 1500); do  # 300 s at most
  grep -q "ready:" "$log" && { ready=1; break; }
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.2
done
[ -z "$ready" ] && { echo "server not ready:"; tail -20 "$log"; exit 1; }
stamp ready
timeout "${CLIENT_TIMEOUT:-900}" python3 "$HERE/gpu_soak.py" --root "$ROOT" --url "http://127.0.0.1:$PORT" --pid "$pid" \
  --requests "${REQUESTS:-10000}" --concurrency "${CONCURRENCY:-64}" --max-tokens "${MAX_TOKENS:-16}" \
  --cancel-fraction "${CANCEL:-0.2}" --video-file "$VIDEO" --methods "$METHODS" \
  --rss-bound-mib "${RSS_BOUND:-256}" --gpu-bound-mib "${GPU_BOUND:-256}" --sample-s "${SAMPLE_S:-2}" \
  --result "$OUT/soak.json"
rc=$?
stamp "client rc=$rc"
kill "$pid" 2>/dev/null
for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
kill -0 "$pid" 2>/dev/null && { echo "server still running 20 s after SIGTERM"; kill -9 "$pid"; rc=1; }
wait "$pid"; src=$?
echo "server exit status on SIGTERM: $src"
[ "$src" = 0 ] || rc=1
echo "=== server warnings/errors (first 20)"
grep -iE "warn|error" "$log" | head -20
exit "$rc"
