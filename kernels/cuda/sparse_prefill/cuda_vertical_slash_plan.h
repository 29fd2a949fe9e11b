// The vertical-slash heads' plans (vertical_slash_head_plan, kernels/sparse_prefill/vertical_slash.h)
// built on the GPU from CudaVerticalSlash's device lists: every head of one sequence's chunk,
// two passes (count, then fill at the scanned offsets; one thread per head and 64-row query
// block) with one small download (the two list totals) in between; the work items ordered and
// long ones split as CudaGridPlan does (grid_plan.cuh's schedule, split and items). No per-head
// host work, no list download and no plan upload. The lists equal vertical_slash_head_plan's
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
  // row in q; rows are positions [num_keys - q_len, num_keys) of batch sequence 0. Synchronizes
  // `stream` once.
  void build(const CudaVerticalSlash& est, int t0, int q_len, int num_keys, cudaStream_t stream);

  SparsePlanView view() const { return view_; }
  BlockCounts block_counts() const { return counts_; }
  double block_density() const { return counts_.causal > 0 ? counts_.computed / counts_.causal : 1.0; }

 private:
  DeviceBuffer scratch_, temp_, plan_, split_, partial_;
  PinnedBuffer totals_;
  SparsePlanView view_;
  BlockCounts counts_;
};

}  // namespace vlm::cuda
