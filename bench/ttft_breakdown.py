#!/usr/bin/env python3
"""Where each request's time to first token went, from a vlm-server debug log (issue 25).

    bench/ttft_breakdown.py SERVER_STDOUT_LOG [--skip N]

Reads the two debug lines each request logs (`--log-level debug`): the server's laps
    request ID: P prompt tokens (C cached): parse a template b tokenize c media d submit e ms,
    then first token f ms later
and the engine's
    engine: request ID: P prompt tokens (C cached) queued q ms, first token g ms after the engine
    took it; its step began h ms before it (k ms after the submit; older builds
    do not log k): schedule s run r sample t ms
and the access log's first_chunk_ms of each stream (info level: the request's last byte read ->
its first data chunk in the socket), and prints the median of each over the requests in log order
after the first N
(--skip: e.g. the number of conversations of bench/prefix_cache_multi_turn.sh, whose turn 1 comes
first; the default 0 takes all).
"""
import re
import statistics
import sys

SERVER = re.compile(r"request (\S+): (\d+) prompt tokens \((\d+) cached\): parse ([\d.]+) template ([\d.]+) "
                    r"tokenize ([\d.]+) media ([\d.]+) submit ([\d.]+) ms, then first token ([\d.]+) ms later")
ENGINE = re.compile(r"engine: request (\S+): (\d+) prompt tokens \((\d+) cached\) queued ([\d.]+) ms, first token "
                    r"([\d.]+) ms after the engine took it; its step began ([\d.]+) ms before it(?: \(([\d.]+) ms after "
                    r"the submit\))?: schedule ([\d.]+) run ([\d.]+) sample ([\d.]+) ms")
ACCESS = re.compile(r"access .* first_chunk_ms=([\d.]+)")


def main():
    args = sys.argv[1:]
    skip = 0
    if "--skip" in args:
        i = args.index("--skip")
        skip = int(args[i + 1])
        del args[i:i + 2]
    if len(args) != 1:
        sys.exit(__doc__)
    server, engine, order, first_chunk = {}, {}, [], []
    for line in open(args[0], errors="replace"):
        m = ACCESS.search(line)
        if m:
            first_chunk.append(float(m.group(1)))
            continue
        m = SERVER.search(line)
        if m:
            server[m.group(1)] = m
            continue
        m = ENGINE.search(line)
        if m:
            engine[m.group(1)] = m
            order.append(m.group(1))
    ids = [i for i in order[skip:] if i in server]
    if not ids:
        sys.exit("no request with both debug lines after the skipped ones")
    rows = [("prompt tokens", lambda i: float(server[i].group(2))),
            ("cached tokens", lambda i: float(server[i].group(3))),
            ("parse JSON + admit", lambda i: float(server[i].group(4))),
            ("chat template", lambda i: float(server[i].group(5))),
            ("tokenizer", lambda i: float(server[i].group(6))),
            ("media", lambda i: float(server[i].group(7))),
            ("submit", lambda i: float(server[i].group(8))),
            ("server: submit -> first token written", lambda i: float(server[i].group(9))),
            ("engine: queue wait (submit -> engine thread)", lambda i: float(engine[i].group(4))),
            ("engine: submit -> its step began", lambda i: float(engine[i].group(7) or "nan")),
            ("engine: took it -> first token", lambda i: float(engine[i].group(5))),
            ("engine: first step, schedule", lambda i: float(engine[i].group(8))),
            ("engine: first step, run", lambda i: float(engine[i].group(9))),
            ("engine: first step, sample", lambda i: float(engine[i].group(10)))]
    print(f"{len(ids)} requests (after skipping {skip}); medians in ms")
    for name, get in rows:
        print(f"  {name:48s} {statistics.median(get(i) for i in ids):9.3f}")
    if len(first_chunk) > skip:  # streams, in the same order (one request at a time)
        print(f"  {'http: request read -> first chunk in the socket':48s} {statistics.median(first_chunk[skip:]):9.3f}")


if __name__ == "__main__":
    main()
