#!/usr/bin/env bash
# Issue 45 item 2 tried on the GPU: (1) models the GPU kernels cannot run are refused at start with a
# message naming the shape (exit non-zero, no port left serving); (2) a device failure inside a step
# (--debug-fail-step, the test-only injection of a DeviceError in the backend's forward) gives the
# in-flight stream an error event, /health 503, and the process exits 3 by itself.
#   bench/cuda/fail_loudly_gpu.sh BIN_DIR      (from a checkout's root; TOKENIZER: Qwen3's tokenizer dir,
#                                               default tests/data/tokenizers/qwen3; the bundle has /tmp/vlm/tokenizer)
set -uo pipefail
pid=
trap '[ -n "$pid" ] && kill -9 "$pid" 2>/dev/null' EXIT  # never leave a server holding the GPU
trap 'exit 143' TERM INT
BIN=${1:?usage: fail_loudly_gpu.sh BIN_DIR}
PORT=${PORT:-18470}
# FAIL_DEVICE: part 2's device (cuda; cpu checks the script here). FAIL_MODEL: a model directory for part 2 instead of the tiny fixture (parts 1b and 1c, which need the
# fixture's head size 16, are then left out).
M=${FAIL_MODEL:-/tmp/fail-loudly-model}
if [ -z "${FAIL_MODEL:-}" ]; then
  mkdir -p "$M"
  cp tests/fixtures/qwen2vl_server/qwen2_vl_chat/* "$M/"
  cp "${TOKENIZER:-tests/data/tokenizers/qwen3}"/tokenizer{,_config}.json "$M/"
fi
echo "== 1a. head size 24 with 131072 positions (llama3_tiny), --device cuda"
timeout 120 "$BIN/vlm-server" --model tests/fixtures/models/llama3_tiny --device cuda --port 0 2>&1 | grep -E "error|cannot" | head -3
echo "exit ${PIPESTATUS[0]}"
if [ -z "${FAIL_MODEL:-}" ]; then
echo "== 1b. the tiny Qwen2-VL fixture (head size 16) with --sparse-prefill mminference, --device cuda"
timeout 120 "$BIN/vlm-server" --model "$M" --device cuda --max-model-len 8192 --sparse-prefill mminference --port 0 2>&1 \
  | grep -E "error|cannot" | head -3
echo "exit ${PIPESTATUS[0]}"
echo "== 1c. the same with --device auto: runs on the CPU with a warning (stopped once ready)"
timeout 120 "$BIN/vlm-server" --model "$M" --device auto --max-model-len 8192 --sparse-prefill mminference \
  --port "$PORT" > /tmp/fail-loudly-auto.log 2>&1 &
pid=$!
for _ in $(seq 300); do grep -q "ready:" /tmp/fail-loudly-auto.log && break; kill -0 $pid 2>/dev/null || break; sleep 0.2; done
grep -E "running on the CPU|engine: device" /tmp/fail-loudly-auto.log | head -3
kill $pid 2>/dev/null; wait $pid
fi
echo "== 2. a device failure at forward 6 on the GPU"
timeout 180 "$BIN/vlm-server" --model "$M" --served-model-name x --device "${FAIL_DEVICE:-cuda}" --max-model-len 8192 --port "$PORT" \
  --debug-fail-step 6 \
  --failure-exit-delay 5 > /tmp/fail-loudly.log 2>&1 &
pid=$!
for _ in $(seq 600); do grep -q "ready:" /tmp/fail-loudly.log && break; kill -0 $pid 2>/dev/null || break; sleep 0.2; done
grep -q "ready:" /tmp/fail-loudly.log || { echo "server not ready:"; tail -5 /tmp/fail-loudly.log; kill $pid 2>/dev/null; exit 1; }
python3 - "$PORT" <<'PY'
import json, sys, time, urllib.request, urllib.error
url = f"http://127.0.0.1:{sys.argv[1]}"
body = json.dumps({"model": "x", "prompt": "Tell me", "max_tokens": 50, "ignore_eos": True, "stream": True}).encode()
r = urllib.request.urlopen(urllib.request.Request(url + "/v1/completions", body, {"Content-Type": "application/json"}))
lines = [l for l in r.read().decode().splitlines() if l.startswith("data: ")]
print("stream:", r.status, len(lines), "events; last:", lines[-1][:200] if lines else None)
errors = [l for l in lines if '"error"' in l]
print("stream error events:", len(errors), errors[0][:240] if errors else "(none: expected one)")
try:
    urllib.request.urlopen(url + "/health")
    print("health: 200 (expected 503)")
except urllib.error.HTTPError as e:
    print("health:", e.code, e.read().decode()[:200])
PY
t0=$(date +%s); wait $pid; rc=$?
echo "server exit status $rc after $(( $(date +%s) - t0 )) s (expected 3)"
grep -E "failed|exiting" /tmp/fail-loudly.log | head -5
