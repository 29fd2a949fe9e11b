// moe_router_route_sort (moe_decode.h, 1.): the router GEMV, routing and sorting of a few tokens
// in one launch, beside moe_router_naive (the product's reference; the routing's references are
// moe_route_naive and moe_sort_naive).
#include <cstdint>

#include "kernels/cuda/core/cuda_check.h"
#include "kernels/cuda/core/element.cuh"
#include "kernels/cuda/gemm/gemv_warp.cuh"
#include "kernels/cuda/moe/moe_decode.h"
#include "kernels/cuda/moe/moe_route_block.cuh"

namespace vlm::cuda {
namespace {

using route_detail::kRouteSortThreads;
constexpr int kRouterRows = kRouteSortThreads / 32;  // router rows per block: one per warp
constexpr int kRouterUnroll = 4;                     // 16-byte vectors of the row in flight per lane
constexpr int kMaxT = static_cast<int>(kMoeRouteSortMaxTokens);
static_assert(kMaxT <= 64, "route_sort_block keeps a 64-bit token mask per expert");

template <class T>
__global__ void __launch_bounds__(kRouteSortThreads)
    router_route_sort_kernel(const T* __restrict__ h, const T* __restrict__ w, int Tn, int E, int C, int K, bool norm,
                             float* logits, int32_t* expert, float* weight, MoeSorted out, uint32_t* counter) {
  extern __shared__ unsigned long long rs_smem[];
  __shared__ bool last;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int e = blockIdx.x * kRouterRows + warp;
  if (e < E) {
    const int C8 = C / 8;
    const uint4* wr = reinterpret_cast<const uint4*>(w + static_cast<int64_t>(e) * C);
    const uint4* x = reinterpret_cast<const uint4*>(h);
    float acc[kMaxT] = {};
    for (int i0 = lane; i0 < C8; i0 += 32 * kRouterUnroll) {
      uint4 wv[kRouterUnroll];
#pragma unroll
      for (int u = 0; u < kRouterUnroll; ++u) {
        const int i = i0 + 32 * u;
        wv[u] = i < C8 ? gemv_detail::load_stream(wr + i) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int u = 0; u < kRouterUnroll; ++u) {
        const int i = i0 + 32 * u;
        if (i >= C8) break;
#pragma unroll
        for (int t = 0; t < kMaxT; ++t)
          if (t < Tn) acc[t] = gemv_detail::dot8<T>(wv[u], __ldg(x + static_cast<int64_t>(t) * C8 + i), acc[t]);
      }
    }
#pragma unroll
    for (int t = 0; t < kMaxT; ++t) {
      if (t >= Tn) break;
      const float v = gemv_detail::warp_sum(acc[t]);
      if (lane == 0) logits[static_cast<int64_t>(t) * E + e] = v;
    }
  }
  __threadfence();  // this block's logits visible to the device before its ticket
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(counter, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();  // the other blocks' logits (read through L2: route_token's __ldcg)
  route_detail::route_sort_block(logits, Tn, E, K, norm, expert, weight, out, rs_smem);
  if (threadIdx.x == 0) *counter = 0u;  // for the next launch (a graph replay)
}

template <class T>
__global__ void router_naive_kernel(const T* h, const T* w, int Tn, int E, int C, float* logits) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<int64_t>(Tn) * E) return;
  const int t = static_cast<int>(i / E), e = static_cast<int>(i % E);
  float acc = 0.f;
  for (int k = 0; k < C; ++k)
    acc = fmaf(to_f32(w[static_cast<int64_t>(e) * C + k]), to_f32(h[static_cast<int64_t>(t) * C + k]), acc);
  logits[i] = acc;
}

void check_router(int64_t T, int64_t E, int64_t C, DType dt) {
  if (T < 0 || E < 1 || E > kMoeMaxExperts || C < 1 || C > (1 << 28) || !(dt == DType::BF16 || dt == DType::F16) ||
      C % 8 != 0)
    precondition_failed("moe router: T >= 0, 1 <= E <= 1024, 16-bit dt, C % 8 == 0");
}

}  // namespace

bool moe_decode_supported(int64_t C, int64_t I, DType dt) {
  return (dt == DType::BF16 || dt == DType::F16) && C > 0 && I > 0 && C % 8 == 0 && I % 8 == 0;
}

void moe_router_route_sort(const void* h, const void* w_router, DType dt, int64_t T, int64_t E, int64_t C, int64_t K,
                           bool norm_topk, float* logits, int32_t* expert, float* weight, const MoeSorted& sorted,
                           uint32_t* counter, cudaStream_t s) {
  check_router(T, E, C, dt);
  if (T > kMoeRouteSortMaxTokens || K < 1 || K > E || K > kMoeMaxTopK || counter == nullptr)
    precondition_failed("moe_router_route_sort: T <= kMoeRouteSortMaxTokens, 1 <= K <= min(E, 32), a counter");
  if ((reinterpret_cast<uintptr_t>(h) | reinterpret_cast<uintptr_t>(w_router)) % 16 != 0)
    precondition_failed("moe_router_route_sort: h and the router weights 16-byte aligned");
  if (T == 0) return;
  const auto blocks = static_cast<unsigned>((E + kRouterRows - 1) / kRouterRows);
  const size_t smem = route_detail::route_sort_smem(E);
  auto launch = [&](auto tag) {
    using Tt = decltype(tag);
    router_route_sort_kernel<Tt><<<blocks, kRouteSortThreads, smem, s>>>(
        static_cast<const Tt*>(h), static_cast<const Tt*>(w_router), static_cast<int>(T), static_cast<int>(E),
        static_cast<int>(C), static_cast<int>(K), norm_topk, logits, expert, weight, sorted, counter);
  };
  if (dt == DType::BF16) launch(__nv_bfloat16{});
  else launch(__half{});
  VLM_CUDA_CHECK_LAUNCH();
}

void moe_router_naive(const void* h, const void* w_router, DType dt, int64_t T, int64_t E, int64_t C, float* logits,
                      cudaStream_t s) {
  check_router(T, E, C, dt);
  if (T == 0) return;
  const auto blocks = static_cast<unsigned>((T * E + 127) / 128);
  auto launch = [&](auto tag) {
    using Tt = decltype(tag);
    router_naive_kernel<Tt><<<blocks, 128, 0, s>>>(static_cast<const Tt*>(h), static_cast<const Tt*>(w_router),
                                                   static_cast<int>(T), static_cast<int>(E), static_cast<int>(C),
                                                   logits);
  };
  if (dt == DType::BF16) launch(__nv_bfloat16{});
  else launch(__half{});
  VLM_CUDA_CHECK_LAUNCH();
}

}  // namespace vlm::cuda
