// StepProfiler: where a forward's GPU time goes, per op, when the environment sets
// VLM_CUDA_PROFILE=1 (a measuring aid for bench_cuda_decoder; off otherwise, and then free), on
// eager steps (begin() is not called for steps replayed or captured as CUDA graphs).
// mark(name) records a CUDA event on the stream after the op `name` was enqueued; end() waits for
// the stream (a host sync: measuring only) and prints to stderr the time between consecutive
// marks summed per name over the step, with each name's share.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "kernels/cuda/core/cuda_check.h"

namespace vlm {

class StepProfiler {
 public:
  StepProfiler() {
    const char* e = std::getenv("VLM_CUDA_PROFILE");
    on_ = e != nullptr && std::string(e) == "1";
  }
  ~StepProfiler() {
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
  }
  bool on() const { return on_; }
  StepProfiler(const StepProfiler&) = delete;
  StepProfiler& operator=(const StepProfiler&) = delete;

  void begin(cudaStream_t s) {
    if (!on_) return;
    names_.clear();
    mark(s, "");
  }
  // A no-op outside begin() .. end() (steps captured as CUDA graphs never begin).
  void mark(cudaStream_t s, const char* name) {
    if (!on_ || (names_.empty() && name[0] != '\0')) return;
    if (names_.size() == events_.size()) {
      cudaEvent_t e = nullptr;
      VLM_CUDA_CHECK(cudaEventCreate(&e));
      events_.push_back(e);
    }
    VLM_CUDA_CHECK(cudaEventRecord(events_[names_.size()], s));
    names_.push_back(name);
  }
  void end(cudaStream_t s, int64_t tokens) {
    if (!on_ || names_.empty()) return;
    VLM_CUDA_CHECK(cudaStreamSynchronize(s));
    std::map<std::string, double> ms;
    double total = 0;
    for (size_t i = 1; i < names_.size(); ++i) {
      float t = 0;
      VLM_CUDA_CHECK(cudaEventElapsedTime(&t, events_[i - 1], events_[i]));
      ms[names_[i]] += t;
      total += t;
    }
    std::fprintf(stderr, "profile: %lld tokens, %.3f ms on the GPU:", static_cast<long long>(tokens), total);
    for (const auto& [name, t] : ms) std::fprintf(stderr, " %s %.3f (%.1f%%)", name.c_str(), t, 100 * t / total);
    std::fprintf(stderr, "\n");
    names_.clear();
  }

 private:
  bool on_ = false;
  std::vector<cudaEvent_t> events_;
  std::vector<std::string> names_;
};

}  // namespace vlm
