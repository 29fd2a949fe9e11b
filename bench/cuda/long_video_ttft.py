#!/usr/bin/env python3
"""Client of bench/cuda/long_video_ttft.sh (issue 38): what a user sees for a long video.

    long_video_ttft.py --url http://127.0.0.1:PORT --log SERVER_LOG --video v400.mp4 [--video v2048.mp4 ...]
        [--rows dense,mminference,look_m,sink_router,all] [--max-tokens 128] [--fps 2] [--max-frames N]
        [--concurrent v400.mp4] [--timeout 600]

For each video and row (the methods switched per request by vlm_options), one streamed chat request
with the video as a data: URL (fps, max_frames on the part), 128 tokens with ignore_eos; measures the
client's TTFT, decode tok/s after the first token, and reads the server's --log-level debug timeline
lines of that request (bench/ttft_breakdown.py's regexes) for its parts. Then, with --concurrent,
one more request with that video (all three methods) while a second thread keeps a short text stream
running and a third sends short text requests: their TTFT and the running stream's inter-token gap p99
during the video's prefill. Prints a markdown table; stdlib only (no curl there).
Env: SKIP_ROWS="v2048.mp4:dense,..." leaves rows out (VIDEO:ROW words, comma-separated).
"""
import argparse
import base64
import http.client
import json
import os
import re
import sys
import threading
import time
import urllib.parse

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from ttft_breakdown import ENGINE, SERVER  # noqa: E402

# The engine line's prefill parts (engine.cpp's log_first_token, after "sample ... ms").
PREFILL = re.compile(r"prefill (\d+) steps ([\d.]+) ms, media encode ([\d.]+) ms")

ROWS = {
    "dense": {"sparse_prefill": "off", "look_m": "off", "sink_router": False},
    "mminference": {"sparse_prefill": "mminference", "look_m": "off", "sink_router": False},
    "look_m": {"sparse_prefill": "off", "look_m": "text-prior-pivot", "sink_router": False},
    "sink_router": {"sparse_prefill": "off", "look_m": "off", "sink_router": True},
    "all": {"sparse_prefill": "mminference", "look_m": "text-prior-pivot", "sink_router": True},
}


