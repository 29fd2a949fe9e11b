#!/usr/bin/env python3
"""Replica test: three vlm-server replicas behind Debian's nginx, everything on 127.0.0.1.

Runs docker/deploy/nginx.conf as shipped (only its upstream, listen and access_log lines are
rewritten for loopback ports and a temporary directory) and checks:
  1. streaming passes through nginx intact: the first SSE event reaches the client while the
     generation is still running on a replica (nginx does not buffer), events are well-formed,
     end with [DONE], and the text equals the same greedy request sent to a replica directly;
  2. non-streaming requests through nginx all succeed (vlm-bench --no-stream), and the web
     playground's page and files arrive through nginx as a replica serves them;
  3. failover: vlm-bench streams through nginx while one replica is killed (SIGKILL, by pid) and
     restarted: the only failed requests are ones that were in flight on the killed replica
     (counted from nginx's access log), every request that started after the kill succeeds,
     and the restarted replica serves requests again (its own /metrics counter grows);
  4. (--full) graceful drain: SIGTERM on a replica mid-run fails no request;
  5. (--full) throughput through nginx with 1 replica vs 3 replicas, same workload.

Everything it starts (replicas, nginx, vlm-bench) is stopped by pid on exit, and every wait is
bounded. Exit 0: passed; 1: a check failed; 77: skipped (nginx is not installed).

  tests/scaleout/replica_test.py --bin-dir build/bin --tokenizer tests/data/tokenizers/qwen3 \
      [--full] [--report FILE.json]
"""
import argparse
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from replica_cluster import (  # noqa: E402
    CHILDREN, ROOT, CheckFailed, Nginx, Replica, check, free_port, http_get, log, metric_sum, nginx_binary,
    render_nginx_conf, stop_all, stop_process, wait_until)

def chat_body(max_tokens, stream, content="Say something long."):
    return json.dumps({"model": "demo", "messages": [{"role": "user", "content": content}],
                       "max_tokens": max_tokens, "ignore_eos": True, "temperature": 0, "stream": stream})


def first_event_check(front_port, replicas):
    """A long generation streamed through nginx: its first SSE event must reach the client while
    the replica is still generating (a buffering proxy would hold it back until the end). The
    client then hangs up, which nginx passes on to the replica (it cancels the request)."""
    c = http.client.HTTPConnection("127.0.0.1", front_port, timeout=120)
    c.request("POST", "/v1/chat/completions", chat_body(3000, True), {"Content-Type": "application/json"})
    r = c.getresponse()
    check(r.status == 200, f"long streaming request through nginx answered 200 (got {r.status})")
    # Wait for the 5th token: the replica publishes its gauges after each engine step, so the
    # first events can arrive before the gauge counts the request.
    tokens = 0
    while tokens < 5:
        line = r.readline()
        if not line:
            raise CheckFailed("the long stream ended before its 5th token")
        if line.startswith(b"data: {") and any(c.get("delta", {}).get("content")
                                               for c in json.loads(line[6:]).get("choices", [])):
            tokens += 1
    running = sum(metric_sum(rep.port, "vllm:num_requests_running") for rep in replicas)
    c.close()
    check(running >= 1, f"the first tokens' SSE events arrived while the 3000-token generation was still running "
          f"(vllm:num_requests_running over the replicas = {running}): nginx does not buffer")
    wait_until(lambda: sum(metric_sum(rep.port, "vllm:num_requests_running") for rep in replicas) == 0, 60,
               "the replicas to go idle after the client hung up")


