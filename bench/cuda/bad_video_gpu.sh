#!/usr/bin/env bash
# Issue 38's bad input through the GPU path, tried on the GPU: vlm-server --device cuda (frames
# preprocessed on the GPU, the default there) gets truncated, empty, non-video, corrupt-in-the-middle,
# wrong-codec and wrong-kind files as data: URLs; each must be a 400 naming the problem (the corrupt
# one: a 200 or a 400, never a 5xx), then a good clip a 200 and /health 200 (the server keeps serving).
# test_server's VideoFileServer.BadFilesAnswer400 covers the same table on the CPU (CI); files decode
# with FFmpeg on the host for both devices, so this checks the GPU side of the request's life.
#   bench/cuda/bad_video_gpu.sh BIN_DIR     (from a checkout's root)
# Env: DEVICE (cuda; cpu checks the script here), MODEL (a Qwen2-VL chat model dir; default: the tiny
# fixture with Qwen3's tokenizer from TOKENIZER, default tests/data/tokenizers/qwen3), VIDEOS
# (.device/videos: bad_codec.mp4 from bench/cuda/make_long_videos.sh; the GPU machine has no ffmpeg),
# PORT (18471). Exit 0 when every expectation held.
set -uo pipefail
pid=
trap '[ -n "$pid" ] && kill -9 "$pid" 2>/dev/null' EXIT  # never leave a server holding the GPU
trap 'exit 143' TERM INT
BIN=${1:?usage: bad_video_gpu.sh BIN_DIR}
PORT=${PORT:-18471}
VIDEOS=${VIDEOS:-.device/videos}
M=${MODEL:-}
if [ -z "$M" ]; then
  M=/tmp/bad-video-model; mkdir -p "$M"
  cp tests/fixtures/qwen2vl_server/qwen2_vl_chat/* "$M/"
  cp "${TOKENIZER:-tests/data/tokenizers/qwen3}"/tokenizer{,_config}.json "$M/"
fi
log=/tmp/bad-video-server.log
timeout 300 "$BIN/vlm-server" --model "$M" --served-model-name m --device "${DEVICE:-cuda}" --max-model-len 8192 \
  --host 127.0.0.1 --port "$PORT" --max-video-frames 8 > "$log" 2>&1 &
pid=$!
for _ in $(seq 900); do grep -q "ready:" "$log" && break; kill -0 $pid 2>/dev/null || break; sleep 0.2; done
grep -q "ready:" "$log" || { echo "server not ready:"; tail -5 "$log"; exit 1; }
grep -E "media|preprocess" "$log" | grep -iv "request" | head -3
python3 - "$PORT" "$VIDEOS" <<'PY'
import base64, json, os, sys, urllib.error, urllib.request
port, videos = sys.argv[1], sys.argv[2]
url = f"http://127.0.0.1:{port}"
good = open("tests/fixtures/video/h264.mp4", "rb").read()
mid = len(good) // 2
corrupt = good[:mid] + bytes((b ^ 0x5A) for b in good[mid:mid + 4096]) + good[mid + 4096:]
png = open("tests/fixtures/qwen2vl_server/media/clip4_0.png", "rb").read()
cases = [("truncated.mp4", good[:mid], "video/mp4", "400"),
         ("empty.mp4", b"", "video/mp4", "400"),
         ("text.mp4", b"this is not a video, just text with a .mp4 name\n", "video/mp4", "400"),
         ("frame.png as a video", png, "video/mp4", "400"),
         ("corrupt middle.mp4", corrupt, "video/mp4", "not5xx")]
bad_codec = os.path.join(videos, "bad_codec.mp4")
if os.path.exists(bad_codec):
    cases.append(("bad_codec.mp4 (mpeg4)", open(bad_codec, "rb").read(), "video/mp4", "400"))
else:
    print(f"(no {bad_codec}: the wrong-codec case is left out; bench/cuda/make_long_videos.sh makes it)")
cases.append(("h264.mp4 (good)", good, "video/mp4", "200"))

def ask(data, mime):
    part = {"type": "video_url", "video_url": {"url": f"data:{mime};base64," + base64.b64encode(data).decode()}}
    body = {"model": "m", "max_tokens": 2,
            "messages": [{"role": "user", "content": [part, {"type": "text", "text": "What moves?"}]}]}
    req = urllib.request.Request(url + "/v1/chat/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    try:
        r = urllib.request.urlopen(req, timeout=120)
        return r.status, json.loads(r.read())["choices"][0]["message"]["content"][:40]
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read()).get("error", {}).get("message", "")[:160]

ok = True
for name, data, mime, want in cases:
    status, text = ask(data, mime)
    good_case = (want == "400" and status == 400) or (want == "200" and status == 200) or \
                (want == "not5xx" and status < 500)
    ok = ok and good_case
    print(f"{'PASS' if good_case else 'FAIL'}  {name}: {status} {text!r} (expected {want})")
try:
    h = urllib.request.urlopen(url + "/health", timeout=10).status
except urllib.error.HTTPError as e:
    h = e.code
print(f"{'PASS' if h == 200 else 'FAIL'}  /health at the end: {h}")
sys.exit(0 if ok and h == 200 else 1)
PY
rc=$?
grep -iE "error|warn" "$log" | grep -v "loaded layer" | head -5
kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; pid=
exit $rc
