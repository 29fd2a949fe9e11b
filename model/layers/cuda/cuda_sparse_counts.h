// CudaSparseCounts: usage.vlm.prefill_attention_density's block counts for the device-planned
// sparse prefill (CudaGridPlan, CudaVerticalSlashPlan, CudaXAttentionPlan) without a host sync
// per layer. Each layer's plan adds its listed key blocks and gathered columns to a device
// accumulator (the plans' build's count_acc) and its causal blocks (host arithmetic) to the
// step's record; finish() enqueues, once per step, the
// accumulator's copy into pinned memory and a host function that adds the step's counts to the
// target BlockCounts when the stream reaches it. So the target is complete once the stream has
// passed the step (the engine reads it after a synchronizing sample or logits download).
// One stream; the target must outlive the step's host function (a sequence outlives its steps).
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <atomic>

#include "kernels/attention/block_sparse_plan.h"
#include "kernels/cuda/core/device_buffer.h"

namespace vlm {

class CudaSparseCounts {
 public:
  CudaSparseCounts() = default;
  CudaSparseCounts(const CudaSparseCounts&) = delete;
  CudaSparseCounts& operator=(const CudaSparseCounts&) = delete;
  ~CudaSparseCounts();

  // The device accumulator ([2]: blocks, columns) of this step for `target` (null: not counted,
  // returns null). A step counts into one target (a device-planned step has one sequence).
  unsigned long long* counter(BlockCounts* target, cudaStream_t stream);
  // Adds causal key blocks to this step's record (host arithmetic).
  void add_causal(double causal) { causal_ += causal; }
  // Ends the step (no-op when nothing was added): copy, host function, accumulator zeroed.
  void finish(cudaStream_t stream);
  // *target += add under one process-wide lock: tensor-parallel ranks (their threads and their
  // GPUs' host functions) add their heads' counts to the same sequence's BlockCounts.
  static void add(BlockCounts* target, const BlockCounts& add);
  // Whether a finished step's host function has not run yet (its counts are not in the target).
  bool in_flight() const {
    for (const auto& b : busy_)
      if (b.load()) return true;
    return false;
  }

 private:
  static constexpr int kSlots = 16;  // steps in flight before finish() waits for the stream
  static void CUDART_CB apply(void* record);  // the host function: adds a step's counts to its target

  cuda::DeviceBuffer acc_;     // [2] unsigned long long, zero between steps
  cuda::PinnedBuffer host_;    // [kSlots][2] unsigned long long
  std::array<std::atomic<bool>, kSlots> busy_{};  // a slot's host function is queued
  int next_ = 0;
  BlockCounts* target_ = nullptr;  // this step's
  double causal_ = 0;
};

}  // namespace vlm
