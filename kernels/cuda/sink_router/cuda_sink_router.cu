// SinkRouter's anchor gather and group routing kernels (contract in cuda_sink_router.h).
#include "kernels/cuda/sink_router/cuda_sink_router.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "kernels/cuda/attention/cuda_attention_common.cuh"

namespace vlm::cuda {
namespace {

// grid S, block min(Hkv * D, 1024) threads.
__global__ void gather_anchor_kernel(KVView kv, DType dt, const int32_t* __restrict__ tables, int max_blocks,
                                     float* __restrict__ ak, float* __restrict__ av) {
  const int s = blockIdx.x, n = kv.num_kv_heads * kv.head_dim;
  const int64_t block = tables[int64_t(s) * max_blocks];
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const int64_t off = kv.offset(block, i / kv.head_dim, 0) + i % kv.head_dim;
    ak[int64_t(s) * n + i] = load_f32(kv.k, dt, off);
    if (av) av[int64_t(s) * n + i] = load_f32(kv.v, dt, off);
  }
}

struct RouteParams {  // SinkRouterConfig as the device reads it
  double c0, c1, c2, c3, length_ref, tau_min, tau_max;
  int agg;  // 0 min, 1 mean, 2 max
};

// SinkRouterConfig::threshold with explicit rounding (no contraction), as the host computes it.
__device__ double tau_of(const RouteParams& p, int context_len) {
  const double x = __ddiv_rn(double(context_len), p.length_ref);
  const double t = __dadd_rn(p.c0, __dmul_rn(x, __dadd_rn(p.c1, __dmul_rn(x, __dadd_rn(p.c2, __dmul_rn(x, p.c3))))));
  return fmin(fmax(t, p.tau_min), p.tau_max);  // std::clamp(t, lo, hi) for lo <= hi
}

// grid S, block H threads: thread h computes its cosine as sink_group_scores does (sequential f32
// over d), then thread g < Hkv aggregates its group's G cosines in head order.
template <class TQ>
__global__ void route_kernel(const TQ* __restrict__ q, int H, const float* __restrict__ ak, int Hkv, int D,
                             const int32_t* __restrict__ ctx, const uint8_t* __restrict__ routed, RouteParams p,
                             float* __restrict__ scores, uint8_t* __restrict__ skip, int32_t* __restrict__ count) {
  extern __shared__ float cosine[];  // [H]
  const int s = blockIdx.x, h = threadIdx.x, G = H / Hkv;
  const bool on = routed == nullptr || routed[s] != 0;
  if (on && h < H) {
    const float* a = ak + (int64_t(s) * Hkv + h / G) * D;
    const TQ* qh = q + (int64_t(s) * H + h) * D;
    float aa = 0.f, qa = 0.f, qq = 0.f;
    for (int d = 0; d < D; ++d) aa = __fadd_rn(aa, __fmul_rn(a[d], a[d]));
    for (int d = 0; d < D; ++d) {
      const float x = to_f32(qh[d]);
      qa = __fadd_rn(qa, __fmul_rn(x, a[d]));
      qq = __fadd_rn(qq, __fmul_rn(x, x));
    }
    const float den = __fmul_rn(__fsqrt_rn(qq), __fsqrt_rn(aa));
    cosine[h] = den > 0.f ? __fdiv_rn(qa, den) : 0.f;
  }
  __syncthreads();
  if (h >= Hkv) return;
  float sc = 0.f;
  uint8_t sk = 0;
  if (on) {
    for (int i = 0; i < G; ++i) {
      const float c = cosine[h * G + i];
      sc = i == 0 ? c : p.agg == 0 ? fminf(sc, c) : p.agg == 2 ? fmaxf(sc, c) : __fadd_rn(sc, c);
    }
    if (p.agg == 1) sc = __fdiv_rn(sc, float(G));
    sk = double(sc) >= tau_of(p, ctx[s]) ? 1 : 0;
    if (sk && count) atomicAdd(count + s, 1);
  }
  if (scores) scores[int64_t(s) * Hkv + h] = sc;
  skip[int64_t(s) * Hkv + h] = sk;
}

}  // namespace

void sink_gather_anchors(const PagedKVLayer& kv, const int32_t* block_tables, int max_blocks_per_seq, int num_seqs,
                         float* anchor_k, float* anchor_v, cudaStream_t stream) {
  if (num_seqs == 0) return;
  const int threads = std::min(1024, (kv.num_kv_heads * kv.head_dim + 31) / 32 * 32);
  gather_anchor_kernel<<<num_seqs, threads, 0, stream>>>(kv_view(kv), kv.dtype, block_tables, max_blocks_per_seq,
                                                         anchor_k, anchor_v);
  VLM_CUDA_CHECK_LAUNCH();
}

void sink_route_groups(const void* q, DType act, int num_heads, const float* anchor_k, int num_kv_heads,
                       int head_dim, const int32_t* context_lens, const uint8_t* routed, int num_seqs,
                       const SinkRouterConfig& c, float* scores, uint8_t* skip, int32_t* skip_count,
                       cudaStream_t stream) {
  VLM_CHECK(num_kv_heads > 0 && num_heads % num_kv_heads == 0 && num_heads <= 1024,
            "sink routing: H {} Hkv {}", num_heads, num_kv_heads);
  if (num_seqs == 0) return;
  const int agg = c.aggregation == SinkAggregation::Min ? 0 : c.aggregation == SinkAggregation::Mean ? 1 : 2;
  const RouteParams p{c.c0, c.c1, c.c2, c.c3, c.length_ref, c.tau_min, c.tau_max, agg};
  const int threads = (num_heads + 31) / 32 * 32;
  dispatch_float(act, [&](auto t) {
    using TQ = decltype(t);
    route_kernel<TQ><<<num_seqs, threads, num_heads * sizeof(float), stream>>>(
        static_cast<const TQ*>(q), num_heads, anchor_k, num_kv_heads, head_dim, context_lens, routed, p, scores, skip,
        skip_count);
  });
  VLM_CUDA_CHECK_LAUNCH();
}

}  // namespace vlm::cuda
