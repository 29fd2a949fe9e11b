#include "kernels/core/prefetch_ahead.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>

namespace vlm {

namespace {

constexpr size_t kChunk = 16384;  // bytes claimed per atomic add
constexpr size_t kLine = 64;
// Default ratio (over 8) of prefetched bytes to the pumping kernel's own bytes.
constexpr size_t kDefaultRatio8 = 8;

// Set by one thread while others may pump (waiting pool threads): every field is atomic, and a
// pump that reads a mix of an old and a new queue only prefetches lines nobody needs (prefetch
// instructions never fault).
struct Queue {
  std::atomic<const void*> data[kMaxPrefetchRanges] = {};
  std::atomic<size_t> bytes[kMaxPrefetchRanges] = {};
  std::atomic<size_t> num{0};
  std::atomic<size_t> total{0};
  std::atomic<size_t> next{0};
  std::atomic<uint64_t> generation{1};
};
Queue g_queue;

struct Claim {  // this thread's current chunk [cur, end) of generation gen
  uint64_t gen = 0;
  size_t cur = 0, end = 0;
  bool done = false;  // the queue of this generation is given out
};
thread_local Claim tl_claim;

// Prefetches [begin, end) of the ranges laid end to end.
void prefetch_span(size_t begin, size_t end) {
  size_t base = 0;
  const size_t num = std::min(kMaxPrefetchRanges, g_queue.num.load(std::memory_order_relaxed));
  for (size_t r = 0; r < num && begin < end; ++r) {
    const auto* data = static_cast<const char*>(g_queue.data[r].load(std::memory_order_relaxed));
    const size_t bytes = g_queue.bytes[r].load(std::memory_order_relaxed);
    const size_t lo = std::max(begin, base), hi = std::min(end, base + bytes);
    for (size_t off = lo; off < hi; off += kLine) __builtin_prefetch(data + (off - base), 0, 2);
    base += bytes;
    if (hi > lo) begin = hi;
  }
}

}  // namespace

size_t prefetch_ahead_ratio8() {
  static const size_t ratio = [] {
    const char* env = std::getenv("VLM_PREFETCH_AHEAD");
    return env ? static_cast<size_t>(std::max(0L, std::strtol(env, nullptr, 10))) : kDefaultRatio8;
  }();
  return ratio;
}

void prefetch_ahead_set(std::span<const PrefetchRange> ranges) {
  Queue& q = g_queue;
  size_t num = 0, total = 0;
  for (const PrefetchRange& r : ranges) {
    if (num == kMaxPrefetchRanges) break;
    if (r.data == nullptr || r.bytes == 0) continue;
    q.data[num].store(r.data, std::memory_order_relaxed);
    q.bytes[num].store(r.bytes, std::memory_order_relaxed);
    ++num;
    total += r.bytes;
  }
  q.num.store(num, std::memory_order_relaxed);
  q.total.store(total, std::memory_order_relaxed);
  q.next.store(0, std::memory_order_relaxed);
  q.generation.fetch_add(1, std::memory_order_release);
}

void prefetch_ahead_clear() { prefetch_ahead_set({}); }

bool prefetch_ahead_pump(size_t bytes) {
  Queue& q = g_queue;
  Claim& c = tl_claim;
  const uint64_t gen = q.generation.load(std::memory_order_acquire);
  if (c.gen != gen) c = Claim{gen, 0, 0, false};
  if (c.done) return false;
  bool any = false;
  while (bytes > 0) {
    if (c.cur >= c.end) {
      const size_t total = q.total.load(std::memory_order_relaxed);
      const size_t at = total == 0 ? 0 : q.next.fetch_add(kChunk, std::memory_order_relaxed);
      if (at >= total) {
        c.done = true;  // nothing more in this generation: later pumps return at once
        return any;
      }
      c.cur = at;
      c.end = std::min(total, at + kChunk);
    }
    const size_t n = std::min(bytes, c.end - c.cur);
    prefetch_span(c.cur, c.cur + n);
    c.cur += n;
    bytes -= n;
    any = true;
  }
  return any;
}

}  // namespace vlm