def stream_check(front_port, replicas, max_tokens):
    """One greedy streaming chat request through nginx, one straight to a replica."""
    c = http.client.HTTPConnection("127.0.0.1", front_port, timeout=120)
    c.request("POST", "/v1/chat/completions", chat_body(max_tokens, True), {"Content-Type": "application/json"})
    r = c.getresponse()
    check(r.status == 200, f"streaming request through nginx answered 200 (got {r.status})")
    check(r.getheader("Content-Type", "").startswith("text/event-stream"),
          "Content-Type text/event-stream survives the proxy")
    events, text = [], ""
    while True:
        line = r.readline()
        if not line:
            break
        line = line.decode("utf-8").rstrip("\r\n")
        if not line.startswith("data: "):
            if line != "":
                raise CheckFailed(f"SSE line is neither 'data: ...' nor blank: {line[:60]!r}")
            continue
        events.append(line[6:])
    c.close()
    check(len(events) >= 3 and events[-1] == "[DONE]", f"{len(events)} SSE events, the last is [DONE]")
    for e in events[:-1]:
        chunk = json.loads(e)
        for choice in chunk.get("choices", []):
            text += choice.get("delta", {}).get("content") or ""
    check("[DONE]" not in events[:-1], "no event after [DONE]")
    direct = http.client.HTTPConnection("127.0.0.1", replicas[0].port, timeout=120)
    direct.request("POST", "/v1/chat/completions", chat_body(max_tokens, False), {"Content-Type": "application/json"})
    d = direct.getresponse()
    ref = json.loads(d.read())["choices"][0]["message"]["content"]
    direct.close()
    check(text == ref, f"streamed text through nginx ({len(text)} chars) equals the direct greedy answer")
    return len(events)


def webui_check(front_port, replicas):
    """The web playground (server/webui) through nginx: the page and its files arrive as a replica
    serves them, security headers included; the page calls the API with relative URLs only."""
    def get(port, path):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        try:
            c.request("GET", path)
            r = c.getresponse()
            return r.status, r.read(), r.getheader("Content-Security-Policy"), r.getheader("Content-Type")
        finally:
            c.close()
    page = get(front_port, "/")
    check(page[0] == 200 and page[1] == get(replicas[0].port, "/")[1],
          "the playground page through nginx equals a replica's")
    files = re.findall(rb'(?:src|href)="(ui/[a-z_]+\.[a-z]+)"', page[1])
    for f in files:
        via, direct = get(front_port, "/" + f.decode()), get(replicas[0].port, "/" + f.decode())
        check(via == direct and via[0] == 200 and via[2] and "script-src 'self'" in via[2],
              f"/{f.decode()} through nginx: 200, {via[3]}, the same bytes and Content-Security-Policy")
    check(len(files) >= 3 and b"http://" not in page[1] and b"https://" not in page[1],
          f"the page links {len(files)} files of its own and no absolute URL")


def run_bench(args, front_port, result_json, extra, timeout_s):
    cmd = [os.path.join(args.bin_dir, "vlm-bench"), "--base-url", f"http://127.0.0.1:{front_port}",
           "--endpoint", "chat", "--model", "demo", "--dataset", "random", "--seed", "1",
           "--timeout", str(timeout_s), "--request-timeout", str(timeout_s), "--no-progress",
           "--result-json", result_json] + extra
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def finish_bench(p, timeout_s, result_json):
    try:
        _, err = p.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        p.kill()
        raise CheckFailed(f"vlm-bench did not finish within {timeout_s} s")
    if not os.path.exists(result_json):
        raise CheckFailed(f"vlm-bench wrote no result (exit {p.returncode}): {err[-2000:]}")
    with open(result_json) as f:
        return json.load(f)


