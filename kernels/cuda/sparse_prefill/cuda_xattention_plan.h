// XAttention's plans (kernels/sparse_prefill/xattention.h) estimated on the GPU: per query head
// of one sequence's chunk, the antidiagonal block scores and the threshold selection run on the
// device (xattention_estimate.cuh), heads in groups whose scores fit a bounded workspace; the
// result is a bitmap of kept key blocks per (head, query block). From it either
//   - build(): the SparsePlanView of all heads made on the device (counts scanned there, lists
//     filled, work items in cost order and split like CudaGridPlan's), one small download (the
//     list total) and no per-head host work; or
//   - host_plans(): HeadPlans of some heads, in one download (mixed MMInference heads, batches of
//     several sequences, whose plans go through CudaBlockSparsePlan::upload).
// The plans equal xattention_select's on the same block scores (test_cuda_xattention; the
// selection sums masses in 2^-52 fixed point, the host in double: they could differ only when a
// cumulative mass lands within ~1e-15 of the threshold). Buffers are kept between calls (grown
// on demand); calls on one stream.
#pragma once

#include <span>
#include <vector>

#include "kernels/attention/block_sparse_plan.h"
#include "kernels/cuda/core/device_buffer.h"
#include "kernels/cuda/sparse_prefill/sparse_plan_view.h"
#include "kernels/cuda/sparse_estimate/xattention_estimate.cuh"
#include "kernels/sparse_prefill/xattention.h"

namespace vlm::cuda {

class CudaXAttentionPlan {
 public:
  // A chunk of H query heads: rows t0 .. t0 + q_len of q, positions [num_keys - q_len, num_keys)
  // (build(): batch sequence 0). Forgets earlier estimates.
  void begin(int num_heads, int t0, int q_len, int num_keys, cudaStream_t stream);
  // Estimates and selects the listed query heads with one parameter set (stride: a divisor of
  // 64); dense_from as xattention_select's (prompt_len - n_last). q[T, H, D] (device, dtype act);
  // block_table: the sequence's row (device).
  void estimate(const void* q /*[T,H,D]*/, DType act, const PagedKVLayer& kv, const int32_t* block_table,
                std::span<const int> heads, const XAttentionParams& p, int dense_from, float scale,
                cudaStream_t stream);
  // The device plan of every head (all estimated since begin). Synchronizes `stream` once.
  void build(cudaStream_t stream);
  // HeadPlans of the listed heads (estimated), [heads.size()]. Synchronizes `stream`.
  std::vector<HeadPlan> host_plans(std::span<const int> heads, cudaStream_t stream);

  SparsePlanView view() const { return view_; }
  BlockCounts block_counts() const { return counts_; }

  // The scores workspace bound (bytes; heads are estimated in groups within it). Tests lower it.
  size_t score_bytes = size_t(1) << 30;

 private:
  XAttnShape shape_;
  DeviceBuffer scores_, keep_, scratch_, temp_, plan_, split_, partial_;
  int32_t total_ = 0;
  SparsePlanView view_;
  BlockCounts counts_;
};

}  // namespace vlm::cuda
