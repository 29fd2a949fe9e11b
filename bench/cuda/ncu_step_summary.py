#!/usr/bin/env python3
"""Where one decode step's GPU time goes, from an Nsight Compute CSV of bench_cuda_decoder
(bench/RESULTS.md, issue 20). The GPU machine has ncu but no nsys:
  ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum \
      --launch-skip 900 --launch-count 700 --csv bin/bench_cuda_decoder --model M --batches 1 \
      --context 1024 --steps 3 --prefill 0 --enforce-eager 1 > ncu.csv
  ncu_step_summary.py ncu.csv
Steps end with the GPU sampler's kernel (its name contains "sample"); the kernels of the first
whole step in the file are summed per (kernel name, grid): time per step and count. ncu runs
kernels one at a time, so these are device times without launch gaps (the step's wall time,
graphs or not, is bench_cuda_decoder's figure).
"""
import csv
import sys
from collections import OrderedDict


def main():
    lines = [l for l in open(sys.argv[1]) if l.startswith('"')]
    rows = list(csv.DictReader(lines))
    kernels = []
    for r in rows:
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        v = float(r["Metric Value"].replace(",", ""))
        unit = r.get("Metric Unit", "ns")
        ns = v * {"ns": 1, "nsecond": 1, "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6}.get(unit, 1)
        kernels.append((r["Kernel Name"], r.get("Grid Size", ""), ns))
    ends = [i for i, k in enumerate(kernels) if "sample" in k[0].lower()]
    if len(ends) < 2:
        sys.exit("fewer than two sampler kernels: no whole step in the file")
    step = kernels[ends[0] + 1: ends[1] + 1]
    per = OrderedDict()
    for name, grid, ns in step:
        short = name.split("(")[0].split("<")[0][:60]
        key = (short, grid)
        t, c = per.get(key, (0.0, 0))
        per[key] = (t + ns, c + 1)
    total = sum(ns for _, _, ns in step)
    print(f"one decode step: {len(step)} kernels, {total / 1e3:.1f} us of kernel time")
    for (name, grid), (t, c) in sorted(per.items(), key=lambda kv: -kv[1][0]):
        print(f"{t / 1e3:9.1f} us {c:4d}x {t / c / 1e3:7.2f} us each  {name} grid {grid}")


if __name__ == "__main__":
    main()
