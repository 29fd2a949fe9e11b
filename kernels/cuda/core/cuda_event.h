// CudaEvent: one CUDA event without timing (cudaEventDisableTiming), created at construction and
// destroyed with its holder; move-only. It does not synchronize on destruction: a holder whose
// pending work reads memory it frees waits on the event first (synchronize()), as the vision
// runners do for their metadata copies. Creation failures throw InternalError (VLM_CUDA_CHECK).
#pragma once

#include <cuda_runtime_api.h>

#include <utility>

#include "kernels/cuda/core/cuda_check.h"

namespace vlm::cuda {

class CudaEvent {
 public:
  CudaEvent() { VLM_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming)); }
  ~CudaEvent() {
    if (event_) cudaEventDestroy(event_);
  }
  CudaEvent(CudaEvent&& o) noexcept : event_(std::exchange(o.event_, nullptr)) {}
  CudaEvent& operator=(CudaEvent&& o) noexcept {
    if (this != &o) {
      if (event_) cudaEventDestroy(event_);
      event_ = std::exchange(o.event_, nullptr);
    }
    return *this;
  }
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;

  cudaEvent_t get() const { return event_; }  // null once moved from
  operator cudaEvent_t() const { return event_; }  // NOLINT: passed to the runtime's calls as is
  // Waits for the work recorded in it (none recorded: returns at once). For destructors: errors
  // are not thrown (a failed device reports them on its next checked call).
  void synchronize_quietly() const {
    if (event_) cudaEventSynchronize(event_);
  }

 private:
  cudaEvent_t event_ = nullptr;
};

}  // namespace vlm::cuda
