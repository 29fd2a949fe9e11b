#!/usr/bin/env bash
# vlm-server against llama.cpp on this CPU, side by side in one run (issue 24), with the machine's
# memory read rate (the decode roofline) measured in the same run.
#
# Usage: bench/peer_llamacpp.sh LLAMA_BUILD_DIR [GGUF] [threads=2] [long=1]
#   LLAMA_BUILD_DIR: a llama.cpp CPU build whose bin/ holds llama-bench and llama-batched-bench.
#     This repository holds none of llama.cpp; build it yourself, e.g. (the commit measured in
#     bench/RESULTS.md is d32676d7):
#       git clone https://github.com/ggml-org/llama.cpp && cd llama.cpp && git checkout <commit>
#       cmake -B build -DGGML_NATIVE=ON -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_CURL=OFF
#       cmake --build build --target llama-bench llama-batched-bench -j
#   GGUF: the same model for llama.cpp; default: written by bench/hf_to_gguf.py from ours.
#   long=0 skips decode at 32K context (its prefill takes minutes on 2 cores).
#   PEER_TG_ROUNDS (default 4): rounds of 1-sequence decode alternated between the engines after
#   the main rows (the read rate over 1 GiB, 3 reps; llama-bench tg128 once; ours once), each
#   round's ratio, our read rate against that round's read benchmark, and their medians reported.
#   PEER_4K_ROUNDS (default 2): the same alternation for decode at 4K context (tg32 -d 4096).
# The model: Qwen2-0.5B shape, random bf16 weights (tools/vlm-random-model --preset qwen2-0.5b
# --dtype bf16, Qwen3 tokenizer files so the server can serve it), the same bytes in both engines.
# Both run with `threads` threads and their defaults otherwise (ours: --dtype auto, bf16 KV cache;
# llama.cpp: its default flash-attention setting, f16 KV cache). Measures (llama.cpp | ours):
#   prompt tok/s at 512 and 4096   llama-bench pp512/pp4096 | 512 or 4096 / TTFT (1 token out)
#   decode tok/s, 1 sequence       llama-bench tg128 | 1000 / TPOT (16-token prompt, 128 out)
#   decode at 4K and 32K context   llama-bench tg32 -d 4096/32736 | 1000 / TPOT (32 out)
#   decode, 16 sequences           llama-batched-bench S_TG (npp 32, ntg 64, npl 16) |
#                                  16 x 1000 / mean TPOT (16 requests of 32 tokens, 64 out, at once)
# Ours goes through the real server and vlm-bench (/v1/completions, streamed, prompts as ids).
# Needs: our build (vlm-server vlm-bench vlm-random-model bench_memory_read), python3.
# Prints a Markdown report to stdout; raw outputs stay in $PEER_OUT (default /tmp/peer_llamacpp).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { sed -n 2,30p "$0"; exit 2; }
llama=$1
gguf=${2:-}
threads=${3:-2}
long=${4:-1}
rounds=${PEER_TG_ROUNDS:-4}
rounds4k=${PEER_4K_ROUNDS:-2}
out=${PEER_OUT:-/tmp/peer_llamacpp}
port=${PEER_PORT:-18424}
mkdir -p "$out"
for b in llama-bench llama-batched-bench; do
  [ -x "$llama/bin/$b" ] || { echo "no $llama/bin/$b" >&2; exit 2; }
done
for b in vlm-server vlm-bench vlm-random-model bench_memory_read; do
  [ -x "build/bin/$b" ] || { echo "no build/bin/$b (build it first)" >&2; exit 2; }
done

model=/tmp/vlm-peer-qwen2-0.5b-bf16
[ -f "$model/model.safetensors" ] ||
  build/bin/vlm-random-model --out "$model" --preset qwen2-0.5b --dtype bf16 --tokenizer-from tests/data/tokenizers/qwen3 >/dev/null
