#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <stdexcept>
#include <vector>

#include "kernels/core/check.h"
#include "kernels/core/tensor.h"
#include "kernels/core/thread_pool.h"

namespace vlm {
namespace {

TEST(ThreadPool, ParallelForCoversEveryIndexOnce) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    for (int64_t n : {0, 1, 2, 5, 17, 1000}) {
      for (int64_t grain : {1, 4, 100}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        pool.parallel_for(n, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) hits[i]++;
        }, grain);
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << threads << " " << n << " " << i;
      }
    }
  }
}

TEST(ThreadPool, RunTasksManyRoundsAndNested) {
  ThreadPool pool(3);
  std::atomic<int64_t> sum{0};
  for (int round = 0; round < 200; ++round) {
    pool.run_tasks(7, [&](int64_t t) {
      // A nested call runs inline instead of deadlocking.
      pool.run_tasks(2, [&](int64_t u) { sum += t * 10 + u; });
    });
  }
  // Per round: sum over t of (20 t + 1) = 20 * 21 + 7 = 427.
  EXPECT_EQ(sum.load(), 200 * 427);
}

// Jobs published while the workers spin, and after they fell asleep (the spin lasts
// ThreadPool::kSpinMicros): every task runs once either way.
TEST(ThreadPool, JobsAfterSpinningAndAfterSleepingWorkers) {
  ThreadPool pool(3);
  for (int round = 0; round < 40; ++round) {
    std::vector<std::atomic<int>> hits(37);
    pool.run_tasks(37, [&](int64_t t) { hits[t]++; });
    for (auto& h : hits) ASSERT_EQ(h.load(), 1) << round;
    if (round % 4 == 3) std::this_thread::sleep_for(std::chrono::milliseconds(3));
  }
}

TEST(ThreadPool, ExceptionPropagatesAndPoolStaysUsable) {
  ThreadPool pool(2);
  EXPECT_THROW(pool.run_tasks(10, [](int64_t t) {
    if (t == 3) throw std::runtime_error("boom");
  }), std::runtime_error);
  std::atomic<int> n{0};
  pool.run_tasks(10, [&](int64_t) { n++; });
  EXPECT_EQ(n.load(), 10);
}

TEST(Check, MessageHasLocationConditionAndValues) {
  try {
    int a = 3;
    VLM_CHECK(a == 4, "a is {}", a);
    FAIL() << "no throw";
  } catch (const InternalError& e) {
    const std::string w = e.what();
    EXPECT_NE(w.find("test_thread_pool.cpp:"), std::string::npos) << w;
    EXPECT_NE(w.find("a == 4"), std::string::npos) << w;
    EXPECT_NE(w.find("a is 3"), std::string::npos) << w;
  }
}

TEST(Tensor, ShapesViewsAndAlignment) {
  Tensor t = Tensor::zeros({3, 5, 7}, DType::BF16);
  EXPECT_EQ(t.numel(), 105);
  EXPECT_EQ(t.nbytes(), 210);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data()) % 64, 0u);
  TensorView r = t.view().row(2);
  EXPECT_EQ(r.shape, (Shape{5, 7}));
  EXPECT_EQ(static_cast<char*>(r.data) - static_cast<char*>(t.data()), 2 * 35 * 2);
  EXPECT_THROW(t.view().row(3), InternalError);
  EXPECT_THROW(t.as<float>(), InternalError);
  EXPECT_EQ(Shape({2, 3}).str(), "[2, 3]");
}

}  // namespace
}  // namespace vlm
