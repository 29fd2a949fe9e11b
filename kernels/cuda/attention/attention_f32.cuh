// The f32 attention kernel (no tensor cores, no TF32): the exact path for an F32 cache, for both
// prefill and decode. Internal to kernels/cuda/attention.
#pragma once

#include "kernels/cuda/attention/cuda_attention.h"

namespace vlm::cuda {

// q/out [T, H, D] in dtype act. decode: one query row per sequence (row s of sequence s,
// cu_seqlens_q not read), else rows as in the batch. Requires kv.dtype == F32, D in {64, 128}.
void attention_f32(const void* q, DType act, int num_heads, const PagedKVLayer& kv, const CudaAttentionBatch& batch,
                   float scale, void* out, bool decode, cudaStream_t stream);

}  // namespace vlm::cuda
