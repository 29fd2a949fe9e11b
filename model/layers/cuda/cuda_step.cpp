#include "model/layers/cuda/cuda_step.h"

#include "kernels/core/check.h"
#include "kernels/cuda/core/cuda_check.h"
#include "model/layers/cuda/step_profiler.h"

namespace vlm {

void* CudaScratch::get(Slot slot, int64_t bytes, cudaStream_t s) {
  if (fixed_[slot] != nullptr) {
    VLM_CHECK(bytes <= fixed_bytes_[slot], "scratch slot {}: {} bytes asked of the {} assigned", static_cast<int>(slot),
              bytes, fixed_bytes_[slot]);
    return fixed_[slot];
  }
  cuda::DeviceBuffer& b = bufs_[slot];
  if (static_cast<int64_t>(b.bytes()) < bytes) {
    VLM_CUDA_CHECK(cudaStreamSynchronize(s));  // the previous step may still read it
    b.reserve(static_cast<size_t>(bytes));
    ++*epoch_;
  }
  return b.get();
}

void CudaScratch::assign(Slot slot, void* p, int64_t bytes) {
  VLM_CHECK(p != nullptr || bytes == 0, "scratch slot {} assigned null", static_cast<int>(slot));
  fixed_[slot] = p;
  fixed_bytes_[slot] = bytes;
}

void CudaStepInts::reserve(int64_t ints) {
  if (ints <= cap_) return;
  host_.resize(static_cast<size_t>(ints) * 4);
  dev_.resize(static_cast<size_t>(ints) * 4);
  cap_ = ints;
  reset();
}

const int32_t* CudaStepInts::get(const void* key, int64_t tag, int64_t n, const std::function<void(int32_t*)>& fill,
                                 cudaStream_t s) {
  for (const Entry& e : cache_)
    if (e.key == key && e.tag == tag && e.n == n) return e.dev;
  VLM_CHECK(n >= 0 && used_ + n <= cap_, "vision call metadata: {} ints beyond the {} of {} reserved", n, used_, cap_);
  int32_t* h = host_.as<int32_t>() + used_;
  int32_t* d = dev_.as<int32_t>() + used_;
  fill(h);
  if (n > 0) VLM_CUDA_CHECK(cudaMemcpyAsync(d, h, static_cast<size_t>(n) * 4, cudaMemcpyHostToDevice, s));
  used_ += n;
  cache_.push_back({key, tag, n, d});
  return d;
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