if [ -z "$gguf" ]; then
  gguf=$model.gguf
  [ -f "$gguf" ] || python3 bench/hf_to_gguf.py "$model" "$gguf" >/dev/null
fi

load() { cut -d' ' -f1-3 /proc/loadavg; }
echo "# bench/peer_llamacpp.sh: $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD), threads $threads"
echo
echo "- CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs; flags: $(grep -o -w -E 'avx512f|avx512_bf16|avx512_vnni|amx_bf16|amx_tile' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "- llama.cpp: commit ${LLAMA_COMMIT:-$(git -C "$llama/.." rev-parse --short HEAD 2>/dev/null || echo "unknown (not a git checkout; set LLAMA_COMMIT)")}, $llama"
echo "- load average at start: $(load)"

# ---- memory read rate (the roofline) ----
build/bin/bench_memory_read --threads "$threads" --mib 1024 --reps 10 >"$out/memory.txt"
read_median=$(sed -n 's/^read GB\/s: best \([0-9.]*\) median \([0-9.]*\).*/\2/p' "$out/memory.txt")
read_best=$(sed -n 's/^read GB\/s: best \([0-9.]*\).*/\1/p' "$out/memory.txt")
weights_gb=$(python3 -c "import os; print(os.path.getsize('$model/model.safetensors') / 1e9)")

# ---- llama.cpp ----
lb() { "$llama/bin/llama-bench" -m "$gguf" -t "$threads" -o json "$@" 2>>"$out/llama-bench.err"; }
lb -p 512,4096 -n 0 -r 2 >"$out/lb_pp.json"
lb -p 0 -n 128 -r 3 >"$out/lb_tg.json"
lb -p 0 -n 32 -d 4096 -r 1 >"$out/lb_tg4k.json"
"$llama/bin/llama-batched-bench" -m "$gguf" -t "$threads" -c 4096 -npp 32 -ntg 64 -npl 16 \
  --output-format jsonl >"$out/lbb.jsonl" 2>"$out/lbb.err"
echo "- load average after llama.cpp: $(load)"

# ---- ours: the server with its defaults, driven by vlm-bench ----
server_pid=
start_server() {
  build/bin/vlm-server --model "$model" --served-model-name peer --port "$port" --threads "$threads" \
    --max-model-len 32768 --kv-cache-memory-gib 1.5 --log-level warn 2>>"$out/server.log" &
  server_pid=$!
  for _ in $(seq 1 300); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && return 0
    sleep 1
  done
  echo "vlm-server did not come up (see $out/server.log)" >&2
  return 1
}
stop_server() { kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; }
trap stop_server EXIT
vb() {  # NAME ARGS... -> $out/NAME.json
  local name=$1; shift
  build/bin/vlm-bench --base-url "http://127.0.0.1:$port" --endpoint completions --prompt-ids --seed 1 \
    --no-progress --result-json "$out/$name.json" "$@" >"$out/$name.txt" 2>&1
}
start_server
vb warmup --input-len 64 --output-len 4 --num-prompts 1
vb pp512 --input-len 512 --output-len 1 --num-prompts 3 --max-concurrency 1
vb pp4096 --input-len 4096 --output-len 1 --num-prompts 2 --max-concurrency 1
vb tg --input-len 16 --output-len 128 --num-prompts 3 --max-concurrency 1
vb tg4k --input-len 4096 --output-len 32 --num-prompts 1
vb par16 --input-len 32 --output-len 64 --num-prompts 16 --max-concurrency 16
echo "- load average after ours: $(load)"

# ---- 1 sequence again, alternated: this VM's memory rate moves by 1.5x within minutes, so one
# llama-bench run and one of ours minutes apart can compare different machines. Round i runs
# llama-bench tg128 once, then ours (128 tokens) once; the report gives each round's ratio.
read_round() { build/bin/bench_memory_read --threads "$threads" --mib 1024 --reps 3 >"$out/$1"; }
for i in $(seq 1 "$rounds"); do
  read_round "memory_round$i.txt"
  lb -p 0 -n 128 -r 1 >"$out/lb_tg_round$i.json"
  vb "tg_round$i" --input-len 16 --output-len 128 --num-prompts 1 --max-concurrency 1
