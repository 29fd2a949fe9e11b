// GpuIntervalTimer: the GPU time of work enqueued between begin() and end() on a stream, summed
// over many intervals without a sync: each interval is a pair of CUDA events, and collect() adds
// the intervals whose end event has completed (cudaEventQuery) and keeps the others pending. For
// the debug timeline (e.g. the media encoder's share of a prefill); events are pooled. Not
// thread-safe: one owner thread. Must not be used inside a stream capture.
#pragma once

#include <cuda_runtime_api.h>

#include <vector>

namespace vlm::cuda {

class GpuIntervalTimer {
 public:
  GpuIntervalTimer() = default;
  GpuIntervalTimer(const GpuIntervalTimer&) = delete;
  GpuIntervalTimer& operator=(const GpuIntervalTimer&) = delete;
  ~GpuIntervalTimer();

  void begin(cudaStream_t s);  // records the start event of a new interval
  void end(cudaStream_t s);    // records its end event
  // Milliseconds of the intervals completed since the last call (all of them after a sync).
  double collect();
  // Every interval collected so far, in milliseconds.
  double total_ms() const { return total_ms_; }

 private:
  cudaEvent_t take();
  struct Interval {
    cudaEvent_t start = nullptr, stop = nullptr;
  };
  std::vector<Interval> pending_;
  std::vector<cudaEvent_t> free_;
  double total_ms_ = 0;
};

}  // namespace vlm::cuda
