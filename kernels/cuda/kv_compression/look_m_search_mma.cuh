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

// True when the mma.sync search serves this cache: 16-bit dtype, D in {64, 128}.
bool look_m_search_mma_supported(DType dt, int head_dim);
// True when the wgmma search (look_m_search_wgmma.cu) does: an sm_90 device, 16-bit dtype, D 128.
bool look_m_search_wgmma_supported(DType dt, int head_dim);

// The kernels' kept keys, gathered once: kept_keys[h, c, :] = K of position kept[h, c] (16-bit, as
// the cache), kept_inv[h, c] = inv[h * L + kept[h, c]]. look_m_search_mma_supported caches only.
void look_m_gather_kept(const PagedKVLayer& kv, const int32_t* table, int32_t L, const int32_t* kept /*[Hkv,C]*/,
                        int32_t C, const float* inv /*[Hkv,L]*/, void* kept_keys /*[Hkv,C,D]*/,
                        float* kept_inv /*[Hkv,C]*/, cudaStream_t stream);

// arg[h * L + e], w[h * L + e] for every e = rows[h * E + i], i < E (rows null: every e < L, E = L;
// other entries untouched), from the gathered kept keys. inv[h * L + pos] = 1 / |k_pos| (0 for a
// zero key). The wgmma form needs rows (not null) and gives the same choices but for the tensor
// cores' summation order.
void look_m_search_mma(const PagedKVLayer& kv, const int32_t* table, int32_t L, const int32_t* rows /*[Hkv,E]*/,
                       int32_t E, int32_t C, const void* kept_keys, const float* kept_inv, const float* inv,
                       int32_t* arg, float* w, cudaStream_t stream);
void look_m_search_wgmma(const PagedKVLayer& kv, const int32_t* table, int32_t L, const int32_t* rows /*[Hkv,E]*/,
                         int32_t E, int32_t C, const void* kept_keys, const float* kept_inv, const float* inv,
                         int32_t* arg, float* w, cudaStream_t stream);
}  // namespace vlm::cuda
