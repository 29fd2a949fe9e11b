#include "model/layers/cuda/cuda_sparse_counts.h"

#include <mutex>

#include "kernels/core/check.h"

namespace vlm {
namespace {

// What a step's host function adds: its slot's pinned totals, its causal blocks.
struct Record {
  const unsigned long long* totals;
  BlockCounts* target;
  double causal;
  std::atomic<bool>* busy;
};

}  // namespace

CudaSparseCounts::~CudaSparseCounts() {
  // Host functions still queued point into this object: wait for them.
  for (const auto& b : busy_)
    while (b.load()) cudaDeviceSynchronize();
}

unsigned long long* CudaSparseCounts::counter(BlockCounts* target, cudaStream_t stream) {
  if (!target) return nullptr;
  VLM_CHECK(!target_ || target_ == target, "device-planned sparse counts: two targets in one step");
  if (!acc_.get()) {
    acc_.resize(2 * sizeof(unsigned long long));
    host_.resize(kSlots * 2 * sizeof(unsigned long long));
    VLM_CUDA_CHECK(cudaMemsetAsync(acc_.get(), 0, 2 * sizeof(unsigned long long), stream));
  }
  target_ = target;
  return acc_.as<unsigned long long>();
}

void CudaSparseCounts::add(BlockCounts* target, const BlockCounts& add) {
  static std::mutex mu;
  const std::lock_guard<std::mutex> lock(mu);
  *target += add;
}

void CUDART_CB CudaSparseCounts::apply(void* p) {
  auto* r = static_cast<Record*>(p);
  add(r->target, BlockCounts{static_cast<double>(r->totals[0]) + static_cast<double>(r->totals[1]) / 64.0, r->causal});
  r->busy->store(false);
  delete r;
}

void CudaSparseCounts::finish(cudaStream_t stream) {
  if (!target_) return;
  std::atomic<bool>& busy = busy_[next_];
  if (busy.load()) VLM_CUDA_CHECK(cudaStreamSynchronize(stream));  // kSlots steps ahead of the GPU
  auto* pinned = host_.as<unsigned long long>() + 2 * next_;
  VLM_CUDA_CHECK(cudaMemcpyAsync(pinned, acc_.get(), 2 * sizeof(unsigned long long), cudaMemcpyDeviceToHost, stream));
  VLM_CUDA_CHECK(cudaMemsetAsync(acc_.get(), 0, 2 * sizeof(unsigned long long), stream));
  busy.store(true);
  auto* r = new Record{pinned, target_, causal_, &busy};
  const cudaError_t e = cudaLaunchHostFunc(stream, &CudaSparseCounts::apply, r);
  if (e != cudaSuccess) {
    busy.store(false);
    delete r;
    VLM_CUDA_CHECK(e);
  }
  next_ = (next_ + 1) % kSlots;
  target_ = nullptr;
  causal_ = 0;
}

}  // namespace vlm