done
for i in $(seq 1 "$rounds4k"); do
  read_round "memory_4k_round$i.txt"
  lb -p 0 -n 32 -d 4096 -r 1 >"$out/lb_tg4k_round$i.json"
  vb "tg4k_round$i" --input-len 4096 --output-len 32 --num-prompts 1
done

# ---- 32K context last (minutes of prefill each), the server stopped while llama.cpp runs ----
if [ "$long" = 1 ]; then
  stop_server
  lb -p 0 -n 32 -d 32736 -r 1 >"$out/lb_tg32k.json"
  start_server
  vb tg32k --input-len 32736 --output-len 32 --num-prompts 1 --timeout 1800 --request-timeout 1800
fi
stop_server
trap - EXIT
# The read rate again at the end: the roofline is the better of the two runs' best.
build/bin/bench_memory_read --threads "$threads" --mib 1024 --reps 10 >"$out/memory_end.txt"
read_best_end=$(sed -n 's/^read GB\/s: best \([0-9.]*\).*/\1/p' "$out/memory_end.txt")
read_best=$(python3 -c "print(max($read_best, $read_best_end))")
echo "- load average at the end: $(load)"
echo "- memory read rate ($threads threads, 1 GiB, 10 reps): at the start median $read_median GB/s;" \
     "best of start and end $read_best GB/s (start $(sed -n 's/^read GB\/s: best \([0-9.]*\).*/\1/p' "$out/memory.txt"), end $read_best_end; the roofline below);" \
     "the model's weights: $weights_gb GB"
echo

python3 - "$out" "$read_best" "$weights_gb" "$long" "$rounds" "$rounds4k" <<'EOF'
import json, os, statistics, sys
out, read_gbs, weights_gb, long_ = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4] == "1"
rounds, rounds4k = int(sys.argv[5]), int(sys.argv[6])

def lb(name, key):
    """avg tokens/s of the llama-bench test whose (n_prompt, n_gen, n_depth) == key."""
    path = os.path.join(out, name)
    if not os.path.exists(path):
        return None
    for t in json.load(open(path)):
        if (t["n_prompt"], t["n_gen"], t.get("n_depth", 0)) == key:
            return t["avg_ts"]
    return None

def ours(name, what):
    path = os.path.join(out, name + ".json")
    if not os.path.exists(path):
        return None
    j = json.load(open(path))
    if j.get("completed", 0) == 0 or j.get("failed", 0):
        return None
    if what == "pp":
        ttfts = [r["ttft_s"] for r in j["requests"] if r["success"]]
        n = j["total_input_tokens"] / j["completed"]
        return n / (sum(ttfts) / len(ttfts))
    return what * 1000.0 / j["mean_tpot_ms"]  # what = sequences decoding at once

lbb = None
for line in open(os.path.join(out, "lbb.jsonl")):
    line = line.strip()
    if line.startswith("{"):
        lbb = json.loads(line)["speed_tg"]

rows = [
    ("prompt tok/s, 512 tokens", lb("lb_pp.json", (512, 0, 0)), ours("pp512", "pp"), 1.3),
    ("prompt tok/s, 4096 tokens", lb("lb_pp.json", (4096, 0, 0)), ours("pp4096", "pp"), 1.5),
    ("decode tok/s, 1 sequence, short context", lb("lb_tg.json", (0, 128, 0)), ours("tg", 1), 1.1),
    ("decode tok/s at 4K context", lb("lb_tg4k.json", (0, 32, 4096)), ours("tg4k", 1), 1.5),
]
if long_:
    rows.append(("decode tok/s at 32K context", lb("lb_tg32k.json", (0, 32, 32736)), ours("tg32k", 1), 1.5))
rows.append(("decode tok/s, 16 sequences (aggregate)", lbb, ours("par16", 16), 1.3))

