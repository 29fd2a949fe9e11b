#!/usr/bin/env python3
"""Sums a cupti_trace.cpp timeline (lines "K|C|S start_ns end_ns stream name-or-bytes ...") per
decoder step (a step starts at its embedding kernel) and per op: each activity's duration and the
idle GPU time just before it (the gap after the previous activity ended). Prints one line per step
for the sparse-prefill ops, then the sums over the steps after the first (the warm-up prompt).
Usage: cupti_trace_summary.py TRACE [--layer STEP LAYER] (the activities around one layer's
rope_kv_write: durations and gaps, one line each)."""
import collections
import sys

NAMES = ['block_sparse_sm90', 'block_sparse_kernel', 'combine_kernel', 'schedule_kernel', 'fill_lists',
         'count_kernel', 'rope_kv_write', 'silu_mul', 'rms_norm', 'embedding', 'rope_table', 'scores_kernel',
         'softmax_kernel', 'phase_kernel', 'sums_kernel', 'top_columns', 'cand_scores', 'layout_kernel',
         'choose_kernel', 'sample_kernel', 'gemv']
SPARSE = ['block_sparse_sm90', 'combine_kernel', 'count_kernel', 'schedule_kernel', 'fill_lists', 'memset',
          'memcpy_small']


def short(name):
    for k in NAMES:
        if k in name:
            return k
    if name.startswith('nvjet'):
        return 'gemm:' + name.split('_')[3]
    return name[:40]


def load(path):
    acts = []
    for line in open(path):
        f = line.split()
        if f[0] == 'K':
            acts.append((int(f[1]), int(f[2]), short(f[4])))
        elif f[0] == 'C':
            acts.append((int(f[1]), int(f[2]), 'memcpy_small' if int(f[4]) < 100000 else 'memcpy_big'))
        elif f[0] == 'S':
            acts.append((int(f[1]), int(f[2]), 'memset'))
    acts.sort()
    steps, cur = [], None
    for a in acts:
        if a[2] == 'embedding':
            cur = []
            steps.append(cur)
        if cur is not None:
            cur.append(a)
    return steps


def main(argv):
    steps = load(argv[1])
    if len(argv) > 4 and argv[2] == '--layer':
        st = steps[int(argv[3])]
        r = [i for i, a in enumerate(st) if a[2] == 'rope_kv_write'][int(argv[4])]
        for i in range(max(r - 3, 1), min(r + 12, len(st))):
            a = st[i]
            print('%-20s dur %8.1f us  gap before %6.1f us' % (a[2], (a[1] - a[0]) / 1e3, (a[0] - st[i - 1][1]) / 1e3))
        return
    tot_dur, tot_gap = collections.defaultdict(float), collections.defaultdict(float)
    for si, st in enumerate(steps):
        dur, gap = collections.defaultdict(float), collections.defaultdict(float)
        for i, a in enumerate(st):
            dur[a[2]] += (a[1] - a[0]) / 1e6
            if i > 0:
                gap[a[2]] += max(0, a[0] - st[i - 1][1]) / 1e6
        if si > 0:
            for k in dur:
                tot_dur[k] += dur[k]
            for k in gap:
                tot_gap[k] += gap[k]
        print('step %2d span %.2f ms busy %.2f gaps %.2f | ' % (si, (st[-1][1] - st[0][0]) / 1e6, sum(dur.values()),
                                                                 sum(gap.values())) +
              ' '.join('%s %.2f/%.2f' % (k[:12], dur[k], gap[k]) for k in SPARSE))
    print('\nsteps 1..%d (ms): op | duration | idle before it' % (len(steps) - 1))
    for k in sorted(tot_dur, key=lambda k: -tot_dur[k]):
        print('| %s | %.2f | %.2f |' % (k, tot_dur[k], tot_gap[k]))
    print('| total | %.1f | %.1f |' % (sum(tot_dur.values()), sum(tot_gap.values())))


if __name__ == '__main__':
    main(sys.argv)
