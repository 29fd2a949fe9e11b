#!/usr/bin/env python3
"""GPU soak (issue 45): drives a running vlm-server with a mixed chat load and checks it stays sound.

    bench/cuda/gpu_soak.py --url http://127.0.0.1:PORT --pid SERVER_PID --requests 10000 --concurrency 64
                           --video-file tiny.mp4 [--methods none,mminference,look_m,sink_router,all]
                           [--max-tokens 16] [--cancel-fraction 0.2] [--result soak.json]

Python standard library only (threads + http.client; the GPU machine and CI both run it). Each
request i is drawn from its own seeded RNG: one of four shared system prompts (the prefix cache
hits), then text only, one image, an 8-frame video given as frames, or a video file (data: URLs of
the repository's fixture images and the given MP4, so the processed-media cache hits too); a long
text question for some (past --sparse-prefill-min-len, so sparse prefill runs); the attention
methods switched per request through "vlm_options"; streamed or not; and --cancel-fraction of them
streamed and dropped after their first content chunk (the server aborts them). While it runs a
sampler records the server's RSS (/proc) and GPU memory (nvidia-smi, when present) every
--sample-s seconds. Afterwards it waits (bounded) for nothing running or waiting and checks:
  - 0 replies with a 5xx status, 0 streams with an error event of a 5xx code, 0 connection failures;
  - 0 KV blocks in use (vllm:kv_cache_usage_perc == 0) and /health 200;
  - RSS and GPU memory flat after warm-up: peak after the first --warmup-fraction of the requests
    minus the value then, within --rss-bound-mib / --gpu-bound-mib;
  - (reported, not failed) 4xx replies, prefix-cache hit rate, LOOK-M compressions, SinkRouter
    decisions, sparse-prefilled prompts, request rate and wall time.
Prints a markdown summary; exits 1 when a check fails. Every wait is bounded.
"""
import argparse
import base64
import http.client
import json
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.parse

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "soak"))
from soak import metric_sum  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
IMAGES = ["tests/fixtures/llava/images/cat_crop.png", "tests/fixtures/llava/images/rocket_crop.png",
          "tests/fixtures/llava/images/camera_crop.png", "tests/fixtures/qwen2vl_server/media/wide.png",
          "tests/fixtures/qwen2vl_server/media/tall.png"]
FRAMES = ["tests/fixtures/qwen2vl_server/media/clip4_%d.png" % i for i in (0, 1, 2, 3, 0, 1, 2, 3)]
WORDS = ("river stone light garden window paper music morning table silver orange cloud market bridge "
         "engine letter forest summer yellow harbor circle planet signal winter station mirror").split()
METHOD_OPTIONS = {
    "none": {},
    "mminference": {"sparse_prefill": "mminference"},
    "look_m": {"look_m": "text-prior-pivot"},
    "sink_router": {"sink_router": True},
    "all": {"sparse_prefill": "mminference", "look_m": "text-prior-pivot", "sink_router": True},
}


def data_url(path, mime):
    with open(path, "rb") as f:
        return f"data:{mime};base64," + base64.b64encode(f.read()).decode()


def words(rng, n):
    return " ".join(rng.choice(WORDS) for _ in range(n))


