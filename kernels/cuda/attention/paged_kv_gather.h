// Paged KV gather: one sequence's first n cached rows of a layer, read through its block table
// into contiguous rows, so that a dense attention (cuDNN's fused flash attention,
// model/layers/cuda/cuda_cudnn_prefill.h) can read a chunk's cached context.
//
// kv: the layer ([num_blocks, Hkv, B, D] K and V, kv.dtype); table: device int32 [>= ceil(n / B)],
// the sequence's block table row; k_out, v_out: device [n, Hkv, D] in kv.dtype (raw copies, no
// conversion). D a multiple of 8; rows of 16-byte-aligned chunks (one thread per 8 elements).
// Enqueued on `stream`; nothing is read past row n - 1 of the sequence.
#pragma once

#include <cstdint>

#include "kernels/attention/paged_kv.h"

typedef struct CUstream_st* cudaStream_t;

namespace vlm::cuda {

// Whether paged_kv_gather handles the layer (bf16/f16/f32 cache, head_dim % 8 == 0).
bool paged_kv_gather_supported(const PagedKVLayer& kv);
void paged_kv_gather(const PagedKVLayer& kv, const int32_t* table /*[ceil(n/B)]*/, int64_t n, void* k_out /*[n,Hkv,D]*/,
                     void* v_out /*[n,Hkv,D]*/, cudaStream_t stream);

}  // namespace vlm::cuda
