#!/usr/bin/env python3
"""Summarizes an nsys GPU trace of bench_cuda_decoder's decode steps (bench/RESULTS.md, issue 20).

Usage: nsys stats --report cuda_gpu_trace --format csv -o PREFIX REPORT.nsys-rep
       nsys_step_summary.py PREFIX_cuda_gpu_trace.csv [last_steps=20]
Steps end with the GPU sampler's kernel (its name contains "sample"); for the last `last_steps`
steps it prints the wall time per step, the time the GPU was busy, the idle gaps, and per kernel
name the time and count per step (kernels of one stream do not overlap, so busy = sum).
"""
import csv
import sys
from collections import defaultdict


def main():
    path = sys.argv[1]
    last = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    rows = []
    with open(path, newline="") as f:
        r = csv.DictReader(f)
        for row in r:
            start = next(v for k, v in row.items() if k.startswith("Start"))
            dur = next(v for k, v in row.items() if k.startswith("Duration"))
            name = row.get("Name", "?")
            rows.append((int(float(start)), int(float(dur)), name))
    rows.sort()
    ends = [i for i, (_, _, n) in enumerate(rows) if "sample" in n.lower()]
    if len(ends) < last + 1:
        last = len(ends) - 1
    sel = ends[-(last + 1):]
    t0 = rows[sel[0]][0] + rows[sel[0]][1]
    t1 = rows[sel[-1]][0] + rows[sel[-1]][1]
    per = defaultdict(lambda: [0, 0])
    busy = 0
    launches = 0
    for s, d, n in rows[sel[0] + 1: sel[-1] + 1]:
        key = n[:90]
        per[key][0] += d
        per[key][1] += 1
        busy += d
        launches += 1
    wall = (t1 - t0) / last
    print(f"steps {last}: wall {wall / 1e3:.1f} us/step, GPU busy {busy / last / 1e3:.1f} us, "
          f"idle {(t1 - t0 - busy) / last / 1e3:.1f} us, {launches / last:.0f} kernels+copies/step")
    for k, (d, c) in sorted(per.items(), key=lambda kv: -kv[1][0]):
        print(f"{d / last / 1e3:9.1f} us {c / last:6.1f}x  {k}")


if __name__ == "__main__":
    main()
