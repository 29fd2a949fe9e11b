// Memory that the next memory-bound kernel will stream (a decode step's next weight matrices),
// pulled toward the caches in small steps by a compute-bound kernel that runs before it (decode
// attention over a long context), so that the memory bus works while that kernel computes and the
// next kernel finds part of its bytes in cache. Prefetch instructions only: no result changes.
//
// One process-wide queue: the model sets it before the compute-bound kernel (between pool jobs,
// never while a task runs) and clears it after; the kernel's tasks, on any pool thread, pump it.
// Threads claim chunks of the ranges with one atomic add per chunk (not per pump).
#pragma once

#include <cstddef>
#include <span>

namespace vlm {

struct PrefetchRange {
  const void* data = nullptr;
  size_t bytes = 0;
};

// Queues up to kMaxPrefetchRanges ranges (copied; extra ranges are dropped), in the order the
// next kernels read them; replaces what was queued.
constexpr size_t kMaxPrefetchRanges = 4;
void prefetch_ahead_set(std::span<const PrefetchRange> ranges);
void prefetch_ahead_clear();

// Prefetches (into L2; evicted lines stay in the shared L3) about `bytes` more of the queued
// ranges, in order; a no-op once everything was given out or nothing is queued. Returns whether
// it prefetched anything.
bool prefetch_ahead_pump(size_t bytes);

// Bytes a compute-bound kernel pumps per unit of its own memory traffic, as a multiple
// (numerator over 8): decode attention pumps ratio/8 of each key tile's K/V bytes.
// VLM_PREFETCH_AHEAD=N sets N (0 turns the queue off: pumps do nothing).
size_t prefetch_ahead_ratio8();

}  // namespace vlm
