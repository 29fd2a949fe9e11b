#include "kernels/cuda/core/gpu_interval_timer.h"

#include "kernels/core/check.h"
#include "kernels/cuda/core/cuda_check.h"

namespace vlm::cuda {

GpuIntervalTimer::~GpuIntervalTimer() {
  for (const Interval& i : pending_) {
    cudaEventDestroy(i.start);
    if (i.stop) cudaEventDestroy(i.stop);
  }
  for (cudaEvent_t e : free_) cudaEventDestroy(e);
}

cudaEvent_t GpuIntervalTimer::take() {
  if (!free_.empty()) {
    cudaEvent_t e = free_.back();
    free_.pop_back();
    return e;
  }
  cudaEvent_t e = nullptr;
  VLM_CUDA_CHECK(cudaEventCreate(&e));
  return e;
}

void GpuIntervalTimer::begin(cudaStream_t s) {
  VLM_CHECK(pending_.empty() || pending_.back().stop != nullptr, "GpuIntervalTimer: begin() twice without end()");
  Interval i;
  i.start = take();
  VLM_CUDA_CHECK(cudaEventRecord(i.start, s));
  pending_.push_back(i);
}

void GpuIntervalTimer::end(cudaStream_t s) {
  VLM_CHECK(!pending_.empty() && pending_.back().stop == nullptr, "GpuIntervalTimer: end() without begin()");
  pending_.back().stop = take();
  VLM_CUDA_CHECK(cudaEventRecord(pending_.back().stop, s));
}

double GpuIntervalTimer::collect() {
  double ms = 0;
  size_t kept = 0;
  for (size_t k = 0; k < pending_.size(); ++k) {
    Interval& i = pending_[k];
    if (i.stop != nullptr && cudaEventQuery(i.stop) == cudaSuccess) {
      float t = 0;
      VLM_CUDA_CHECK(cudaEventElapsedTime(&t, i.start, i.stop));
      ms += t;
      free_.push_back(i.start);
      free_.push_back(i.stop);
    } else {
      pending_[kept++] = i;
    }
  }
  pending_.resize(kept);
  total_ms_ += ms;
  return ms;
}

}  // namespace vlm::cuda
