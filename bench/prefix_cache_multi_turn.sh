#!/usr/bin/env bash
# Multi-turn TTFT with the prefix cache on and off (issue 25), one server after the other on the
# same model, same workload: vlm-bench --dataset multi-turn (each conversation resends its history
# with the server's answers plus a new turn). Prints vlm-bench's tables; the server is stopped by pid.
#   [SERVER_ARGS="..."] bench/prefix_cache_multi_turn.sh MODEL_DIR PORT [vlm-bench flags...]
# SERVER_ARGS adds server flags. Images in turn 1: a multimodal model (e.g. one made by
# bench/make_qwen2vl_random.py) and vlm-bench's --images-per-request / --image-file.
# Both servers keep the processed media cache on (its default; SERVER_ARGS="--mm-processor-cache-gb 0"
# turns it off) and the tokenizer's segment cache: the cache-off column is the prefix cache only.
# VLM_SERVER picks another server binary (e.g. an older build to compare), MODES the runs
# ("enable no-enable" by default; "enable" for the cache-on run only).
# With SERVER_ARGS="--log-level debug" each request logs where its TTFT went, on the server's stdout:
# LOG_DIR (default /tmp) gets pc_server_{enable,no-enable}.out (stdout) and .log (stderr);
# bench/ttft_breakdown.py summarizes the .out files.
set -euo pipefail
cd "$(dirname "$0")/.."
model=$1 port=$2
shift 2
logs=${LOG_DIR:-/tmp}
for mode in ${MODES:-enable no-enable}; do
  rm -f "$logs/pc_server_$mode.log"  # an earlier run's "ready:" must not start the client early
  "${VLM_SERVER:-build/bin/vlm-server}" --model "$model" --served-model-name m --port "$port" --threads 2 \
    --num-kv-blocks 4096 --max-model-len 4096 --log-level warn ${SERVER_ARGS:-} --"$mode"-prefix-caching >"$logs/pc_server_$mode.out" 2>"$logs/pc_server_$mode.log" &
  pid=$!
  for _ in $(seq 600); do grep -q "ready:" "$logs/pc_server_$mode.log" && break; sleep 0.5; done
  echo "=== --$mode-prefix-caching (load: $(cut -d' ' -f1-3 /proc/loadavg)) ==="
  build/bin/vlm-bench --base-url "http://127.0.0.1:$port" --model m --dataset multi-turn --no-progress "$@" || true
  kill "$pid"
  wait "$pid" || true
done
