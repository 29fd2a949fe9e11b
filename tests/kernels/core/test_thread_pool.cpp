#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
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

// Jobs of different sizes back to back (as a model step issues them: a 2-task pack, then a
// many-task product): each task of each job runs exactly once, and before run_tasks returns.
// A worker that read the finished job's state word, then the next job's task count, used to
// claim a task before the caller published the new generation: it ran a task twice (or the
// previous job's function with the new job's index), and the caller returned while that task
// still ran (the vlm-server segfaults of issue 25). The race is a matter of nanoseconds: a
// million jobs caught it in every one of 6 runs with 2 threads on the 2-core CI machine
// (about 0.5 s). The functions live in a ring that outlives the loop, so a stray call is
// counted here instead of touching freed memory.
TEST(ThreadPool, BackToBackJobsOfDifferentSizesRunEachTaskOnce) {
  constexpr int kJobs = 1000000, kRing = 64, kMaxTasks = 17;
  constexpr int64_t kSizes[] = {2, 9, 3, kMaxTasks};
  struct Slot {
    std::atomic<int> hits[kMaxTasks];
    std::atomic<int64_t> n{0};
    std::atomic<bool> open{false};
  };
  for (int threads : {2, 3}) {
    ThreadPool pool(threads);
    std::vector<Slot> slots(kRing);
    std::atomic<int64_t> strays{0};
    std::vector<std::function<void(int64_t)>> fns;
    for (int r = 0; r < kRing; ++r)
      fns.emplace_back([&, r](int64_t t) {
        Slot& s = slots[r];
        if (!s.open.load() || t < 0 || t >= s.n.load()) strays++;
        else s.hits[t]++;
      });
    int64_t wrong = 0;
    for (int j = 0; j < kJobs; ++j) {
      Slot& s = slots[j % kRing];
      const int64_t n = kSizes[j % 4];
      for (auto& h : s.hits) h = 0;
      s.n = n;
      s.open = true;
      pool.run_tasks(n, fns[j % kRing]);
      s.open = false;
      for (int64_t t = 0; t < n; ++t) wrong += s.hits[t].load() != 1;
    }
    EXPECT_EQ(wrong, 0) << threads << " threads: tasks run other than once by the time run_tasks returned";
    EXPECT_EQ(strays.load(), 0) << threads << " threads: tasks run with a wrong index or after their job";
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
