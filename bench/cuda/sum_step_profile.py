#!/usr/bin/env python3
"""Sums StepProfiler lines (VLM_CUDA_PROFILE=1, model/layers/cuda/step_profiler.h) per op over
the steps of each prompt of a bench_cuda_sparse_ttft log (stdout and stderr merged): a prompt's
steps are the profile lines before its "TTFT ..." line (after the bench's "warm-up done" line). Prints one markdown table per prompt
(and the "== ..." lines of sparse_ttft_gpu.sh as they come).
Usage: sum_step_profile.py LOG"""
import re
import sys
from collections import defaultdict

PROF = re.compile(r"^profile: (\d+) tokens, ([\d.]+) ms on the GPU:(.*)$")
OP = re.compile(r" (\S+) ([\d.]+) \([\d.]+%\)")


def main(path):
    ops, steps, total = defaultdict(float), 0, 0.0
    for line in open(path, errors="replace"):
        m = PROF.match(line.strip())
        if m:
            steps += 1
            total += float(m.group(2))
            for name, t in OP.findall(" " + m.group(3)):
                ops[name] += float(t)
        elif line.startswith("warm-up done"):
            ops, steps, total = defaultdict(float), 0, 0.0  # the warm-up prompts' steps are not counted
        elif line.startswith("== "):
            print("\n" + line.strip())
        elif line.startswith("TTFT") and "tokens (chunks of" in line:
            print(f"\n{line.strip()}: {steps} steps, {total / 1e3:.3f} s on the GPU")
            print("| op | s | share |\n| --- | --- | --- |")
            for name, t in sorted(ops.items(), key=lambda kv: -kv[1]):
                print(f"| {name} | {t / 1e3:.3f} | {100 * t / max(total, 1e-9):.1f} % |")
            ops, steps, total = defaultdict(float), 0, 0.0


if __name__ == "__main__":
    main(sys.argv[1])
