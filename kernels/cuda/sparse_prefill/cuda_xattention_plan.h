// XAttention's plans (kernels/sparse_prefill/xattention.h) estimated on the GPU: per query head
// of one sequence's chunk, the antidiagonal block scores and the threshold selection run on the
// device (xattention_estimate.cuh), heads in groups whose scores fit a bounded workspace; the
// result is a bitmap of kept key blocks per (head, query block). From it either
//   - build(): the SparsePlanView of all heads made on the device with no host synchronization:
//     the schedule is CudaGridPlan's one-CTA launch (grid_plan_run_schedule: the sums of the kept
//     counts, the items in cost order, the descs, the split computed on the device, the resident
//     grid's queue, the totals into count_acc), then one launch writes the lists and pointers;
//     the lists are sized by their bound (a query block keeps at most its causal key blocks); or
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
  // The device plan of every head (all estimated since begin). Asynchronous on `stream` (no host
  // synchronization). count_acc (optional, device [2]): the plan's listed key blocks (and zero
  // gathered columns) are added to it on the stream (usage's density without a download).
  // Refuses (VLM_CHECK) a chunk whose lists' bound passes 2^31 words (one-shot prompts past
  // ~790K keys at 28 heads; chunked prefill stays far below it).
  void build(cudaStream_t stream, unsigned long long* count_acc = nullptr);
  // HeadPlans of the listed heads (estimated), [heads.size()]. Synchronizes `stream`.
  std::vector<HeadPlan> host_plans(std::span<const int> heads, cudaStream_t stream);

  SparsePlanView view() const { return view_; }
  // The causal key blocks of the last build (host arithmetic, no synchronization).
  double causal_blocks() const { return causal_; }
  // Computed / causal key blocks of the last build: synchronizes its stream and downloads the
  // totals (tests and benches; the decoder passes count_acc instead).
  BlockCounts block_counts() const;

  // The scores workspace bound (bytes; heads are estimated in groups within it). Tests lower it.
  size_t score_bytes = size_t(1) << 30;

 private:
  XAttnShape shape_;
  DeviceBuffer scores_, keep_, scratch_, temp_, plan_, split_, partial_;
  SparsePlanView view_;
  const int32_t* totals_[2] = {nullptr, nullptr};  // device: the last build's list totals
  double causal_ = 0;
  cudaStream_t stream_ = nullptr;  // the last build's
};

}  // namespace vlm::cuda