def stream_chat(url, body, timeout, on_token=None):
    """POSTs a streamed chat request; returns dict(status, ttft, times (per content chunk), usage, id, error)."""
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    data = json.dumps(body).encode()
    t0 = time.perf_counter()
    out = {"status": None, "ttft": None, "times": [], "usage": None, "id": None, "error": None, "t0": t0}
    try:
        conn.request("POST", "/v1/chat/completions", body=data, headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        out["status"] = r.status
        if r.status != 200:
            out["error"] = r.read().decode(errors="replace")[:400]
            return out
        for raw in r:
            line = raw.decode(errors="replace").strip()
            if not line.startswith("data:"):
                continue
            payload = line[5:].strip()
            if payload == "[DONE]":
                break
            j = json.loads(payload)
            out["id"] = out["id"] or j.get("id")
            if j.get("usage"):
                out["usage"] = j["usage"]
            for c in j.get("choices", []):
                d = c.get("delta", {})
                if d.get("content") or d.get("reasoning_content"):
                    now = time.perf_counter()
                    if out["ttft"] is None:
                        out["ttft"] = now - t0
                    out["times"].append(now)
                    if on_token:
                        on_token(now)
    except Exception as e:  # a timeout or a reset: reported, never hangs the run
        out["error"] = f"{type(e).__name__}: {e}"
    finally:
        conn.close()
    out["total"] = time.perf_counter() - t0
    return out


def video_body(data_url, opts, a, max_tokens, prompt="Describe this video."):
    part = {"type": "video_url", "video_url": {"url": data_url, "fps": a.fps}}
    if a.max_frames:
        part["video_url"]["max_frames"] = a.max_frames
    return {"model": "m", "stream": True, "stream_options": {"include_usage": True}, "max_tokens": max_tokens,
            "min_tokens": max_tokens, "ignore_eos": True, "temperature": 0, "vlm_options": opts,
            "messages": [{"role": "user", "content": [part, {"type": "text", "text": prompt}]}]}


def text_body(max_tokens, text="Say something about the sea."):
    return {"model": "m", "stream": True, "stream_options": {"include_usage": True}, "max_tokens": max_tokens,
            "min_tokens": max_tokens, "ignore_eos": True, "temperature": 0, "vlm_options": ROWS["dense"],
            "messages": [{"role": "user", "content": text}]}


def timeline(log_path, prev_ids):
    """The newest request's debug lines not in prev_ids: (server match, engine match) or (None, None)."""
    server, engine = {}, {}
    try:
        for line in open(log_path, errors="replace"):
            m = SERVER.search(line)
            if m:
                server[m.group(1)] = m
            m = ENGINE.search(line)
            if m:
                engine[m.group(1)] = m
    except OSError:
        return None, None, set()
    new = [i for i in server if i not in prev_ids]
    rid = new[-1] if new else None
    return (server.get(rid), engine.get(rid), set(server)) if rid else (None, None, set(server))


def fmt(x, scale=1.0, nd=2):
    return "-" if x is None else f"{x * scale:.{nd}f}"


def row_figures(res, sm, em):
    n = len(res["times"])
    dec = (n - 1) / (res["times"][-1] - res["times"][0]) if n > 1 and res["times"][-1] > res["times"][0] else None
    f = {"ttft_s": res["ttft"], "decode_tok_s": dec, "tokens": n,
         "prompt_tokens": (res["usage"] or {}).get("prompt_tokens")}
    if sm:
        f.update(parse_ms=float(sm.group(4)), template_ms=float(sm.group(5)), tokenize_ms=float(sm.group(6)),
                 media_ms=float(sm.group(7)), submit_ms=float(sm.group(8)), after_submit_ms=float(sm.group(9)))
    if em:
        f.update(queued_ms=float(em.group(4)), engine_first_ms=float(em.group(5)), step_ms=float(em.group(6)),
                 step_run_ms=float(em.group(9)))
        pm = PREFILL.search(em.string)
        if pm:
            f.update(prefill_steps=int(pm.group(1)), prefill_ms=float(pm.group(2)), encode_ms=float(pm.group(3)))
    vlm = (res["usage"] or {}).get("vlm") or {}
    f.update({k: vlm[k] for k in ("prefill_attention_density", "look_m_kv_tokens_kept", "sink_groups_skipped_ratio")
              if k in vlm})
    return f


def concurrent_probe(a, data_url, video):
    """The video (all three methods) with a running text stream and short text requests beside it."""
    gaps, stop = [], threading.Event()
    video_done = {}

    def runner():  # a long text stream started before the video; its inter-token gaps while the video runs
        last = [None]

        def tick(now):
            if last[0] is not None and video_done.get("start") and not video_done.get("end"):
                gaps.append(now - last[0])
            last[0] = now
        while not stop.is_set():
            stream_chat(a.url, text_body(2048), a.timeout, tick)

    shorts = []

    def shorter():  # one at a time; "during": SENT while the video waited for its first token
        while not stop.is_set():
            if video_done.get("start"):
                sent_during = not video_done.get("end")
                r = stream_chat(a.url, text_body(8, "Hi."), a.timeout)
                r["during"] = sent_during
                shorts.append(r)
            time.sleep(0.5)
    ts = [threading.Thread(target=runner, daemon=True), threading.Thread(target=shorter, daemon=True)]
    for t in ts:
        t.start()
    time.sleep(2.0)
    video_done["start"] = time.perf_counter()
    res = stream_chat(a.url, video_body(data_url, ROWS["all"], a, 16), a.timeout,
                      on_token=lambda now: video_done.setdefault("end", now))
    video_done.setdefault("end", time.perf_counter())
    stop.set()
    for t in ts:
        t.join(timeout=a.timeout)
    during = [r["ttft"] for r in shorts if r.get("during") and r["ttft"] is not None]
    gaps.sort()
    p99 = gaps[min(len(gaps) - 1, int(0.99 * len(gaps)))] if gaps else None
    print(f"\n### While {os.path.basename(video)} (all three methods) is processed: video TTFT {fmt(res['ttft'])} s "
          f"(status {res['status']}{', ' + res['error'] if res['error'] else ''})")
    print("| concurrent | figure |\n| --- | ---: |")
    print(f"| short text requests sent during the video's prefill | {len(during)} |")
    print(f"| their TTFT max / median (s) | {fmt(max(during) if during else None)} / "
          f"{fmt(sorted(during)[len(during) // 2] if during else None)} |")
    print(f"| running stream's inter-token gaps during it | {len(gaps)} |")
    print(f"| running stream's inter-token gap p99 / max (ms) | {fmt(p99, 1000, 1)} / "
          f"{fmt(gaps[-1] if gaps else None, 1000, 1)} |")
    return res["status"] == 200


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--video", action="append", required=True)
    ap.add_argument("--rows", default="dense,mminference,look_m,sink_router,all")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--fps", type=float, default=2.0)
    ap.add_argument("--max-frames", type=int, default=0)
    ap.add_argument("--fps-for", action="append", default=[], help="VIDEO=FPS (e.g. v2048.mp4=4)")
    ap.add_argument("--max-frames-for", action="append", default=[], help="VIDEO=N")
    ap.add_argument("--concurrent", default="")
    ap.add_argument("--timeout", type=float, default=600)
    a = ap.parse_args()
    skip = {w.strip() for w in os.environ.get("SKIP_ROWS", "").split(",") if w.strip()}
    fps_for = dict(x.split("=", 1) for x in a.fps_for)
    mf_for = dict(x.split("=", 1) for x in a.max_frames_for)
    urls, ok = {}, True
    for v in a.video + ([a.concurrent] if a.concurrent else []):
        if v not in urls:
            urls[v] = "data:video/mp4;base64," + base64.b64encode(open(v, "rb").read()).decode()
    # Warm-up: a short text request (CUDA graphs, allocator), not in the table.
    w = stream_chat(a.url, text_body(8), a.timeout)
    print(f"warm-up text request: status {w['status']} TTFT {fmt(w['ttft'])} s {w['error'] or ''}", flush=True)
    _, _, seen = timeline(a.log, set())
    results = []
    base_fps, base_mf = a.fps, a.max_frames
    for v in a.video:
        name = os.path.basename(v)
        a.fps = float(fps_for.get(name, base_fps))
        a.max_frames = int(mf_for.get(name, base_mf))
        for row in a.rows.split(","):
            if f"{name}:{row}" in skip or row in skip:
                print(f"skipped {name} {row} (SKIP_ROWS)", flush=True)
                continue
            res = stream_chat(a.url, video_body(urls[v], ROWS[row], a, a.max_tokens), a.timeout)
            time.sleep(0.3)  # the debug lines are written as the request ends
            sm, em, seen2 = timeline(a.log, seen)
            seen |= seen2
            f = row_figures(res, sm, em)
            ok &= res["status"] == 200 and res["error"] is None
            print(f"{name} {row}: status {res['status']} {json.dumps(f)} {res['error'] or ''}", flush=True)
            results.append((name, row, f))
    print("\n### Long video, streamed, prefix caching off (times in ms unless said; server parts from "
          "--log-level debug)")
    print("| video | method | prompt tokens | TTFT (s) | parse | template | tokenize | media (decode + preprocess) "
          "| submit | queued | engine: took -> first token | prefill steps (n, ms) | media encode (GPU span) "
          "| its step (LOOK-M's end of prefill is in it) | decode tok/s | vlm usage |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for name, row, f in results:
        extra = ", ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}" for k, v in f.items()
                          if k in ("prefill_attention_density", "look_m_kv_tokens_kept", "sink_groups_skipped_ratio"))
        print(f"| {name} | {row} | {f.get('prompt_tokens', '-')} | {fmt(f['ttft_s'])} | {fmt(f.get('parse_ms'), 1, 1)} "
              f"| {fmt(f.get('template_ms'), 1, 1)} | {fmt(f.get('tokenize_ms'), 1, 1)} | {fmt(f.get('media_ms'), 1, 0)} "
              f"| {fmt(f.get('submit_ms'), 1, 0)} | {fmt(f.get('queued_ms'), 1, 1)} | {fmt(f.get('engine_first_ms'), 1, 0)} "
              f"| {f.get('prefill_steps', '-')}, {fmt(f.get('prefill_ms'), 1, 0)} | {fmt(f.get('encode_ms'), 1, 0)} "
              f"| {fmt(f.get('step_ms'), 1, 0)} | {fmt(f['decode_tok_s'], 1, 1)} "
              f"| {extra} |")
    if a.concurrent:
        name = os.path.basename(a.concurrent)
        a.fps = float(fps_for.get(name, base_fps))
        a.max_frames = int(mf_for.get(name, base_mf))
        ok &= concurrent_probe(a, urls[a.concurrent], a.concurrent)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
