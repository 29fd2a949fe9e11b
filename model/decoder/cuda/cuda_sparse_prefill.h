// Sparse prefill in CudaDecoder (the GPU's counterpart of model/methods/sparse_prefill_attention):
// per layer, the BlockSparsePlan of every sequence whose ForwardBatch::sparse_prefill entry is
// enabled (q_len > 1), an all-blocks plan for the other sequences (decode rows, dense prompts),
// one upload and one paged_block_sparse_attention call over the whole batch. Plans are made on
// the host from the configuration (A-shape, tri-shape, dense heads) and from the grid layouts
// the device searches (CudaGridSearch); configurations that need the chunk's data on the host
// (plannable_without_host_data false) are refused with a RequestError. Rows of sequences without
// sparse prefill go through the all-blocks plan: equal to the dense kernel up to rounding (the
// same tiles in the same order; the CUDA block-sparse test measures it), not bit-identical.
#pragma once

#include <vector>

#include "kernels/cuda/attention/cuda_block_sparse.h"
#include "kernels/cuda/attention/cuda_grid_search.h"
#include "model/decoder/forward_batch.h"

namespace vlm {

class CudaSparsePrefill {
 public:
  // Whether some sequence of b prefills sparsely this step (enabled, q_len > 1).
  static bool active(const ForwardBatch& b);

  // q[T, H, D], out[T, H, D] (device, dtype act); meta: b's device metadata. The step's K/V are
  // in the cache. Adds each sparse sequence's block counts to b.sparse_block_counts[s].
  void attention(int layer, const ForwardBatch& b, const void* q /*[T,H,D]*/, DType act, int num_heads,
                 const PagedKVLayer& kv, const cuda::CudaAttentionBatch& meta, float scale, void* out /*[T,H,D]*/,
                 cudaStream_t stream);

 private:
  BlockSparsePlan plan_sequence(int layer, const ForwardBatch& b, int s, const void* q, DType act, int H,
                                const PagedKVLayer& kv, const cuda::CudaAttentionBatch& meta, float scale,
                                cudaStream_t stream);

  cuda::CudaGridSearch grid_;
  cuda::CudaBlockSparsePlan plan_;
};

}  // namespace vlm
