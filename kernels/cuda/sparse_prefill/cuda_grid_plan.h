// The grid heads' plans (MMInference's grid pattern, kernels/sparse_prefill/grid.h) built on the
// GPU: from one layout per query head (CudaGridSearch), the plan of every head of one sequence's
// chunk -- grid permutations of rows and keys, the block lists of each 64-row query block, the
// sink columns, the work items in cost order -- is made on the device in two passes (count, then
// fill at the scanned offsets), with one small download (the two list totals) in between. No
// per-head host work and no plan upload. The lists equal grid_head_plan's (test_cuda_grid_plan
// compares them array by array, and the attention outputs bit for bit); the items are ordered
// like CudaBlockSparsePlan::upload's (stable, by cost), so the attention runs the same schedule.
// Block pointers are absolute into the lists of all heads (the kernel only takes differences).
// Long items are split (SplitPolicy, the policy CudaBlockSparsePlan::upload applies, from the
// same totals) on the device too: piece and slot offsets scanned there, the launch sized by the
// policy's bound (no further download).
// Buffers are kept between calls (grown on demand); calls on one stream.
#pragma once

#include <span>
#include <vector>

#include "kernels/attention/block_sparse_plan.h"
#include "kernels/cuda/sparse_prefill/grid_plan.cuh"
#include "kernels/cuda/sparse_prefill/sparse_plan_view.h"
#include "kernels/cuda/core/device_buffer.h"
#include "kernels/sparse_prefill/grid.h"

namespace vlm::cuda {

class CudaGridPlan {
 public:
  // layouts[H]: each head's layout (strides <= kGridPlanMaxStride, at most kGridPlanMaxLines
  // vertical / horizontal groups); params: the switches (band, lines, n_init). t0: the chunk's first
  // row in q; rows are positions [num_keys - q_len, num_keys) of the sequence (batch sequence 0).
  // Synchronizes `stream` once.
  void build(std::span<const GridLayout> layouts, const GridParams& params, int t0, int q_len, int num_keys,
             cudaStream_t stream);

  SparsePlanView view() const { return view_; }
  int num_heads() const { return num_heads_; }
  BlockCounts block_counts() const { return counts_; }
  double block_density() const { return counts_.causal > 0 ? counts_.computed / counts_.causal : 1.0; }

 private:
  DeviceBuffer layouts_, scratch_, temp_, plan_, split_, partial_;
  std::vector<int32_t> totals_{0, 0};
  SparsePlanView view_;
  int num_heads_ = 0;
  BlockCounts counts_;
};

}  // namespace vlm::cuda
