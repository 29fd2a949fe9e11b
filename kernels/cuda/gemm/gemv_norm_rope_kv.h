// The decode step's q/k/v projection with everything that follows it before attention, in one
// kernel: gemv_norm (gemv_norm.h: input RMSNorm folded into the GEMV) writes qkv, and the block
// that finishes the last column group of a head (a per-head arrival counter) then applies that
// head's epilogue for the M rows, as rope_split_q_kv_write (kernels/cuda/attention/cuda_attention.h)
// does over the stored qkv: [Qwen3's q/k RMSNorm,] RoPE of q and k, q into q [M, H, D], the k and
// v rows into their cache slots (16-bit or F8_E4M3 cache; slot -1 skipped). One launch instead
// of two per layer (the kernel boundary, ~1.2 us on the H200's decode graph, session 16).
//   qkv = gemv_norm(x, norm_w, w, bias)                   [M, (H + 2 Hkv) D] dt, as gemv_norm writes it
//   q, cache = rope_split_q_kv_write(qkv, table, slots, head_norm)
// Every output is the same bytes as those two calls in sequence (the epilogue reads the stored,
// rounded qkv back through L2 and runs rope_rows.cuh's code in the same lane order); the
// reference is those two calls (tests/kernels/cuda/test_cuda_gemv_norm_rope_kv.cpp).
//
// Contract: gemv_norm's (x, norm_w, w, bias, qkv 16-byte aligned device pointers; dt BF16 or F16;
// K % 8 == 0; M in [1, kGemvMaxRows]; M K sizeof(dt) <= kGemvNormMaxStagedBytes; qkv must not
// overlap x; rows of x not gathered) and rope_split_q_kv_write's (table [M, R] f32, slots [M],
// q [M, H, D] dt, kv a cache of dt or F8_E4M3 with its scales, R / 2 % 8 == 0, R <= D; with
// head_norm.q_w: k_w too and D / 8 a power of two <= 32), plus: D % 8 == 0 and D <= 256, and
// counters [H + 2 Hkv] int32 device memory, all 0 before the call (every call leaves them 0;
// calls sharing them run on one stream). gemv_norm_rope_kv_supported says whether the shape and
// types qualify. Only enqueues on `s` (capturable in a CUDA graph); inside an active PdlScope it
// launches with programmatic dependent launch as gemv_norm does.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/attention/paged_kv.h"
#include "kernels/core/dtype.h"
#include "kernels/cuda/attention/cuda_attention.h"

namespace vlm::cuda {

bool gemv_norm_rope_kv_supported(int64_t M, int64_t K, DType dt, const PagedKVLayer& kv, int64_t R, bool head_norm);

void gemv_norm_rope_kv(const float* x /*[M,K]*/, const float* norm_w /*[K]*/, float eps, const void* w /*[N,K]*/,
                       DType dt, const void* bias /*[N] or null*/, void* qkv /*[M,N]*/, int64_t M, int64_t K,
                       int64_t H, const float* table /*[M,R]*/, int64_t R, void* q /*[M,H,D]*/, const PagedKVLayer& kv,
                       const int32_t* slot_mapping /*[M]*/, const HeadNorm& head_norm, int32_t* counters /*[N/D]*/,
                       cudaStream_t s);

}  // namespace vlm::cuda
