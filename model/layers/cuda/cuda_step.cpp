#include "model/layers/cuda/cuda_step.h"

#include "kernels/core/check.h"
#include "kernels/cuda/core/cuda_check.h"
#include "model/decoder/cuda/step_profiler.h"

namespace vlm {

void* CudaScratch::get(Slot slot, int64_t bytes, cudaStream_t s) {
  cuda::DeviceBuffer& b = bufs_[slot];
  if (static_cast<int64_t>(b.bytes()) < bytes) {
    VLM_CUDA_CHECK(cudaStreamSynchronize(s));  // the previous step may still read it
    b.reserve(static_cast<size_t>(bytes));
    ++*epoch_;
  }
  return b.get();
}

CudaStep& CudaStep::of(Step& s) {
  auto* c = dynamic_cast<CudaStep*>(&s);
  VLM_CHECK(c != nullptr, "a CUDA layer was given another backend's step");
  return *c;
}

void CudaStep::mark(const char* what) const {
  if (prof) prof->mark(stream, what);
}

}  // namespace vlm