def failover(args, tmp, nginx, replicas, target, sig, name, n, rate, conc, io):
    """Streams n requests through nginx at `rate`/s; sig hits replica `target` mid-run, which is
    then restarted. Returns the figures; raises CheckFailed on a broken promise."""
    result_json = os.path.join(tmp, f"{name}.json")
    before = len(nginx.entries())
    bench_timeout = n / rate + 60
    bench = run_bench(args, nginx.port, result_json,
                      ["--num-prompts", str(n), "--request-rate", str(rate), "--max-concurrency", str(conc),
                       "--input-len", str(io[0]), "--output-len", str(io[1])], bench_timeout)
    CHILDREN.append(bench)
    rep = replicas[target]
    # Hit the replica once the run is under way and the replica has a request in flight.
    t_begin = time.time()
    wait_until(lambda: time.time() - t_begin >= args.kill_after_s
               and metric_sum(rep.port, "vllm:num_requests_running") >= 1, 30, f"replica {target} busy", 0.01)
    in_flight = int(metric_sum(rep.port, "vllm:num_requests_running") + metric_sum(rep.port, "vllm:num_requests_waiting"))
    t_kill = time.time()
    rep.proc.send_signal(sig)
    log(f"{name}: sent {signal.Signals(sig).name} to replica {target} (pid {rep.proc.pid})")
    rep.proc.wait(timeout=30)
    t_dead = time.time()
    exit_code = rep.proc.returncode
    time.sleep(max(0.0, args.down_s - (t_dead - t_kill)))
    rep.start()
    rep.wait_ready()
    t_up = time.time()
    log(f"{name}: replica {target} back after {t_up - t_kill:.1f} s (pid {rep.proc.pid})")
    res = finish_bench(bench, bench_timeout + 30, result_json)
    t_bench_end = time.time()
    time.sleep(0.3)  # nginx writes the access log line when the request ends
    entries = nginx.entries()[before:]
    ok_after_restart = metric_sum(rep.port, "vllm:request_success_total")

    completed, failed = res["completed"], res["failed"]
    # A request failed at nginx when the replica answered 5xx / reset the connection (status >= 500)
    # or cut the stream after the headers (status 200 but $request_completion is not OK).
    failed_at_nginx = [e for e in entries if e["failed"]]
    on_target = [e for e in entries if e["final_upstream"] == rep.addr]
    # Started after the replica was up again (nginx's clock: $msec - $request_time).
    after_up = [e for e in entries if e["start"] > t_up]
    to_restarted = [e for e in after_up if e["final_upstream"] == rep.addr]
    retried = [e for e in entries if ", " in e["upstream"]]
    # Report only (it compares nginx's clock with this script's): requests that started while the
    # replica was down, i.e. after the signal and before it was back.
    while_down = [e for e in entries if t_kill < e["start"] < t_up]
    ok_streams = [r for r in res["requests"] if r["success"]]
    figures = {
        "signal": signal.Signals(sig).name, "replica_exit_code": exit_code,
        "sent": n, "succeeded": completed, "failed": failed,
        "failures_by_kind": res.get("failures_by_status", {}),
        "failed_at_nginx_on_target": sum(1 for e in failed_at_nginx if e["final_upstream"] == rep.addr),
        "failed_at_nginx_elsewhere": sum(1 for e in failed_at_nginx if e["final_upstream"] != rep.addr),
        "in_flight_on_target_at_signal": in_flight,
        "requests_to_target": len(on_target),
        "retried_by_nginx": len(retried),
        "down_s": round(t_up - t_kill, 2),
        "started_while_down": len(while_down),
        "started_while_down_failed": sum(1 for e in while_down if e["failed"]),
        "started_after_back_up": len(after_up),
        "started_after_back_up_ok": sum(1 for e in after_up if not e["failed"]),
        "restarted_replica_requests_ok": ok_after_restart,
        "nginx_entries_to_restarted_replica": len(to_restarted),
        "duration_s": res["duration"], "request_throughput": res["request_throughput"],
        "stream_checks": res["stream_checks"],
    }
    log(f"{name}: {json.dumps(figures)}")
    check(completed + failed == n, f"{name}: every request was sent and answered ({completed} + {failed} == {n})")
    check(len(entries) == n, f"{name}: nginx logged {len(entries)} of the {n} requests")
    check(figures["failed_at_nginx_elsewhere"] == 0,
          f"{name}: no request failed on a replica other than the one signalled")
    check(failed == len(failed_at_nginx),
          f"{name}: the client's failures ({failed}) are exactly the requests nginx saw fail on the signalled replica")
    if sig == signal.SIGKILL:
        # A request in flight on the killed replica either fails or, if nginx had not yet passed on
        # a byte of its answer, is retried on another replica (proxy_next_upstream).
        check(failed + len(retried) >= 1 or in_flight == 0,
              f"{name}: the kill cost {failed} requests and nginx retried {len(retried)} ({in_flight} were on the replica)")
    else:
        check(exit_code == 0, f"{name}: the drained replica exited 0")
        check(failed == 0, f"{name}: no request failed during the graceful drain (failed {failed})")
    check(figures["started_after_back_up_ok"] == len(after_up),
          f"{name}: all {len(after_up)} requests that started after the replica was back succeeded")
    if t_up > t_bench_end:
        log(f"{name}: the replica was back only after the run ended ({t_up - t_kill:.1f} s after the signal): "
            "the follow-up run shows it serving")
    # Follow-up run once nginx has stopped skipping the replica (fail_timeout after its last failure):
    # every request succeeds, and the restarted replica takes its share.
    time.sleep(nginx.fail_timeout_s + 0.5)
    before = len(nginx.entries())
    n_after = 60 if args.full else 18
    p = run_bench(args, nginx.port, result_json + ".after", ["--num-prompts", str(n_after), "--max-concurrency", "6",
                                                             "--input-len", str(io[0]), "--output-len", str(io[1])], 120)
    CHILDREN.append(p)
    after = finish_bench(p, 150, result_json + ".after")
    ok_total = metric_sum(rep.port, "vllm:request_success_total")
    figures["after_restart"] = {"sent": n_after, "succeeded": after["completed"], "failed": after["failed"],
                                "restarted_replica_requests_ok_total": ok_total,
                                "to_restarted_replica": sum(1 for e in nginx.entries()[before:] if e["final_upstream"] == rep.addr)}
    log(f"{name}: after restart {json.dumps(figures['after_restart'])}")
    check(after["completed"] == n_after, f"{name}: all {n_after} requests after the restart succeeded")
    check(ok_total >= 1 and figures["after_restart"]["to_restarted_replica"] >= 1,
          f"{name}: the restarted replica serves again ({int(ok_total)} requests since its restart)")
    bad_streams = [r for r in ok_streams if not r["done_seen"] or r["chunks_after_done"]]
    check(not bad_streams, f"{name}: every successful stream ended with [DONE] and nothing after it "
          f"({len(ok_streams)} streams, {len(bad_streams)} not)")
    return figures


