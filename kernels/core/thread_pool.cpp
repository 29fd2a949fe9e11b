#include "kernels/core/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>

#include "kernels/core/check.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define VLM_CPU_RELAX() _mm_pause()
#else
#define VLM_CPU_RELAX() std::this_thread::yield()
#endif

extern "C" void openblas_set_num_threads(int num_threads);

namespace vlm {

namespace {
constexpr int kPauseSpins = 512;  // polls with a pause instruction before polls with a yield
uint32_t generation_of(uint64_t state) { return static_cast<uint32_t>(state >> 32); }
int64_t task_of(uint64_t state) { return static_cast<int64_t>(state & 0xffffffffu); }
// The task field while the caller publishes a job: no task can be claimed.
constexpr int64_t kClosed = 0xffffffff;
}  // namespace

ThreadPool::ThreadPool(int num_threads) : num_threads_(std::max(1, num_threads)) {
  if (const char* env = std::getenv("VLM_POOL_SPIN_US")) spin_micros_ = std::max(0L, std::strtol(env, nullptr, 10));
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::ThreadPool(int num_threads, int64_t spin_micros)
    : spin_micros_(std::max<int64_t>(0, spin_micros)), num_threads_(std::max(1, num_threads)) {
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
  }
  work_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::record_error() {
  std::lock_guard<std::mutex> g(mu_);
  if (!error_) error_ = std::current_exception();
}

int64_t ThreadPool::work_on(uint32_t gen) {
  int64_t ran = 0;
  uint64_t s = state_.load();
  while (true) {
    if (generation_of(s) != gen) return ran;
    // Read the job before claiming: a successful claim below proves these belong to `gen`
    // (the job cannot change while a task of it is unclaimed).
    const auto* job = job_.load();
    const int64_t n = job_tasks_.load();
    const int64_t t = task_of(s);
    if (t == kClosed) {  // the caller is publishing this generation's job: opens in a moment
      VLM_CPU_RELAX();
      s = state_.load();
      continue;
    }
    if (t >= n) return ran;
    if (!state_.compare_exchange_weak(s, s + 1)) continue;  // s reloaded
    try {
      (*job)(t);
    } catch (...) {
      record_error();
    }
    ++ran;
    tasks_done_.fetch_add(1);
    s = state_.load();
  }
}

void ThreadPool::worker_loop(int /*index*/) {
  uint32_t seen = 0;
  while (true) {
    // Poll for a new job for up to kSpinMicros, then sleep until one is published.
    const auto spin_until = std::chrono::steady_clock::now() + std::chrono::microseconds(spin_micros_);
    uint32_t gen = generation_of(state_.load());
    // Pause-spin briefly, then yield between polls: on a machine with more runnable threads
    // than cores a pure spin would hold the core the caller needs.
    for (int i = 0; gen == seen && !stop_.load(std::memory_order_relaxed); ++i) {
      if (i < kPauseSpins) {
        VLM_CPU_RELAX();
      } else {
        std::this_thread::yield();
        if (std::chrono::steady_clock::now() > spin_until) break;
      }
      gen = generation_of(state_.load());
    }
    if (gen == seen && !stop_.load()) {
      std::unique_lock<std::mutex> lock(mu_);
      sleepers_.fetch_add(1);
      work_cv_.wait(lock, [&] { return stop_.load() || generation_of(state_.load()) != seen; });
      sleepers_.fetch_sub(1);
      gen = generation_of(state_.load());
    }
    if (stop_.load()) return;
    seen = gen;
    work_on(gen);
  }
}

void ThreadPool::run_tasks(int64_t num_tasks, const std::function<void(int64_t)>& fn) {
  if (num_tasks <= 0) return;
  bool expected = false;
  if (num_threads_ == 1 || num_tasks == 1 || !in_job_.compare_exchange_strong(expected, true)) {
    // Nothing to share, or a nested call (or another thread's job is running): run inline.
    for (int64_t t = 0; t < num_tasks; ++t) fn(t);
    return;
  }
  VLM_CHECK(num_tasks < kClosed, "{} tasks in one job", num_tasks);
  // Close the word under the new generation before the job changes: a worker still holding the
  // previous job's word (all its tasks taken) could otherwise read the new task count, see its
  // stale task index below it, and claim it with a compare-and-swap that succeeds because the
  // word has not changed yet: it then ran a task twice, or the old function with a new index,
  // and the caller returned while that task still ran. Once the word has moved on, no such
  // claim can succeed; a worker that sees it closed waits for it to open.
  const uint32_t gen = generation_of(state_.load()) + 1;
  state_.store((static_cast<uint64_t>(gen) << 32) | kClosed);
  job_.store(&fn);
  job_tasks_.store(num_tasks);
  tasks_done_.store(0);
  state_.store(static_cast<uint64_t>(gen) << 32);
  if (sleepers_.load() > 0) {
    { std::lock_guard<std::mutex> lock(mu_); }  // a worker between its check and its wait
    work_cv_.notify_all();
  }
  work_on(gen);
  // The last tasks may still run on workers.
  for (int i = 0; tasks_done_.load() < num_tasks; ++i) {
    if (i < kPauseSpins) VLM_CPU_RELAX();
    else std::this_thread::yield();
  }
  std::exception_ptr err;
  {
    std::lock_guard<std::mutex> g(mu_);
    err = error_;
    error_ = nullptr;
  }
  in_job_.store(false);
  if (err) std::rethrow_exception(err);
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn,
                              int64_t grain) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  int64_t tasks = std::min<int64_t>(num_threads_, (n + grain - 1) / grain);
  if (tasks <= 1) {
    fn(0, n);
    return;
  }
  int64_t per = (n + tasks - 1) / tasks;
  run_tasks(tasks, [&](int64_t t) {
    int64_t b = t * per, e = std::min(n, b + per);
    if (b < e) fn(b, e);
  });
}

namespace {
std::mutex g_pool_mu;
std::unique_ptr<ThreadPool> g_pool;
std::atomic<ThreadPool*> g_pool_ptr{nullptr};  // g_pool.get(): the lock-free fast path
}  // namespace

ThreadPool& global_thread_pool() {
  if (ThreadPool* p = g_pool_ptr.load(std::memory_order_acquire)) return *p;
  std::lock_guard<std::mutex> lock(g_pool_mu);
  if (!g_pool) {
    openblas_set_num_threads(1);
    g_pool = std::make_unique<ThreadPool>(
        static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
    g_pool_ptr.store(g_pool.get(), std::memory_order_release);
  }
  return *g_pool;
}

void set_num_threads(int n) {
  VLM_CHECK(n >= 1, "thread count {}", n);
  std::lock_guard<std::mutex> lock(g_pool_mu);
  openblas_set_num_threads(1);
  g_pool_ptr.store(nullptr);
  g_pool = std::make_unique<ThreadPool>(n);
  g_pool_ptr.store(g_pool.get(), std::memory_order_release);
}

}  // namespace vlm
