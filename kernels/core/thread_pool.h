// A fixed pool of worker threads for compute inside one engine step. The calling thread takes
// part in the work, so a pool of N threads uses N-1 workers. parallel_for is not re-entrant:
// calls from inside a task (or from another thread while a job runs) run serially on the
// calling thread.
//
// Hand-off: a decode step issues a few hundred short jobs (one per matrix product), so a job
// is published through one atomic word (generation << 32 | next task) that idle workers poll
// for up to kSpinMicros (a few hundred polls with a pause instruction, then polls that yield
// the core) before they sleep on a condition variable; the caller polls the same way for the
// last tasks to finish. Workers claim tasks with a compare-and-swap on that word, so a
// worker that wakes late can never claim a task of a later job; the caller closes the word
// under the new generation before it changes the job, so a worker holding the previous word
// can never claim a task of the new job with the old word (the claim would fail) either.
#pragma once

#include <atomic>
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
  // With an idle worker's polling time of its own (microseconds, >= 0; 0: workers sleep as soon
  // as a job ends), instead of kSpinMicros / VLM_POOL_SPIN_US: for pools whose jobs are long and
  // sparse (the media pool), where polling only takes cores from other threads.
  ThreadPool(int num_threads, int64_t spin_micros);
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
  // How long an idle worker polls for the next job before it sleeps (a decode step's jobs
  // come every few to few hundred microseconds; between steps the workers sleep). The
  // environment variable VLM_POOL_SPIN_US overrides it (0: sleep at once, for A/B runs).
  static constexpr int64_t kSpinMicros = 300;
  int64_t spin_micros_ = kSpinMicros;

  void worker_loop(int index);
  // Claims and runs tasks of the job of generation `gen` until none is left; returns how many
  // this thread ran.
  int64_t work_on(uint32_t gen);
  void record_error();

  int num_threads_;
  std::vector<std::thread> workers_;
  // (generation << 32) | next unclaimed task of the current job.
  std::atomic<uint64_t> state_{0};
  // The current job; written only while no task of any job can be claimed.
  std::atomic<const std::function<void(int64_t)>*> job_{nullptr};
  std::atomic<int64_t> job_tasks_{0};
  std::atomic<int64_t> tasks_done_{0};
  std::atomic<bool> in_job_{false};
  std::atomic<int> sleepers_{0};
  std::atomic<bool> stop_{false};
  std::mutex mu_;                 // guards the sleep/wake hand-shake and error_
  std::condition_variable work_cv_;
  std::exception_ptr error_;
};

// The process-wide pool used by kernels. Created on first use with
// std::thread::hardware_concurrency() threads unless set_num_threads() was called before.
ThreadPool& global_thread_pool();
// Recreates the global pool with n threads (n >= 1); also sets OpenBLAS to 1 thread, since all
// parallelism goes through this pool. Not safe while kernels run.
void set_num_threads(int n);

}  // namespace vlm
