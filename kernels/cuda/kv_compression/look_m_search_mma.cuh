// LOOK-M's similarity search on tensor cores (internal to cuda_look_m.cu; contract in cuda_look_m.h,
// look_m_nearest_kept): for every cache position e of kv head h, the kept index
// arg = first argmax_c cos(k_e, k_kept[c]) and its cosine w: the first maximum of dot(k_e, k_c) * ic
// over c, w = that * ie, with the dot a bf16/f16 mma.sync GEMM (exact 16-bit products, f32
// accumulation in the tensor cores' order: beside the f32 path's dot * (ie * ic), only the
// summation order and an ulp of scaling differ; the CPU normalizes both keys before its sgemm).
#pragma once

#include <cstdint>

#include "kernels/attention/paged_kv.h"

typedef struct CUstream_st* cudaStream_t;

namespace vlm::cuda {

// True when the mma search serves this cache: 16-bit dtype, D in {64, 128}.
bool look_m_search_mma_supported(DType dt, int head_dim);
// arg[h * L + e], w[h * L + e] for every e = rows[h * E + i], i < E (rows null: every e < L, E = L;
// other entries untouched). inv[h * L + pos] = 1 / |k_pos| (0 for a zero key); kept [Hkv, C].
// Scratch: kept_keys Hkv * C * D 16-bit elements, kept_inv Hkv * C floats.
void look_m_search_mma(const PagedKVLayer& kv, const int32_t* table, int32_t L, const int32_t* rows /*[Hkv,E]*/,
                       int32_t E, const int32_t* kept, int32_t C, const float* inv, void* kept_keys /*[Hkv,C,D]*/,
                       float* kept_inv /*[Hkv,C]*/, int32_t* arg, float* w, cudaStream_t stream);
}  // namespace vlm::cuda
