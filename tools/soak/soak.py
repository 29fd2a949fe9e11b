#!/usr/bin/env python3
"""Soak test: vlm-bench load plus a misbehaving client against a real vlm-server (demo model).

    tools/soak/soak.py --bin-dir build/bin [--requests 10000] [--concurrency 32]
                       [--misbehave 2000] [--rss-bound-mib 64] [--result soak.json]

Starts the demo model (vlm-random-model tiny-qwen2 with the Qwen3 tokenizer from tests/data),
then runs at the same time
  - vlm-bench: --requests chat requests, streaming, at --concurrency;
  - a misbehaving client (--misbehave actions, 4 threads): streams cut after the first chunk,
    non-streaming requests abandoned before the reply, slow readers (a few bytes at a time),
    and malformed requests (bad JSON, wrong types, garbage bytes, truncated HTTP).
Afterwards it checks, and exits 1 if any fails:
  - the server process is alive and /health is 200;
  - vllm:kv_cache_usage_perc == 0 and no request running or waiting (polled, bounded);
  - accounting: every request the server accepted ended exactly once: finished (the sum over
    finished_reason of vllm:request_success_total) + aborted (log lines "request failed: 499",
    a client that left) + failed (other "request failed") equals the accepted requests (bench
    completed + misbehaving requests that got a 200 status line or were sent whole and
    abandoned + warm-up); no malformed request got a 5xx; no stream carried two [DONE];
  - resident memory: final RSS - RSS after warm-up <= --rss-bound-mib;
  - SIGTERM ends the server with status 0.
Every process it starts it stops by pid; every wait is bounded.
"""
import argparse
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return 0.0