class Soak:
    def __init__(self, a):
        self.a = a
        u = urllib.parse.urlparse(a.url)
        self.host, self.port = u.hostname, u.port or 80
        self.images = [data_url(os.path.join(a.root, p), "image/png") for p in IMAGES]
        self.frames = [data_url(os.path.join(a.root, p), "image/png") for p in FRAMES]
        self.video = data_url(a.video_file, "video/mp4") if a.video_file else None
        self.systems = [f"You are assistant number {k}. " + words(random.Random(k), 240) for k in range(4)]
        self.methods = a.methods.split(",")
        self.lock = threading.Lock()
        self.next = 0
        self.done = 0
        self.status = {}       # HTTP status -> count
        self.stream_errors = {}  # error code in a stream's error event -> count
        self.conn_failures = 0
        self.cancelled = 0
        self.double_done = 0
        self.kinds = {}
        self.failures = []     # first few failure descriptions
        self.samples = []      # (t, done, rss_mib, gpu_mib)
        self.stop_sampling = threading.Event()

    # ---- one request ----
    def build(self, i):
        rng = random.Random(self.a.seed * 1000003 + i)
        r = rng.random()
        kinds = [("text", 0.35), ("image", 0.25), ("frames", 0.25), ("video_file", 0.15)]
        if not self.video:
            kinds = [(k, w) for k, w in kinds if k != "video_file"]
        total = sum(w for _, w in kinds)
        acc, kind = 0.0, kinds[-1][0]
        for k, w in kinds:
            acc += w / total
            if r < acc:
                kind = k
                break
        long_q = rng.random() < 0.15
        text = f"Request {i}: " + words(rng, 700 if long_q else rng.randint(8, 40)) + ". Describe it."
        parts = []
        if kind == "image":
            parts.append({"type": "image_url", "image_url": {"url": rng.choice(self.images)}})
        elif kind == "frames":
            parts.append({"type": "video_url", "video_url": {"url": self.frames, "fps": 2}})
        elif kind == "video_file":
            parts.append({"type": "video_url", "video_url": {"url": self.video, "fps": 2}})
        parts.append({"type": "text", "text": text})
        method = rng.choice(self.methods)
        cancel = rng.random() < self.a.cancel_fraction
        stream = cancel or rng.random() < 0.5
        body = {"model": self.a.model, "messages": [{"role": "system", "content": rng.choice(self.systems)},
                                                    {"role": "user", "content": parts}],
                "max_tokens": self.a.max_tokens, "ignore_eos": True, "stream": stream,
                "temperature": rng.choice([0.0, 1.0]), "seed": i}
        if METHOD_OPTIONS[method]:
            body["vlm_options"] = METHOD_OPTIONS[method]
        return kind + ("+long" if long_q else ""), method, stream, cancel, json.dumps(body).encode()

    def note_failure(self, what):
        with self.lock:
            if len(self.failures) < 12:
                self.failures.append(what)

    def one(self, i):
        kind, method, stream, cancel, body = self.build(i)
        with self.lock:
            self.kinds[kind] = self.kinds.get(kind, 0) + 1
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.a.request_timeout)
        try:
            conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
            resp = conn.getresponse()
            with self.lock:
                self.status[resp.status] = self.status.get(resp.status, 0) + 1
            if resp.status != 200:
                text = resp.read()[:300]
                if resp.status >= 500 or self.a.verbose:
                    self.note_failure(f"#{i} {kind} {method}: {resp.status} {text!r}")
                return
            if not stream:
                j = json.loads(resp.read())
                if not j.get("choices"):
                    self.note_failure(f"#{i}: 200 without choices")
                return
            dones, content = 0, False
            while True:
                line = resp.readline()
                if not line:
                    break
                if not line.startswith(b"data: "):
                    continue
                payload = line[6:].strip()
                if payload == b"[DONE]":
                    dones += 1
                    continue
                ev = json.loads(payload)
                if "error" in ev:
                    code = ev["error"].get("code", 0)
                    with self.lock:
                        self.stream_errors[code] = self.stream_errors.get(code, 0) + 1
                    self.note_failure(f"#{i} {kind} {method}: stream error {ev['error']}")
                    continue
                for ch in ev.get("choices", []):
                    if ch.get("delta", {}).get("content"):
                        content = True
                if cancel and content:
                    with self.lock:
                        self.cancelled += 1
                    return  # the finally closes the socket mid-stream
            if dones > 1:
                with self.lock:
                    self.double_done += 1
        except (OSError, http.client.HTTPException, ValueError) as e:
            with self.lock:
                self.conn_failures += 1
            self.note_failure(f"#{i} {kind} {method}: {type(e).__name__} {e}")
        finally:
            conn.close()
            with self.lock:
                self.done += 1

    def worker(self):
        while True:
            with self.lock:
                i = self.next
                if i >= self.a.requests:
                    return
                self.next += 1
            self.one(i)

    # ---- memory samples ----
    def gpu_mib(self):
        if not shutil.which("nvidia-smi"):
            return None
        try:
            out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                                 capture_output=True, text=True, timeout=10).stdout
            for line in out.splitlines():
                pid, mem = [x.strip() for x in line.split(",")[:2]]
                if self.a.pid and int(pid) == self.a.pid:
                    return float(mem)
            out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                                 capture_output=True, text=True, timeout=10).stdout
            return float(out.split()[0])
        except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
            return None

    def rss_mib(self):
        try:
            with open(f"/proc/{self.a.pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1]) / 1024.0
        except OSError:
            pass
        return None

    def sampler(self, t0):
        while True:
            with self.lock:
                done = self.done
            self.samples.append((time.time() - t0, done, self.rss_mib(), self.gpu_mib()))
            if self.stop_sampling.wait(self.a.sample_s):
                return

    # ---- server state ----
    def get(self, path, timeout=30):
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            conn.request("GET", path)
            r = conn.getresponse()
            return r.status, r.read().decode(errors="replace")
        except OSError as e:
            return 0, str(e)
        finally:
            conn.close()


def metric(text, name):
    """The sum of a Prometheus metric's samples (tools/soak/soak.py's metric_sum), None when absent."""
    v = metric_sum(text, name)
    return None if v < 0 else v


def flat(samples, idx, warm_done):
    """(value after warm-up, peak after it, final, growth) of column idx; None when not sampled."""
    vals = [(d, s[idx]) for s in samples for d in [s[1]] if s[idx] is not None]
    if not vals:
        return None
    after = [v for d, v in vals if d >= warm_done] or [vals[-1][1]]
    base = after[0]
    return base, max(after), vals[-1][1], max(after) - base


def half_growth(samples, idx, n):
    """Growth of column idx over the second half of the requests (None when not sampled)."""
    vals = [(s[1], s[idx]) for s in samples if s[idx] is not None]
    half = [v for d, v in vals if d >= n // 2]
    return (max(half) - half[0]) if half else None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", required=True)
    ap.add_argument("--root", default=ROOT, help="a checkout: the fixture images come from its tests/fixtures")
    ap.add_argument("--pid", type=int, default=0, help="the server's process id (RSS, GPU memory)")
    ap.add_argument("--model", default="m")
    ap.add_argument("--requests", type=int, default=10000)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--cancel-fraction", type=float, default=0.2)
    ap.add_argument("--video-file", default="")
    ap.add_argument("--methods", default="none,mminference,look_m,sink_router,all")
    ap.add_argument("--warmup-fraction", type=float, default=0.1)
    ap.add_argument("--sample-s", type=float, default=2.0)
    ap.add_argument("--rss-bound-mib", type=float, default=256.0)
    ap.add_argument("--gpu-bound-mib", type=float, default=256.0)
    ap.add_argument("--request-timeout", type=float, default=300.0)
    ap.add_argument("--seed", type=int, default=45)
    ap.add_argument("--result", default="")
    ap.add_argument("--verbose", action="store_true")
    a = ap.parse_args()
    for m in a.methods.split(","):
        if m not in METHOD_OPTIONS:
            ap.error(f"--methods: unknown '{m}' (of {', '.join(METHOD_OPTIONS)})")
    s = Soak(a)
    status, _ = s.get("/health")
    if status != 200:
        print(f"/health answers {status} before the run"); return 1
    t0 = time.time()
    sam = threading.Thread(target=s.sampler, args=(t0,), daemon=True)
    sam.start()
    workers = [threading.Thread(target=s.worker, daemon=True) for _ in range(a.concurrency)]
    for w in workers:
        w.start()
    last = 0.0
    while any(w.is_alive() for w in workers):
        time.sleep(0.5)
        if time.time() - last >= 30:
            last = time.time()
            with s.lock:
                print(f"  {time.time() - t0:6.0f} s: {s.done} of {a.requests} done, statuses {s.status}", flush=True)
    wall = time.time() - t0
    # Bounded wait for the engine to go idle (aborts of cancelled streams land a step later).
    m = ""
    for _ in range(600):
        _, m = s.get("/metrics")
        if metric(m, "vllm:num_requests_running") == 0 and metric(m, "vllm:num_requests_waiting") == 0 and \
                metric(m, "vllm:kv_cache_usage_perc") == 0:
            break
        time.sleep(0.1)
    s.stop_sampling.set()
    sam.join(timeout=30)
    health, _ = s.get("/health")
    warm_done = int(a.requests * a.warmup_fraction)
    rss, gpu = flat(s.samples, 2, warm_done), flat(s.samples, 3, warm_done)
    n5xx = sum(c for k, c in s.status.items() if k >= 500) + sum(c for k, c in s.stream_errors.items() if k >= 500)
    n4xx = sum(c for k, c in s.status.items() if 400 <= k < 500) + sum(c for k, c in s.stream_errors.items() if 400 <= k < 500)
    kv = metric(m, "vllm:kv_cache_usage_perc")
    hits, queries = metric(m, "vllm:prefix_cache_hits_total") or 0, metric(m, "vllm:prefix_cache_queries_total") or 0
    checks = {
        "0 5xx (replies and stream error events)": n5xx == 0,
        "0 connection failures": s.conn_failures == 0,
        "0 streams with two [DONE]": s.double_done == 0,
        "0 KV blocks in use at the end": kv == 0,
        "nothing running or waiting at the end": metric(m, "vllm:num_requests_running") == 0
        and metric(m, "vllm:num_requests_waiting") == 0,
        "/health 200 at the end": health == 200,
        f"RSS flat after warm-up (growth <= {a.rss_bound_mib:g} MiB)": rss is None or rss[3] <= a.rss_bound_mib,
        f"GPU memory flat after warm-up (growth <= {a.gpu_bound_mib:g} MiB)": gpu is None or gpu[3] <= a.gpu_bound_mib,
    }
    rss_h, gpu_h = half_growth(s.samples, 2, a.requests), half_growth(s.samples, 3, a.requests)

    def fmt(v, h):
        if v is None:
            return "not sampled"
        half = "not sampled" if h is None else f"+{h:.1f}"
        return f"{v[0]:.1f} / {v[1]:.1f} / {v[2]:.1f} MiB (+{v[3]:.1f}; second half of the requests {half})"
    print()
    print(f"| figure | value |")
    print(f"| --- | --- |")
    print(f"| requests | {a.requests} at concurrency {a.concurrency}, max_tokens {a.max_tokens} (ignore_eos), "
          f"kinds {dict(sorted(s.kinds.items()))}, methods {a.methods} |")
    print(f"| wall time | {wall:.1f} s ({a.requests / wall:.1f} req/s) |")
    print(f"| HTTP statuses | {dict(sorted(s.status.items()))} |")
    print(f"| 5xx (replies + stream error events) / 4xx | {n5xx} / {n4xx} |")
    print(f"| streams cancelled after their first content chunk | {s.cancelled} |")
    print(f"| connection failures / streams with two [DONE] | {s.conn_failures} / {s.double_done} |")
    print(f"| KV cache usage at the end | {kv} (running {metric(m, 'vllm:num_requests_running')}, "
          f"waiting {metric(m, 'vllm:num_requests_waiting')}) |")
    print(f"| prefix cache hit rate (tokens) | {hits:.0f} / {queries:.0f} = "
          f"{(100 * hits / queries if queries else 0):.1f} % |")
    print(f"| LOOK-M compressions / SinkRouter groups routed / sparse-prefilled prompts | "
          f"{metric(m, 'vlm:look_m_compressions_total')} / {metric(m, 'vlm:sink_router_groups_routed_total') or 0} / "
          f"{metric(m, 'vlm:prefill_attention_density_count')} |")
    print(f"| processed-media cache hits / queries | {metric(m, 'vlm:mm_processor_cache_hits_total')} / "
          f"{metric(m, 'vlm:mm_processor_cache_queries_total')} |")
    print(f"| server RSS after warm-up / peak / final | {fmt(rss, rss_h)} |")
    print(f"| GPU memory after warm-up / peak / final | {fmt(gpu, gpu_h)} |")
    print(f"| /health at the end | {health} |")
    print()
    for k, ok in checks.items():
        print(f"{'PASS' if ok else 'FAIL'}  {k}")
    for f in s.failures:
        print("  failure:", f)
    if a.result:
        with open(a.result, "w") as f:
            json.dump({"args": vars(a), "wall_s": wall, "status": s.status, "stream_errors": s.stream_errors,
                       "kinds": s.kinds, "cancelled": s.cancelled, "conn_failures": s.conn_failures,
                       "kv_usage": kv, "prefix_hits": hits, "prefix_queries": queries, "rss": rss, "gpu": gpu,
                       "rss_second_half_growth": rss_h, "gpu_second_half_growth": gpu_h,
                       "samples": s.samples, "checks": checks, "failures": s.failures}, f, indent=1)
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
