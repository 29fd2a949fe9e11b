// The device view of flattened block-sparse plans (CudaBlockSparsePlan, cuda_block_sparse.h)
// and the kernel launcher that reads it. Plain C++17 (the .cu files compile as C++17; the public
// header uses std::span).
#pragma once

#include <cstdint>

#include "kernels/cuda/attention/cuda_attention.h"

namespace vlm::cuda {

// One (sequence, head) of the flattened plans: offsets (in int32 elements) into the plan buffer;
// q_order / k_order < 0: identity.
struct SparseHeadDesc {
  int64_t q_order, k_order, block_ptr, blocks, col_ptr, cols;
  int32_t t0, q_len, num_keys, pad;
};

// The device view the kernels read.
struct SparsePlanView {
  const int32_t* data = nullptr;         // the int32 arrays
  const SparseHeadDesc* descs = nullptr;  // [num_seqs * H]
  const int32_t* items = nullptr;         // [num_items, 4]: seq, head, qblock, desc index
  int num_items = 0;
};

// The kernel launch of paged_block_sparse_attention (checks done by the caller).
void launch_block_sparse_attention(const void* q /*[T,H,D]*/, DType act, int num_heads, const PagedKVLayer& kv,
                                   const CudaAttentionBatch& batch, const SparsePlanView& plan, float scale,
                                   void* out /*[T,H,D]*/, cudaStream_t stream);

// Bench knob (bench_cuda_sparse_prefill's side-by-side, not for serving): true (the default) looks
// each key row of a tile up once and shares it through shared memory; false repeats the lookup
// per 16-byte chunk (the first version). Not thread-safe; set before launching.
void set_block_sparse_row_offsets(bool on);

}  // namespace vlm::cuda
