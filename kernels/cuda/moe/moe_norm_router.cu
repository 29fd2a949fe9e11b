// moe_norm_router_route_sort (moe_decode.h, 1n.): the MoE block's RMS pre-norm, the router GEMV,
// the routing and the sort of a few tokens in ONE launch. Each block of 4 warps (4 router rows)
// first puts its rows' first 16-byte vectors in flight, then normalizes the T tokens' rows of x
// into shared memory exactly as rms_norm's rms_norm_x4_kernel does (ops_cuda.cu: the same
// threads' sums in the same order, the same roundings; block 0 also writes them out for the
// expert GEMVs), then each warp sums its row against them as moe_router_route_sort does (the same
// logits, bit for bit); the block with the last ticket routes (one warp per token,
// route_warp::route_token_regs) and sorts (one warp, route_warp::sort_pairs_warp).
#include <cstdint>

#include "kernels/cuda/core/cuda_check.h"
#include "kernels/cuda/core/element.cuh"
#include "kernels/cuda/gemm/gemv_warp.cuh"
#include "kernels/cuda/moe/moe_decode.h"
#include "kernels/cuda/moe/moe_route_warp.cuh"

namespace vlm::cuda {
namespace {

constexpr int kThreads = 128;             // rms_norm_x4_kernel's block: its sum order needs 128 threads
constexpr int kWarps = kThreads / 32;     // router rows per block, one per warp
constexpr int kRowVectors = 8;            // 16-byte vectors per lane in flight (C = 2048 bf16: the whole row)
constexpr int kNormGroups = 8;            // float4 groups of x per thread (C <= 4096)
constexpr int kMaxT = static_cast<int>(kMoeRouteSortMaxTokens);
constexpr int kPer = 8;                   // router logits per lane in routing (E <= 256)
constexpr int kMaxExperts = 32 * kPer;
static_assert(kMaxT <= 32, "token masks are 32-bit");
static_assert(kMaxExperts == kMoeNormRouterMaxExperts && kMoeNormRouterMaxC == 4 * kThreads * kNormGroups,
              "moe_limits.h's moe_norm_router_shape_ok describes this kernel");
static_assert(kMoeNormRouterSmem + 4 * 1024 <= 48 * 1024, "dynamic + static shared memory without an opt-in");

template <class T>
struct alignas(4 * sizeof(T)) Vec4 {
  T e[4];
};

// xs[t, :] = round_dt(g * (x[t, :] * rsqrt(ss_t / C + eps))) for t < Tn, ss_t as rms_norm_x4_kernel
// sums it: thread v of 128 fmaf's x, y, z, w of its float4 groups v, v + 128, ... in order, then
// the warp's xor butterfly, then ((w0 + w2) + (w1 + w3)) (block_sum over 4 warps). `out` (block 0
// only, else null) gets the same rows. Ends with a barrier.
template <class T>
__device__ __forceinline__ void normalize_rows(const float* __restrict__ x, const float* __restrict__ g, float eps,
                                               int Tn, int C, T* xs, T* out) {
  __shared__ float part[kMaxT][kWarps];
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, C4 = C / 4;
  const float4* g4 = reinterpret_cast<const float4*>(g);
#pragma unroll 1
  for (int t = 0; t < Tn; ++t) {
    const float4* xr = reinterpret_cast<const float4*>(x + static_cast<int64_t>(t) * C);
    float4 v[kNormGroups], gv[kNormGroups];
#pragma unroll
    for (int j = 0; j < kNormGroups; ++j) {
      const int c4 = tid + kThreads * j;
      v[j] = c4 < C4 ? __ldcg(xr + c4) : make_float4(0.f, 0.f, 0.f, 0.f);  // x: the step's residual stream
      gv[j] = c4 < C4 ? __ldg(g4 + c4) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
    float ss = 0.f;
#pragma unroll
    for (int j = 0; j < kNormGroups; ++j) {
      if (tid + kThreads * j >= C4) break;
      ss = fmaf(v[j].x, v[j].x, ss);
      ss = fmaf(v[j].y, v[j].y, ss);
      ss = fmaf(v[j].z, v[j].z, ss);
      ss = fmaf(v[j].w, v[j].w, ss);
    }
    ss = gemv_detail::warp_sum(ss);
    if (lane == 0) part[t][warp] = ss;
    __syncthreads();
    ss = (part[t][0] + part[t][2]) + (part[t][1] + part[t][3]);
    const float inv = rsqrtf(ss / static_cast<float>(C) + eps);
    Vec4<T>* xo = reinterpret_cast<Vec4<T>*>(xs + static_cast<int64_t>(t) * C);
    Vec4<T>* go = out ? reinterpret_cast<Vec4<T>*>(out + static_cast<int64_t>(t) * C) : nullptr;
#pragma unroll
    for (int j = 0; j < kNormGroups; ++j) {
      const int c4 = tid + kThreads * j;
      if (c4 >= C4) break;
      Vec4<T> h;
      h.e[0] = from_f32<T>(__fmul_rn(gv[j].x, __fmul_rn(v[j].x, inv)));
      h.e[1] = from_f32<T>(__fmul_rn(gv[j].y, __fmul_rn(v[j].y, inv)));
      h.e[2] = from_f32<T>(__fmul_rn(gv[j].z, __fmul_rn(v[j].z, inv)));
      h.e[3] = from_f32<T>(__fmul_rn(gv[j].w, __fmul_rn(v[j].w, inv)));
      xo[c4] = h;
      if (go) go[c4] = h;
    }
  }
  __syncthreads();
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    norm_router_route_sort_kernel(const float* __restrict__ x, const float* __restrict__ g, float eps, T* h_out,
                                  const T* __restrict__ w, int Tn, int E, int C, int K, bool norm, float* logits,
                                  int32_t* expert, float* weight, MoeSorted out, uint32_t* counter) {
  extern __shared__ uint4 nr_smem[];  // [Tn, C] dt: the normalized rows
  __shared__ unsigned mask[kMaxExperts];
  __shared__ int offset[kMaxExperts];
  __shared__ int pair_e[kMaxT * kMoeMaxTopK];  // [T, K] the choices, for the sort
  __shared__ bool last;
  T* xs = reinterpret_cast<T*>(nr_smem);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int e = blockIdx.x * kWarps + warp, C8 = C / 8;
  const uint4* wr = reinterpret_cast<const uint4*>(w + static_cast<int64_t>(e < E ? e : 0) * C);
  uint4 wv[kRowVectors];  // the row's first vectors, in flight during the norm
#pragma unroll
  for (int u = 0; u < kRowVectors; ++u) {
    const int i = lane + 32 * u;
    wv[u] = e < E && i < C8 ? gemv_detail::load_stream(wr + i) : make_uint4(0, 0, 0, 0);
  }
  normalize_rows<T>(x, g, eps, Tn, C, xs, blockIdx.x == 0 ? h_out : nullptr);
  if (e < E) {
    const uint4* xv = reinterpret_cast<const uint4*>(xs);
    float acc[kMaxT] = {};
    for (int i0 = lane; i0 < C8; i0 += 32 * kRowVectors) {
      if (i0 != lane) {
#pragma unroll
        for (int u = 0; u < kRowVectors; ++u) {
          const int i = i0 + 32 * u;
          wv[u] = i < C8 ? gemv_detail::load_stream(wr + i) : make_uint4(0, 0, 0, 0);
        }
      }
#pragma unroll
      for (int u = 0; u < kRowVectors; ++u) {  // i ascending per lane: moe_router_route_sort's order
        const int i = i0 + 32 * u;
        if (i >= C8) break;
#pragma unroll
        for (int t = 0; t < kMaxT; ++t)
          if (t < Tn) acc[t] = gemv_detail::dot8<T>(wv[u], xv[t * C8 + i], acc[t]);
      }
    }
#pragma unroll
    for (int t = 0; t < kMaxT; ++t) {
      if (t >= Tn) break;
      const float v = gemv_detail::warp_sum(acc[t]);
      if (lane == 0) logits[static_cast<int64_t>(t) * E + e] = v;
    }
  }
  for (int i = threadIdx.x; i < E; i += kThreads) mask[i] = 0;  // for the routing, if this block is the last
  __threadfence();  // this block's logits (and block 0's h_out) visible before its ticket
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(counter, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();  // the other blocks' logits (read through L2: __ldcg)
  const bool sort = out.offsets != nullptr;  // null: the pair path, which reads expert / weight only
  if (!sort && threadIdx.x == 0) *counter = 0u;  // every block has its ticket: for the next launch
  for (int t = warp; t < Tn; t += kWarps) {
    const int my_e = route_warp::route_token_regs<kPer>(logits, t, E, K, norm, lane, expert, weight, pair_e);
    if (sort && lane < K) atomicOr(&mask[my_e], 1u << t);
  }
  if (!sort) return;
  __syncthreads();
  if (warp != 0) return;
  route_warp::sort_pairs_warp(mask, offset, pair_e, Tn, E, K, lane, out);
  if (lane == 0) *counter = 0u;  // for the next launch (a graph replay)
}

}  // namespace

bool moe_norm_router_supported(int64_t T, int64_t E, int64_t C, int64_t K, DType dt) {
  return (dt == DType::BF16 || dt == DType::F16) && moe_norm_router_shape_ok(T, E, C, K);
}

void moe_norm_router_route_sort(const float* x, const float* norm_w, float eps, void* h_out, const void* w_router,
                                DType dt, int64_t T, int64_t E, int64_t C, int64_t K, bool norm_topk, float* logits,
                                int32_t* expert, float* weight, const MoeSorted& sorted, uint32_t* counter,
                                cudaStream_t s) {
  if (!moe_norm_router_supported(T, E, C, K, dt) || counter == nullptr)
    precondition_failed("moe_norm_router_route_sort: moe_norm_router_supported(T, E, C, K, dt) and a counter");
  if ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(norm_w) | reinterpret_cast<uintptr_t>(h_out) |
       reinterpret_cast<uintptr_t>(w_router)) %
          16 !=
      0)
    precondition_failed("moe_norm_router_route_sort: x, the norm weight, h and the router weights 16-byte aligned");
  const auto blocks = static_cast<unsigned>((E + kWarps - 1) / kWarps);
  const size_t smem = static_cast<size_t>(T * C * 2);
  auto launch = [&](auto tag) {
    using Tt = decltype(tag);
    norm_router_route_sort_kernel<Tt><<<blocks, kThreads, smem, s>>>(
        x, norm_w, eps, static_cast<Tt*>(h_out), static_cast<const Tt*>(w_router), static_cast<int>(T),
        static_cast<int>(E), static_cast<int>(C), static_cast<int>(K), norm_topk, logits, expert, weight, sorted,
        counter);
  };
  if (dt == DType::BF16) launch(__nv_bfloat16{});
  else launch(__half{});
  VLM_CUDA_CHECK_LAUNCH();
}

}  // namespace vlm::cuda
