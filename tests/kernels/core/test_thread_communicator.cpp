// ThreadCommunicator (the CPU's tensor-parallel collectives) against the naive reference: every
// rank's buffer summed in f32 in rank order, the same bits on every rank; all_gather rank-major;
// a failed rank's abort() wakes the others instead of leaving them waiting.
#include <gtest/gtest.h>

#include <random>
#include <thread>
#include <vector>

#include "kernels/core/check.h"
#include "kernels/core/thread_communicator.h"

namespace vlm {
namespace {

// Runs fn(rank) on n threads and joins them.
template <class F>
void on_ranks(int n, F fn) {
  std::vector<std::thread> t;
  for (int r = 0; r < n; ++r) t.emplace_back(fn, r);
  for (auto& x : t) x.join();
}

TEST(ThreadCommunicator, AllReduceEqualsTheNaiveSumOnEveryRank) {
  for (DType dt : {DType::F32, DType::BF16}) {
    for (int n : {1, 2, 3, 4}) {
      const int64_t count = 1037;  // not a multiple of the ranks: uneven shares
      std::mt19937 rng(static_cast<uint32_t>(n * 10 + (dt == DType::F32)));
      std::normal_distribution<float> d;
      std::vector<std::vector<char>> got(static_cast<size_t>(n)), want(static_cast<size_t>(n));
      for (int r = 0; r < n; ++r) {
        std::vector<float> v(static_cast<size_t>(count));
        for (float& x : v) x = d(rng);
        got[static_cast<size_t>(r)].resize(static_cast<size_t>(count) * dtype_size(dt));
        convert_from_f32(v.data(), dt, got[static_cast<size_t>(r)].data(), count);
        want[static_cast<size_t>(r)] = got[static_cast<size_t>(r)];
      }
      std::vector<void*> ptrs;
      for (auto& w : want) ptrs.push_back(w.data());
      naive_all_reduce_sum(ptrs, count, dt);
      auto group = std::make_shared<ThreadGroup>(n);
      on_ranks(n, [&](int r) {
        ThreadCommunicator c(group, r);
        c.all_reduce_sum(got[static_cast<size_t>(r)].data(), count, dt, nullptr);
      });
      for (int r = 0; r < n; ++r) EXPECT_EQ(got[static_cast<size_t>(r)], want[static_cast<size_t>(r)]) << dtype_name(dt) << " rank " << r << " of " << n;
    }
  }
}

TEST(ThreadCommunicator, AllGatherPutsTheRanksInRankOrder) {
  const int n = 3;
  const int64_t count = 5;
  auto group = std::make_shared<ThreadGroup>(n);
  std::vector<std::vector<float>> out(n, std::vector<float>(n * count, -1.0f));
  on_ranks(n, [&](int r) {
    ThreadCommunicator c(group, r);
    std::vector<float> in(count);
    for (int64_t i = 0; i < count; ++i) in[static_cast<size_t>(i)] = static_cast<float>(100 * r + i);
    for (int k = 0; k < 2; ++k) c.all_gather(in.data(), out[static_cast<size_t>(r)].data(), count, DType::F32, nullptr);
  });
  for (int r = 0; r < n; ++r)
    for (int q = 0; q < n; ++q)
      for (int64_t i = 0; i < count; ++i) EXPECT_EQ(out[static_cast<size_t>(r)][static_cast<size_t>(q * count + i)], 100 * q + i);
}

TEST(ThreadCommunicator, AbortWakesTheWaitingRanks) {
  auto group = std::make_shared<ThreadGroup>(2);
  bool threw = false;
  std::thread waiter([&] {
    ThreadCommunicator c(group, 1);
    float x = 1.0f;
    try {
      c.all_reduce_sum(&x, 1, DType::F32, nullptr);  // rank 0 never comes
    } catch (const InternalError&) {
      threw = true;
    }
  });
  group->abort();  // as rank 0 does when its forward fails
  waiter.join();
  EXPECT_TRUE(threw);
  EXPECT_THROW(group->barrier(), InternalError);
}

}  // namespace
}  // namespace vlm
