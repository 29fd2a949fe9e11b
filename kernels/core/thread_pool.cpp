#include "kernels/core/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <memory>

#include "kernels/core/check.h"

extern "C" void openblas_set_num_threads(int num_threads);

namespace vlm {

ThreadPool::ThreadPool(int num_threads) : num_threads_(std::max(1, num_threads)) {
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::worker_loop(int /*index*/) {
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    work_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    while (job_ && next_task_ < job_tasks_) {
      int64_t task = next_task_++;
      const auto* job = job_;
      lock.unlock();
      try {
        (*job)(task);
      } catch (...) {
        std::lock_guard<std::mutex> g(mu_);
        if (!error_) error_ = std::current_exception();
      }
      lock.lock();
      if (++tasks_done_ == job_tasks_) done_cv_.notify_all();
    }
  }
}

void ThreadPool::run_tasks(int64_t num_tasks, const std::function<void(int64_t)>& fn) {
  if (num_tasks <= 0) return;
  std::unique_lock<std::mutex> lock(mu_);
  if (in_job_ || num_threads_ == 1 || num_tasks == 1) {
    // Nested call or nothing to share: run inline.
    lock.unlock();
    for (int64_t t = 0; t < num_tasks; ++t) fn(t);
    return;
  }
  in_job_ = true;
  job_ = &fn;
  job_tasks_ = num_tasks;
  next_task_ = 0;
  tasks_done_ = 0;
  error_ = nullptr;
  ++generation_;
  work_cv_.notify_all();
  while (next_task_ < job_tasks_) {
    int64_t task = next_task_++;
    lock.unlock();
    try {
      fn(task);
    } catch (...) {
      std::lock_guard<std::mutex> g(mu_);
      if (!error_) error_ = std::current_exception();
    }
    lock.lock();
    ++tasks_done_;
  }
  done_cv_.wait(lock, [&] { return tasks_done_ == job_tasks_; });
  job_ = nullptr;
  in_job_ = false;
  std::exception_ptr err = error_;
  error_ = nullptr;
  lock.unlock();
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
}  // namespace

ThreadPool& global_thread_pool() {
  std::lock_guard<std::mutex> lock(g_pool_mu);
  if (!g_pool) {
    openblas_set_num_threads(1);
    g_pool = std::make_unique<ThreadPool>(
        static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  }
  return *g_pool;
}

void set_num_threads(int n) {
  VLM_CHECK(n >= 1, "thread count {}", n);
  std::lock_guard<std::mutex> lock(g_pool_mu);
  openblas_set_num_threads(1);
  g_pool = std::make_unique<ThreadPool>(n);
}

}  // namespace vlm