def http(port, method, path, body=b"", timeout=60.0, raw=None):
    """One request on a fresh connection; returns (status, body bytes). status 0: no answer."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        if raw is None:
            raw = (f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                   f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body
        s.sendall(raw)
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    except OSError:
        return 0, b""
    finally:
        s.close()
    m = re.match(rb"HTTP/1\.[01] (\d+)", data)
    return (int(m.group(1)) if m else 0), data


def metric_sum(text, name):
    total, found = 0.0, False
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            total += float(line.rsplit(" ", 1)[1])
            found = True
    return total if found else -1.0


# A system message of about 100 tokens (6 KV blocks of 16): the warm-up repeats it 20 times
# (identical prompts hit every full block but the last) and the misbehaving clients share it.
SHARED_SYSTEM = " ".join("You are a careful assistant taking part in soak test number %d of the server." % i
                         for i in range(6))


class Misbehaver:
    def __init__(self, port, n, seed):
        self.port, self.n = port, n
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.counts = {}
        self.accepted = 0       # requests answered with a 200 status line
        self.bad_5xx = 0
        self.double_done = 0

    def count(self, kind):
        with self.lock:
            self.counts[kind] = self.counts.get(kind, 0) + 1

    def chat(self, stream, max_tokens):
        # The shared system message spans several KV blocks: these requests hit the prefix cache
        # and then abort, disconnect or read slowly while they hold cached blocks.
        return json.dumps({"model": "demo", "messages": [{"role": "system", "content": SHARED_SYSTEM},
                                                         {"role": "user", "content": "soak %d" % self.rng.randrange(1 << 30)}],
                           "max_tokens": max_tokens, "stream": stream, "ignore_eos": True}).encode()

    def request_bytes(self, body):
        return (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n" % len(body)) + body

    def cut_stream(self):
        s = socket.create_connection(("127.0.0.1", self.port), timeout=60)
        s.sendall(self.request_bytes(self.chat(True, 64)))
        data = s.recv(4096)
        if data.startswith(b"HTTP/1.1 200"):
            with self.lock:
                self.accepted += 1
        s.close()  # mid-stream
        self.count("disconnect_mid_stream")

    def abandon(self):
        s = socket.create_connection(("127.0.0.1", self.port), timeout=60)
        s.sendall(self.request_bytes(self.chat(False, 64)))
        s.close()  # before the reply; the server read the whole request, so it was accepted
        with self.lock:
            self.accepted += 1
        self.count("abandon_before_reply")

    def slow_reader(self):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.settimeout(120)
        s.connect(("127.0.0.1", self.port))
        s.sendall(self.request_bytes(self.chat(True, 24)))
        data = b""
        for _ in range(20000):
            chunk = s.recv(64)
            if not chunk:
                break
            data += chunk
            if data.endswith(b"0\r\n\r\n"):
                break
            time.sleep(0.002)
        s.close()
        if data.startswith(b"HTTP/1.1 200"):
            with self.lock:
                self.accepted += 1
                if data.count(b"data: [DONE]") > 1:
                    self.double_done += 1
        self.count("slow_reader")

    def malformed(self):
        kind = self.rng.randrange(5)
        if kind == 0:
            st, _ = http(self.port, "POST", "/v1/chat/completions", b'{"messages": [')
        elif kind == 1:
            st, _ = http(self.port, "POST", "/v1/chat/completions", b'{"messages": "x", "max_tokens": "many"}')
        elif kind == 2:
            st, _ = http(self.port, "POST", "/v1/completions", json.dumps({"prompt": "x", "temperature": -3}).encode())
        elif kind == 3:
            st, _ = http(self.port, "", "", raw=bytes(self.rng.randrange(256) for _ in range(200)) + b"\r\n\r\n")
        else:  # truncated: promises more body than it sends, then closes
            st, _ = http(self.port, "", "", raw=b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"pro")
        if st >= 500:
            with self.lock:
                self.bad_5xx += 1
        self.count("malformed")

    def run(self, threads=4):
        actions = [self.cut_stream, self.abandon, self.slow_reader, self.malformed]
        plan = [self.rng.choice(actions) for _ in range(self.n)]
        it = iter(plan)
        lock = threading.Lock()

        def worker():
            while True:
                with lock:
                    a = next(it, None)
                if a is None:
                    return
                try:
                    a()
                except OSError:
                    self.count("client_socket_error")

        ts = [threading.Thread(target=worker) for _ in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin-dir", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--requests", type=int, default=10000)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--misbehave", type=int, default=2000)
    ap.add_argument("--output-len", type=int, default=16)
    ap.add_argument("--rss-bound-mib", type=float, default=64.0)
    ap.add_argument("--result", default="")
    ap.add_argument("--seed", type=int, default=1)
    # Prefix caching is on (the server's default); a small cache adds preemptions and evictions.
    ap.add_argument("--num-kv-blocks", type=int, default=2048)
    ap.add_argument("--server-args", default="", help="extra vlm-server flags, space separated")
    a = ap.parse_args()

    tmp = tempfile.mkdtemp(prefix="vlm_soak_")
    model = os.path.join(tmp, "model")
    subprocess.run([os.path.join(a.bin_dir, "vlm-random-model"), "--preset", "tiny-qwen2", "--std", "0.3", "--seed", "1",
                    "--out", model, "--tokenizer-from", os.path.join(ROOT, "tests", "data", "tokenizers", "qwen3")],
                   check=True, stdout=subprocess.DEVNULL)
    log = open(os.path.join(tmp, "server.log"), "w+")
    server = subprocess.Popen([os.path.join(a.bin_dir, "vlm-server"), "--model", model, "--served-model-name", "demo",
                               "--host", "127.0.0.1", "--port", "0", "--kv-cache-dtype", "f32", "--num-kv-blocks", str(a.num_kv_blocks),
                               "--max-model-len", "512", "--threads", "2", "--log-level", "info"] + a.server_args.split(),
                              stderr=log, stdout=log)
    failures = []
    result = {}
    try:
        port = 0
        for _ in range(600):
            log.seek(0)
            m = re.search(r"ready: http://127\.0\.0\.1:(\d+)", log.read())
            if m:
                port = int(m.group(1))
                break
            if server.poll() is not None:
                break
            time.sleep(0.1)
        if not port:
            log.seek(0)
            sys.exit("soak: the server did not start:\n" + log.read())
        # Warm-up: 20 identical multi-block prompts (the prefix cache answers all but the last
        # block of each after the first), then the RSS baseline.
        for _ in range(20):
            http(port, "POST", "/v1/chat/completions",
                 json.dumps({"messages": [{"role": "system", "content": SHARED_SYSTEM}, {"role": "user", "content": "warm"}],
                             "max_tokens": a.output_len}).encode())
        rss_base = rss_mib(server.pid)
        rss_peak = [rss_base]
        stop = threading.Event()

        def sample():
            while not stop.wait(0.5):
                try:
                    rss_peak[0] = max(rss_peak[0], rss_mib(server.pid))
                except OSError:
                    return

        sampler = threading.Thread(target=sample)
        sampler.start()
        bench_json = os.path.join(tmp, "bench.json")
        t0 = time.time()
        bench = subprocess.Popen([os.path.join(a.bin_dir, "vlm-bench"), "--base-url", f"http://127.0.0.1:{port}",
                                  "--endpoint", "chat", "--model", "demo", "--dataset", "random",
                                  "--num-prompts", str(a.requests), "--max-concurrency", str(a.concurrency),
                                  "--input-len", "32", "--output-len", str(a.output_len), "--no-progress",
                                  "--seed", str(a.seed), "--timeout", "3500", "--result-json", bench_json],
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        mis = Misbehaver(port, a.misbehave, a.seed)
        mis.run()
        bench_out, _ = bench.communicate(timeout=3600)
        wall = time.time() - t0
        stop.set()
        sampler.join()
        with open(bench_json) as f:
            b = json.load(f)
        completed = int(b.get("completed", 0))
        failed = int(b.get("failed", 0))

        # Let aborted and abandoned requests wind down (bounded), then read the server's counters.
        metrics = ""
        for _ in range(600):
            _, raw = http(port, "GET", "/metrics", timeout=30)
            metrics = raw.split(b"\r\n\r\n", 1)[-1].decode(errors="replace")
            if metric_sum(metrics, "vllm:num_requests_running") == 0 and metric_sum(metrics, "vllm:num_requests_waiting") == 0:
                break
            time.sleep(0.1)
        kv = metric_sum(metrics, "vllm:kv_cache_usage_perc")
        finished = metric_sum(metrics, "vllm:request_success_total")
        reasons = {m.group(1): float(m.group(2)) for m in
                   re.finditer(r'vllm:request_success_total\{[^}]*finished_reason="([^"]+)"[^}]*\} (\S+)', metrics)}
        rss_final = rss_mib(server.pid)
        health, _ = http(port, "GET", "/health")
        accepted = completed + mis.accepted + 20  # + warm-up
        # Requests that ended without a finish reason are logged once each at info level:
        # 499 for a client that left, other statuses for failures.
        log.seek(0)
        server_log = log.read()
        aborted = server_log.count("request failed: 499 ")
        failed_other = server_log.count("request failed: ") - aborted
        result = {
            "requests_bench": a.requests, "bench_completed": completed, "bench_failed": failed,
            "misbehaving_actions": mis.counts, "misbehaving_accepted": mis.accepted,
            "malformed_5xx": mis.bad_5xx, "double_done": mis.double_done,
            "server_finished_total": finished, "finished_by_reason": reasons, "server_aborted_499": aborted,
            "server_failed_other": failed_other, "accepted_total": accepted,
            "kv_cache_usage_perc_end": kv, "rss_mib_after_warmup": round(rss_base, 1),
            "rss_mib_peak": round(rss_peak[0], 1), "rss_mib_final": round(rss_final, 1), "wall_s": round(wall, 1),
            "health_end": health,
            "preemptions": metric_sum(metrics, "vllm:num_preemptions_total"),
            "prefix_cache_queries": metric_sum(metrics, "vllm:prefix_cache_queries_total"),
            "prefix_cache_hits": metric_sum(metrics, "vllm:prefix_cache_hits_total"),
            "integrity_errors_logged": server_log.count("integrity check failed"),
        }
        if health != 200:
            failures.append(f"/health answered {health}")
        if kv != 0:
            failures.append(f"kv_cache_usage_perc is {kv} at the end")
        if result["integrity_errors_logged"]:
            failures.append(f"the server logged {result['integrity_errors_logged']} block integrity problems")
        if "--no-enable-prefix-caching" not in a.server_args.split() and result["prefix_cache_hits"] <= 0:
            failures.append("no prefix-cache hit (the warm-up and the misbehaving clients repeat a prefix)")
        if failed != 0:
            failures.append(f"vlm-bench saw {failed} failed requests")
        if mis.bad_5xx:
            failures.append(f"{mis.bad_5xx} malformed requests got a 5xx")
        if mis.double_done:
            failures.append(f"{mis.double_done} streams carried two [DONE]")
        if finished + aborted + failed_other != accepted:
            failures.append(f"the server ended {finished} + aborted {aborted} + failed {failed_other} requests, "
                            f"{accepted} were accepted")
        if rss_final - rss_base > a.rss_bound_mib:
            failures.append(f"RSS grew {rss_final - rss_base:.1f} MiB (bound {a.rss_bound_mib})")
    finally:
        if server.poll() is None:
            server.send_signal(signal.SIGTERM)
            try:
                rc = server.wait(timeout=60)
            except subprocess.TimeoutExpired:
                server.kill()
                rc = server.wait()
            result["exit_status"] = rc
            if rc != 0:
                failures.append(f"SIGTERM exit status {rc}")
        else:
            failures.append(f"the server died (status {server.returncode})")
    result["failures"] = failures
    text = json.dumps(result, indent=1)
    print(text)
    if a.result:
        with open(a.result, "w") as f:
            f.write(text + "\n")
    if failures:
        log.seek(0)
        print("soak: FAILED\n" + log.read()[-4000:], file=sys.stderr)
        sys.exit(1)
    print("soak: clean")


if __name__ == "__main__":
    main()