def throughput(args, tmp, nginx, name, n, conc, io):
    result_json = os.path.join(tmp, f"{name}.json")
    p = run_bench(args, nginx.port, result_json, ["--num-prompts", str(n), "--max-concurrency", str(conc),
                                                   "--input-len", str(io[0]), "--output-len", str(io[1])], 300)
    CHILDREN.append(p)
    res = finish_bench(p, 330, result_json)
    check(res["failed"] == 0, f"{name}: {res['completed']} requests, none failed")
    return {"request_throughput": res["request_throughput"], "output_throughput": res["output_throughput"],
            "duration_s": res["duration"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin-dir", required=True)
    ap.add_argument("--tokenizer", required=True, help="tokenizer folder for the demo model (qwen3)")
    ap.add_argument("--full", action="store_true", help="longer failover run, drain phase, 1-vs-3 throughput")
    ap.add_argument("--report", help="write the figures here (JSON)")
    ap.add_argument("--threads", type=int, default=0, help="--threads for each replica (default: server default)")
    ap.add_argument("--kill-after-s", type=float, default=None)
    ap.add_argument("--down-s", type=float, default=None)
    ap.add_argument("--keep-tmp", action="store_true")
    args = ap.parse_args()
    if args.kill_after_s is None:
        args.kill_after_s = 4.0 if args.full else 1.0
    if args.down_s is None:
        args.down_s = 3.0 if args.full else 1.0

    nginx = nginx_binary()
    if not nginx:
        print("SKIP: nginx is not installed (scripts/setup.sh installs Debian's nginx)", flush=True)
        return 77
    for tool in ("vlm-server", "vlm-bench", "vlm-random-model"):
        if not os.access(os.path.join(args.bin_dir, tool), os.X_OK):
            print(f"replica_test: {args.bin_dir}/{tool} is missing (build it first)", file=sys.stderr)
            return 1
    if not os.path.exists(os.path.join(args.tokenizer, "tokenizer.json")):
        print(f"replica_test: no tokenizer.json under {args.tokenizer} (scripts/fetch_test_data.sh)", file=sys.stderr)
        return 1

    tmp = tempfile.mkdtemp(prefix="vlm_replica_test_")
    t_start = time.time()
    figures = {"mode": "full" if args.full else "short", "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
               "cpus": os.cpu_count()}
    try:
        model = os.path.join(tmp, "model")
        subprocess.run([os.path.join(args.bin_dir, "vlm-random-model"), "--preset", "tiny-qwen2", "--std", "0.3",
                        "--seed", "1", "--out", model, "--tokenizer-from", args.tokenizer],
                       check=True, stdout=subprocess.DEVNULL, timeout=120)
        replicas = [Replica(args, model, tmp, i) for i in range(3)]
        for r in replicas:
            r.start()
        for r in replicas:
            r.wait_ready()
        log(f"replicas on ports {[r.port for r in replicas]}")
        front = Nginx(tmp, "nginx3", [r.addr for r in replicas])
        front.start(nginx)
        log(f"nginx on port {front.port}")

        # 1. Streaming passes through intact.
        first_event_check(front.port, replicas)
        figures["stream_events"] = stream_check(front.port, replicas, 400 if args.full else 200)
        webui_check(front.port, replicas)
        # A request over the body limit stops at nginx with a 413.
        c = http.client.HTTPConnection("127.0.0.1", front.port, timeout=30)
        c.request("POST", "/v1/chat/completions", b"x" * (33 << 20), {"Content-Type": "application/json"})
        status = c.getresponse().status
        c.close()
        check(status == 413, f"a 33 MiB body is refused by nginx with 413 (got {status})")

        # 2. Non-streaming through nginx.
        n_ns = 60 if args.full else 24
        p = run_bench(args, front.port, os.path.join(tmp, "non_stream.json"),
                      ["--no-stream", "--num-prompts", str(n_ns), "--max-concurrency", "6",
                       "--input-len", "32", "--output-len", "16"], 120)
        CHILDREN.append(p)
        res = finish_bench(p, 150, os.path.join(tmp, "non_stream.json"))
        check(res["completed"] == n_ns and res["failed"] == 0, f"non-streaming: {res['completed']}/{n_ns} succeeded")
        spread = [metric_sum(r.port, "vllm:request_success_total") for r in replicas]
        check(all(s >= 1 for s in spread), f"least_conn spread the requests over all replicas {spread}")
        figures["non_stream"] = {"sent": n_ns, "succeeded": res["completed"], "per_replica": spread}

        # 3. Failover: SIGKILL one replica mid-run, restart it.
        n, rate = (400, 10.0) if args.full else (60, 12.0)
        figures["kill"] = failover(args, tmp, front, replicas, 1, signal.SIGKILL, "kill", n, rate, 8, (64, 48))
        if args.full:
            # 4. Graceful drain: SIGTERM one replica mid-run, restart it.
            figures["drain"] = failover(args, tmp, front, replicas, 2, signal.SIGTERM, "drain", 300, 10.0, 8, (64, 48))
            # 5. Throughput, 1 vs 3 replicas (same nginx config; the replicas share the machine's cores).
            single = Nginx(tmp, "nginx1", [replicas[0].addr])
            single.start(nginx)
            io, n_tp, conc = (128, 64), 96, 12
            runs = {"1": [], "3": []}
            for rep in range(3):  # interleaved; best and median of 3
                runs["1"].append(throughput(args, tmp, single, f"tp1_{rep}", n_tp, conc, io))
                runs["3"].append(throughput(args, tmp, front, f"tp3_{rep}", n_tp, conc, io))
            best = {k: max(v, key=lambda x: x["output_throughput"]) for k, v in runs.items()}
            median = {k: sorted(v, key=lambda x: x["output_throughput"])[len(v) // 2] for k, v in runs.items()}
            figures["throughput"] = {"workload": {"num_prompts": n_tp, "max_concurrency": conc, "input_len": io[0],
                                                  "output_len": io[1], "stream": True},
                                     "runs": runs, "best": best, "median": median,
                                     "median_ratio_3_over_1": median["3"]["output_throughput"] / median["1"]["output_throughput"],
                                     "ratio_3_over_1": best["3"]["output_throughput"] / best["1"]["output_throughput"]}
            log(f"throughput: {json.dumps(figures['throughput']['best'])} ratio "
                f"{figures['throughput']['ratio_3_over_1']:.2f}")
        figures["wall_s"] = round(time.time() - t_start, 1)
        log(f"PASSED in {figures['wall_s']} s")
        rc = 0
    except CheckFailed as e:
        log(f"FAILED: {e} (logs in {tmp})")
        args.keep_tmp = True
        rc = 1
    finally:
        stop_all()
        if args.report:
            with open(args.report, "w") as f:
                json.dump(figures, f, indent=1)
        if not args.keep_tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    return rc


if __name__ == "__main__":
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, lambda *_: (stop_all(), sys.exit(130)))
    sys.exit(main())
