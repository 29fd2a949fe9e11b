// DeviceBuffer: one cudaMalloc'd allocation, freed on destruction (move-only), and
// PinnedBuffer: page-locked host memory for one-copy uploads and downloads.
// Allocation failures throw InternalError naming the size (VLM_CUDA_CHECK).
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <utility>

#include "kernels/cuda/core/cuda_check.h"

namespace vlm::cuda {

// One allocation made by Alloc and freed by Free on destruction or reallocation; move-only.
template <cudaError_t (*Alloc)(void**, size_t), cudaError_t (*Free)(void*)>
class CudaAllocation {
 public:
  CudaAllocation() = default;
  explicit CudaAllocation(size_t bytes) { resize(bytes); }
  ~CudaAllocation() { reset(); }
  CudaAllocation(CudaAllocation&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  CudaAllocation& operator=(CudaAllocation&& o) noexcept {
    if (this != &o) {
      reset();
      ptr_ = std::exchange(o.ptr_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  CudaAllocation(const CudaAllocation&) = delete;
  CudaAllocation& operator=(const CudaAllocation&) = delete;

  // Reallocates (contents lost) when `bytes` is larger than the current size.
  void reserve(size_t bytes) {
    if (bytes > bytes_) resize(bytes);
  }
  // As reserve, but to half again the current size at least: a buffer that grows step by step
  // reallocates (frees: a device-wide sync) a logarithmic number of times.
  void grow(size_t bytes) {
    if (bytes > bytes_) resize(std::max(bytes, bytes_ + bytes_ / 2));
  }
  void resize(size_t bytes) {
    reset();
    if (bytes) VLM_CUDA_CHECK(Alloc(&ptr_, bytes));
    bytes_ = bytes;
  }
  void reset() {
    if (ptr_) Free(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
  }
  void* get() const { return ptr_; }
  template <typename T>
  T* as() const { return static_cast<T*>(ptr_); }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

using DeviceBuffer = CudaAllocation<cudaMalloc, cudaFree>;
using PinnedBuffer = CudaAllocation<cudaMallocHost, cudaFreeHost>;

}  // namespace vlm::cuda
