// The inter-modality heads' lines (kernels/sparse_prefill/modality_boundary.h,
// estimate_boundary_lines: Q-boundary and 2D-boundary) on the GPU for every query head of one
// sequence's chunk at once. From the sequence's modality codes the host derives, once per call,
// the estimating rows (each query modality's last rows of the chunk), the key groups (2D: the
// keys of each modality in position order) and each row's anchor per group -- O(N) integers,
// one upload; the device then computes each query modality's rows' probabilities
// (grid_last_q_probs over those rows), the per-pair vertical and slash sums in modality-local
// coordinates (boundary_pair_scores), and the top-k of every (head, pair) at once (line_top_k).
// One download brings every head's lines to the host (boundary_head_plan builds the plans there).
// The lines equal the CPU's up to the order of the per-line sums (f32 probabilities summed in
// f64 here, in f32 there). Scratch is kept between calls (grown on demand); calls on one stream.
#pragma once

#include <span>
#include <vector>

#include "kernels/cuda/core/device_buffer.h"
#include "kernels/cuda/sparse_estimate/grid_estimate.cuh"
#include "kernels/sparse_prefill/modality_boundary.h"

namespace vlm::cuda {

class CudaBoundaryLines {
 public:
  // q[T, H, D] (device, dtype act); block_table: the sequence's row (device); shape: t0, q_len,
  // num_keys, num_heads (rows and row_pos unused). codes[num_keys] (host): every key position's
  // modality code (the chunk's rows are the last q_len). want_q / want_2d: which kinds to
  // estimate. params[H]: each head's sizes; last_q and the forced lines of params[0] (<= 64 rows).
  // Enqueues on `stream`; no sync.
  void estimate(const void* q /*[T,H,D]*/, DType act, const PagedKVLayer& kv, const int32_t* block_table,
                const GridEstimateShape& shape, float scale, const uint8_t* codes /*[num_keys]*/, bool want_q,
                bool want_2d, std::span<const BoundaryParams> params, cudaStream_t stream);

  // Enqueues the lines' download (pinned); after the stream is synchronized, lines(kind, h) is
  // head h's BoundaryLines of that kind (estimated).
  void download(cudaStream_t stream);
  BoundaryLines lines(BoundaryKind kind, int h) const;

 private:
  struct Grouping {  // one kind's key groups
    std::vector<int> codes;         // [G] modality code of each group (-1: all keys)
    std::vector<int32_t> start;     // [G + 1]
    int64_t anchor_at = 0;          // word offset of its anchors [sumR, G] in the table upload
    int64_t start_at = 0, order_at = -1;  // word offsets of start and order (-1: identity)
  };
  std::vector<int> mq_codes_;               // [Mq] query modality codes present in the chunk
  std::vector<int32_t> row_begin_;          // [Mq + 1] rows of each query modality
  std::vector<Grouping> kinds_;             // slot 0 Q, slot 1 2D (codes empty: not estimated)
  std::vector<int64_t> seg_;                // begin [S + 1], out_begin [S + 1], k [S]
  int num_heads_ = 0, num_keys_ = 0;
  DeviceBuffer table_, probs_, scores_, segd_, lists_, scratch_;
  PinnedBuffer lists_h_;
};

}  // namespace vlm::cuda
