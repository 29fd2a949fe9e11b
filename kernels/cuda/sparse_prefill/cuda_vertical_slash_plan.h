// The vertical-slash heads' plans (vertical_slash_head_plan, kernels/sparse_prefill/vertical_slash.h)
// built on the GPU from CudaVerticalSlash's device lists: every head of one sequence's chunk,
// two passes (count, then fill at the scanned offsets; one thread per head and 64-row query
// block) with no host synchronization: the lists are sized by their bounds (every key block and
// every vertical of the head per query block), the schedule -- sums, the items in cost order,
// the descs, the split computed on the device -- is CudaGridPlan's one-CTA launch, and the
// attention runs a resident grid over the pieces. No per-head host work, no list download and
// no plan upload. The lists equal vertical_slash_head_plan's
// over the same indices (test_cuda_vertical_slash compares them array by array).
// Buffers are kept between calls (grown on demand); calls on one stream.
#pragma once

#include <vector>

#include "kernels/attention/block_sparse_plan.h"
#include "kernels/cuda/core/device_buffer.h"
#include "kernels/cuda/sparse_estimate/cuda_vertical_slash.h"
#include "kernels/cuda/sparse_prefill/sparse_plan_view.h"

namespace vlm::cuda {

class CudaVerticalSlashPlan {
 public:
  // est: the estimate of the chunk (its lists on the device, same stream). t0: the chunk's first
  // row in q; rows are positions [num_keys - q_len, num_keys) of batch sequence 0. Asynchronous
  // on `stream` (no host synchronization). count_acc (optional, device [2]): the plan's listed
  // key blocks and gathered columns are added to it on the stream.
  void build(const CudaVerticalSlash& est, int t0, int q_len, int num_keys, cudaStream_t stream,
             unsigned long long* count_acc = nullptr);

  SparsePlanView view() const { return view_; }
  // The causal key blocks of the last build (host arithmetic, no synchronization).
  double causal_blocks() const { return causal_; }
  // Computed / causal key blocks of the last build: synchronizes its stream and downloads the
  // totals (tests and benches; the decoder passes count_acc instead).
  BlockCounts block_counts() const;
  double block_density() const {
    const BlockCounts c = block_counts();
    return c.causal > 0 ? c.computed / c.causal : 1.0;
  }

 private:
  DeviceBuffer scratch_, temp_, plan_, split_, partial_;
  SparsePlanView view_;
  const int32_t* totals_[2] = {nullptr, nullptr};  // device: the last build's list totals
  double causal_ = 0;
  cudaStream_t stream_ = nullptr;
};

}  // namespace vlm::cuda
