// The shape limits of the mixture-of-experts kernels (moe_cuda.h, moe_decode.h) and the choice
// of the decode forms, host-only so that the
// load-time checks (engine/backends/cuda_model_support.h) read them without the CUDA headers.
#pragma once

#include <cstdint>

namespace vlm::cuda {

constexpr int64_t kMoeMaxExperts = 1024;  // routing keeps a token's E probabilities in shared memory
constexpr int64_t kMoeMaxTopK = 32;       // one choice per lane of a warp

// moe_route_sort's one block runs up to this many tokens (moe_cuda.h says why), and so does
// moe_router_route_sort (moe_decode.h).
constexpr int64_t kMoeRouteSortMaxTokens = 8;
// moe_decode.h's pair GEMVs run for T <= this many tokens. Measured (bench_cuda_moe, Qwen3-30B-A3B
// layer, H200, session 18 call B, µs per layer as a graph, old / new form): T = 1 41.02 / 39.69,
// T = 2 61.08 / 65.53, T = 4 95.80 / 115.80: the pair form wins at one token only.
constexpr int64_t kMoePairGemvMaxTokens = 1;

// Which of moe_decode.h's forms CudaMoe (model/layers/cuda/cuda_moe.h) runs for a step of T tokens:
// fused_router for 1 <= T <= kMoeRouteSortMaxTokens, pair_gemv for 1 <= T <= kMoePairGemvMaxTokens,
// neither with `old` (VLM_MOE_DECODE=old), a 32-bit dt, C or I not a multiple of 8 (16-byte rows),
// or router weights not in the compute dtype (FP8).
// norm_router (moe_decode.h, 1n.: the RMS pre-norm folded into the fused router) when
// fused_router and norm_fusable: the caller's RMSNorm pre-norm, the switch on
// (VLM_MOE_NORM_ROUTER, kMoeNormRouterDefault) and moe_norm_router_shape_ok.
struct MoeDecodePlan {
  bool fused_router = false;
  bool pair_gemv = false;
  bool norm_router = false;
};
inline MoeDecodePlan moe_decode_plan(int64_t T, int64_t C, int64_t I, bool dt16, bool router_in_dt, bool old,
                                     bool norm_fusable = false) {
  MoeDecodePlan p;
  const bool ok = !old && dt16 && router_in_dt && C > 0 && I > 0 && C % 8 == 0 && I % 8 == 0 && T >= 1;
  p.fused_router = ok && T <= kMoeRouteSortMaxTokens;
  p.pair_gemv = ok && T <= kMoePairGemvMaxTokens;
  p.norm_router = p.fused_router && norm_fusable;
  return p;
}

// moe_norm_router_route_sort's shapes (16-bit dt): T <= kMoeRouteSortMaxTokens, E <= 256 (8
// router logits per lane of the routing warp), C % 8 == 0 and C <= 4096 (rms_norm's 128-thread
// kernel: 8 float4 groups per thread), the normalized rows [T, C] 16-bit in 44 KB of shared memory
// (C = 2048: T <= 11; no opt-in needed).
constexpr int64_t kMoeNormRouterMaxExperts = 256, kMoeNormRouterMaxC = 4096, kMoeNormRouterSmem = 44 * 1024;
inline bool moe_norm_router_shape_ok(int64_t T, int64_t E, int64_t C, int64_t K) {
  return T >= 1 && T <= kMoeRouteSortMaxTokens && E >= 1 && E <= kMoeNormRouterMaxExperts && K >= 1 && K <= E &&
         K <= kMoeMaxTopK && C > 0 && C % 8 == 0 && C <= kMoeNormRouterMaxC && T * C * 2 <= kMoeNormRouterSmem;
}
// Whether CudaMoe folds its RMS pre-norm into the router when VLM_MOE_NORM_ROUTER is unset
// (VLM_MOE_NORM_ROUTER=1 / 0 overrides). On since session 19's call D (Qwen3-30B-A3B shape, one sequence at
// 1K: 3.355 vs 3.490 ms a step; tests bit-equal to the two launches): bench/RESULTS.md "Session 19, call D".
constexpr bool kMoeNormRouterDefault = true;

// Whether CudaMoe's one-token down+combine is moe_decode.h's 3b. (moe_pair_down_combine_bulk: the
// staged form filled by bulk copies; the same bits as 3'.) when VLM_MOE_DOWN_BULK is unset
// (VLM_MOE_DOWN_BULK=1 / 0 overrides; VLM_MOE_DECODE=v1 runs 3. whatever this says). On: session
// 20's call M measured bench_cuda_moe "kernel down_combine form=bulk" 12.21 us against "form=staged"
// 12.47 (the 30B-A3B step with it and the short decode 3.23 vs 3.30 ms with neither).
constexpr bool kMoeDownBulkDefault = true;

}  // namespace vlm::cuda
