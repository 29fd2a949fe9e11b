// The Hopper prefill attention's entry (prefill_attention_sm90.cu); internal to
// kernels/cuda/attention: paged_prefill_attention picks it.
#pragma once

#include "kernels/cuda/attention/cuda_attention.h"

namespace vlm::cuda {

// True when the current device is sm_90 (Hopper), kv.head_dim == 128 and the cache is BF16/F16.
bool prefill_sm90_supported(const PagedKVLayer& kv);
// As paged_prefill_attention; requires prefill_sm90_supported(kv). kernel: kWgmmaWs the
// producer/consumer kernel (attend_query_tile_ws), kWgmmaPp its pingpong form
// (attend_query_tile_ws with PP: pp_consume), else all threads load and compute (attend_query_tile).
void prefill_attention_sm90(const void* q /*[T,H,D]*/, DType act, int num_heads, const PagedKVLayer& kv,
                            const CudaAttentionBatch& batch, float scale, void* out /*[T,H,D]*/,
                            PrefillKernel kernel, cudaStream_t stream);

}  // namespace vlm::cuda
