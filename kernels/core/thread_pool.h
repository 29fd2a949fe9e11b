// A fixed pool of worker threads for compute inside one engine step. The calling thread takes
// part in the work, so a pool of N threads uses N-1 workers. parallel_for is not re-entrant:
// calls from inside a task run serially on the calling thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace vlm {

class ThreadPool {
 public:
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // Splits [0, n) into contiguous ranges of at least `grain` items (one per task, at most
  // num_threads tasks) and calls fn(begin, end) on each; returns when all are done.
  // An exception thrown by fn is rethrown here (the first one) after all tasks finish.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn,
                    int64_t grain = 1);

  // Calls fn(task) for task in [0, num_tasks), distributed dynamically over the threads.
  void run_tasks(int64_t num_tasks, const std::function<void(int64_t)>& fn);

 private:
  void worker_loop(int index);

  int num_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  const std::function<void(int64_t)>* job_ = nullptr;
  int64_t job_tasks_ = 0;
  int64_t next_task_ = 0;
  int64_t tasks_done_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
  bool in_job_ = false;
};

// The process-wide pool used by kernels. Created on first use with
// std::thread::hardware_concurrency() threads unless set_num_threads() was called before.
ThreadPool& global_thread_pool();
// Recreates the global pool with n threads (n >= 1); also sets OpenBLAS to 1 thread, since all
// parallelism goes through this pool. Not safe while kernels run.
void set_num_threads(int n);

}  // namespace vlm
