// kernels/core/prefetch_ahead: the queue gives out every queued byte once across the pumping
// threads, stops when done, and restarts on a new set(). (Prefetches change no result; what the
// pumps buy is measured in bench/RESULTS.md, not here.)
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "kernels/core/prefetch_ahead.h"

namespace vlm {
namespace {

int pumps_until_done(size_t bytes_per_pump) {
  int n = 0;
  while (prefetch_ahead_pump(bytes_per_pump)) ++n;
  return n;
}

TEST(PrefetchAhead, OneThreadPumpsEveryByteOnceAcrossRanges) {
  std::vector<char> a(100 * 1024), b(3000);
  const PrefetchRange r[] = {{a.data(), a.size()}, {nullptr, 64}, {b.data(), b.size()}};
  prefetch_ahead_set(r);
  // 103,400 bytes in chunks of 16 KiB claimed one at a time, 1 KiB per pump: a pump never spans
  // two chunks, so each chunk takes ceil(chunk / 1024) pumps.
  const size_t total = a.size() + b.size(), chunk = 16384;
  int expected = 0;
  for (size_t at = 0; at < total; at += chunk) expected += static_cast<int>((std::min(chunk, total - at) + 1023) / 1024);
  EXPECT_EQ(pumps_until_done(1024), expected);
  EXPECT_FALSE(prefetch_ahead_pump(1024));
  prefetch_ahead_set(r);  // a new set starts over
  EXPECT_EQ(pumps_until_done(1024), expected);
  prefetch_ahead_clear();
  EXPECT_FALSE(prefetch_ahead_pump(1024));
}

TEST(PrefetchAhead, ThreadsShareTheQueueWithoutRepeatingChunks) {
  std::vector<char> a(1 << 20);
  const PrefetchRange r[] = {{a.data(), a.size()}};
  prefetch_ahead_set(r);
  std::atomic<int> pumps{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t)
    threads.emplace_back([&] { pumps += pumps_until_done(16384); });  // one whole chunk per pump
  for (auto& t : threads) t.join();
  EXPECT_EQ(pumps.load(), 64);  // 1 MiB / 16 KiB: each chunk given out once
  prefetch_ahead_clear();
}

TEST(PrefetchAhead, EmptyQueueDoesNothing) {
  prefetch_ahead_clear();
  EXPECT_FALSE(prefetch_ahead_pump(4096));
  prefetch_ahead_set({});
  EXPECT_FALSE(prefetch_ahead_pump(4096));
}

}  // namespace
}  // namespace vlm