fmt = lambda v: "n/a" if v is None else f"{v:.1f}"
print("| measure | llama.cpp | vlm-server (defaults) | ratio | target |")
print("| --- | ---: | ---: | ---: | ---: |")
for name, theirs, mine, target in rows:
    ratio = f"{mine / theirs:.2f}x" if theirs and mine else "n/a"
    print(f"| {name} | {fmt(theirs)} | {fmt(mine)} | {ratio} | >= {target}x |")
tg = ours("tg", 1)
tg_l = lb("lb_tg.json", (0, 128, 0))
print()
print(f"Decode at short context reads the {weights_gb:.3f} GB of weights once per token: "
      + (f"ours {tg * weights_gb:.1f} GB/s = {100 * tg * weights_gb / read_gbs:.0f}% of the best measured read rate"
         if tg else "ours n/a")
      + (f", llama.cpp {tg_l * weights_gb:.1f} GB/s = {100 * tg_l * weights_gb / read_gbs:.0f}%" if tg_l else "")
      + f" (target for ours: >= 85%).")
def read_best_of(name):
    path = os.path.join(out, name)
    if not os.path.exists(path):
        return None
    for line in open(path):
        if line.startswith("read GB/s: best "):
            return float(line.split()[3])
    return None

def alternated(title, lb_name, lb_key, ours_name, n, read_name):
    rows = [(lb(f"{lb_name}{i}.json", lb_key), ours(f"{ours_name}{i}", 1), read_best_of(f"{read_name}{i}.txt"))
            for i in range(1, n + 1)]
    rows = [r for r in rows if r[0] and r[1]]
    if not rows:
        return
    print()
    print(f"{title}, alternated rounds (read GB/s beside it, llama.cpp tok/s, ours tok/s, ratio, weight bytes per "
          "second against that read rate: llama.cpp, ours): "
          + "; ".join(f"{r:.1f}, {a:.1f}, {b:.1f}, {b / a:.2f}x, {100 * a * weights_gb / r:.0f}% / "
                      f"{100 * b * weights_gb / r:.0f}%" if r else
                      f"n/a, {a:.1f}, {b:.1f}, {b / a:.2f}x, n/a" for a, b, r in rows)
          + f". Median ratio {statistics.median(b / a for a, b, _ in rows):.2f}x"
          + (f"; median of ours / read rate {statistics.median(100 * b * weights_gb / r for _, b, r in rows if r):.0f}%"
             if any(r for _, _, r in rows) else "") + ".")

alternated("1 sequence", "lb_tg_round", (0, 128, 0), "tg_round", rounds, "memory_round")

# This VM's read rate is bimodal (per process and over minutes: ~35 or ~60 GB/s with huge pages),
# so the roofline is the best of every read measurement of the run, against each engine's best
# 1-sequence rate of the run (one-shot row and rounds).
reads = [read_best_of(f) for f in sorted(os.listdir(out)) if f.startswith("memory") and f.endswith(".txt")]
reads = [r for r in reads if r]
best_ours = max([v for v in [tg] + [ours(f"tg_round{i}", 1) for i in range(1, rounds + 1)] if v] or [0])
best_theirs = max([v for v in [tg_l] + [lb(f"lb_tg_round{i}.json", (0, 128, 0)) for i in range(1, rounds + 1)] if v]
                  or [0])
if reads and best_ours:
    print()
    print(f"Roofline: the best of the run's {len(reads)} read measurements, {max(reads):.1f} GB/s. At best, 1 sequence: "
          f"ours {best_ours * weights_gb:.1f} GB/s = {100 * best_ours * weights_gb / max(reads):.0f}%, llama.cpp "
          f"{best_theirs * weights_gb:.1f} GB/s = {100 * best_theirs * weights_gb / max(reads):.0f}%.")
alternated("4K context", "lb_tg4k_round", (0, 32, 4096), "tg4k_round", rounds4k, "memory_4k_round")
EOF
