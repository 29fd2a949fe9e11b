// Vertical-slash estimation (kernels/sparse_prefill/vertical_slash.h, estimate_vertical_slash) on
// the GPU for every query head of one sequence's chunk at once: the last rows' causal softmax over
// all keys (grid_last_q_probs), column and diagonal sums (grid_line_sums), the forced first
// columns and band set to +inf, the top vertical_size columns and top slash_size diagonals of each
// head (line_top_k: ties to the smaller index) -- every head's sorted lists in one go, on the
// device. The lists stay there for a device plan (CudaVerticalSlashPlan), or come to the host in
// one download (download + indices: for vertical_slash_head_plan).
// The lists equal the CPU's up to the order of the per-line sums (f32 products summed in f64
// here, in f32 there): near-ties may pick different lines (test_cuda_vertical_slash measures it).
// Scratch is kept between calls (grown on demand); calls on one stream.
#pragma once

#include <span>
#include <vector>

#include "kernels/cuda/core/device_buffer.h"
#include "kernels/cuda/sparse_estimate/grid_estimate.cuh"
#include "kernels/sparse_prefill/vertical_slash.h"

namespace vlm::cuda {

class CudaVerticalSlash {
 public:
  // q[T, H, D] (device, dtype act); block_table: the sequence's row (device); shape.rows = last_q
  // (<= 64, <= q_len; shape.row_pos unset). params[H]: each head's sizes (clamped as the CPU's:
  // min(N, max(vertical_size, 30)), min(N, max(slash_size, 50))) and forced lines (those of
  // params[0] for every head). Enqueues on `stream`; no sync.
  void estimate(const void* q /*[T,H,D]*/, DType act, const PagedKVLayer& kv, const int32_t* block_table,
                const GridEstimateShape& shape, float scale, std::span<const VerticalSlashParams> params,
                cudaStream_t stream);

  // The device lists of the last estimate: head h's verticals ascending at lists() +
  // offset(h), count(h) of them; its slashes ASCENDING at lists() + offset(H + h), count(H + h).
  const int32_t* lists() const { return lists_.as<int32_t>(); }
  int64_t offset(int segment) const { return out_begin_h_[segment]; }
  int32_t count(int segment) const { return k_h_[segment]; }
  int num_heads() const { return num_heads_; }
  // The same offsets and counts on the device ([2H] int64 each).
  const int64_t* device_offsets() const { return seg_.as<int64_t>() + 2 * num_heads_ + 1; }
  const int64_t* device_counts() const { return seg_.as<int64_t>() + 4 * num_heads_ + 2; }

  // Enqueues the lists' download (pinned) on `stream`; after the stream is synchronized,
  // indices(h) is head h's VerticalSlashIndices (verticals ascending, slashes descending).
  void download(cudaStream_t stream);
  VerticalSlashIndices indices(int h) const;

 private:
  DeviceBuffer probs_, col_, slash_, scores_, seg_, lists_, scratch_;
  PinnedBuffer lists_h_;
  std::vector<int64_t> out_begin_h_;
  std::vector<int32_t> k_h_;
  int num_heads_ = 0;
};

}  // namespace vlm::cuda
