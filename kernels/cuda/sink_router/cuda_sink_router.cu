// SinkRouter's anchor gather and group routing kernels (contract in cuda_sink_router.h). An
// F8_E4M3 cache is read as the values it represents (load_kv_f32: times the head's scale).
#include "kernels/cuda/sink_router/cuda_sink_router.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "kernels/cuda/attention/cuda_attention_common.cuh"
#include "kernels/cuda/core/block_reduce.cuh"

namespace vlm::cuda {
namespace {

// grid S, block min(Hkv * D, 1024) threads.
__global__ void gather_anchor_kernel(KVView kv, DType dt, const int32_t* __restrict__ tables, int max_blocks,
                                     float* __restrict__ ak, float* __restrict__ av) {
  const int s = blockIdx.x, n = kv.num_kv_heads * kv.head_dim;
  const int64_t block = tables[int64_t(s) * max_blocks];
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const int64_t off = kv.offset(block, i / kv.head_dim, 0) + i % kv.head_dim;
    ak[int64_t(s) * n + i] = load_kv_f32(kv, dt, false, i / kv.head_dim, off);
    if (av) av[int64_t(s) * n + i] = load_kv_f32(kv, dt, true, i / kv.head_dim, off);
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

// Where the route kernel takes sequence s's anchor keys: the gathered array ak [S, Hkv, D]; or
// (stores not null) layer `layer` of the store stores[s] [2, num_layers, Hkv, D] (K then V; a null
// store gives zeros); or else slot 0 of the sequence's first block of the cache, as
// gather_anchor_kernel reads it. With the last two, av (when not null) receives the anchor values.
struct AnchorSource {
  const float* ak;
  KVView kv;
  DType dt;
  const int32_t* tables;
  int max_blocks;
  float* av;
  const float* const* stores = nullptr;
  int layer = 0, num_layers = 0;
};

// grid S, block of at least H threads (a multiple of 32): the anchors [Hkv, D] and the queries
// [H, D] go to shared memory first (as f32, every thread loading: the loads overlap); then thread
// h computes its cosine as sink_group_scores does (sequential f32 over d), and thread g < Hkv
// aggregates its group's G cosines in head order.
template <class TQ>
__global__ void route_kernel(const TQ* __restrict__ q, int H, AnchorSource src, int Hkv, int D,
                             const int32_t* __restrict__ ctx, const uint8_t* __restrict__ routed, RouteParams p,
                             float* __restrict__ scores, uint8_t* __restrict__ skip, int32_t* __restrict__ count) {
  extern __shared__ float smem[];
  // Rows padded to D + 1 floats: the heads' sequential loops read column d of different rows
  // without bank conflicts.
  const int P = D + 1;
  float* cosine = smem;                // [H]
  float* anchor = smem + H;            // [Hkv, P]
  float* qs = anchor + Hkv * P;        // [H, P]
  const int s = blockIdx.x, h = threadIdx.x, G = H / Hkv;
  const bool on = routed == nullptr || routed[s] != 0;
  const int64_t block = src.ak || src.stores ? 0 : src.tables[int64_t(s) * src.max_blocks];
  const float* store = src.stores ? src.stores[s] : nullptr;
  const int64_t n = int64_t(Hkv) * D;
  for (int i = h; i < Hkv * D; i += blockDim.x) {
    if (src.ak) {
      anchor[i / D * P + i % D] = src.ak[int64_t(s) * Hkv * D + i];
    } else if (src.stores) {
      anchor[i / D * P + i % D] = store ? store[src.layer * n + i] : 0.f;
      if (src.av) src.av[s * n + i] = store ? store[(int64_t(src.num_layers) + src.layer) * n + i] : 0.f;
    } else {
      const int64_t off = src.kv.offset(block, i / D, 0) + i % D;
      anchor[i / D * P + i % D] = load_kv_f32(src.kv, src.dt, false, i / D, off);
      if (src.av) src.av[int64_t(s) * Hkv * D + i] = load_kv_f32(src.kv, src.dt, true, i / D, off);
    }
  }
  if (on)
    for (int i = h; i < H * D; i += blockDim.x) qs[i / D * P + i % D] = to_f32(q[int64_t(s) * H * D + i]);
  __syncthreads();
  if (on && h < H) {
    const float* a = anchor + (h / G) * P;
    const float* qh = qs + h * P;
    float aa = 0.f, qa = 0.f, qq = 0.f;
    for (int d = 0; d < D; ++d) aa = __fadd_rn(aa, __fmul_rn(a[d], a[d]));
    for (int d = 0; d < D; ++d) {
      const float x = qh[d];
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

void launch_route(const void* q, DType act, int num_heads, const AnchorSource& src, int num_kv_heads, int head_dim,
                  const int32_t* context_lens, const uint8_t* routed, int num_seqs, const SinkRouterConfig& c,
                  float* scores, uint8_t* skip, int32_t* skip_count, cudaStream_t stream) {
  const size_t smem = (size_t(num_heads) + size_t(num_kv_heads + num_heads) * (head_dim + 1)) * sizeof(float);
  VLM_CHECK(num_kv_heads > 0 && num_heads % num_kv_heads == 0 && num_heads <= 1024 && smem <= 48 * 1024,
            "sink routing: H {} Hkv {} D {}", num_heads, num_kv_heads, head_dim);
  if (num_seqs == 0) return;
  const int agg = c.aggregation == SinkAggregation::Min ? 0 : c.aggregation == SinkAggregation::Mean ? 1 : 2;
  const RouteParams p{c.c0, c.c1, c.c2, c.c3, c.length_ref, c.tau_min, c.tau_max, agg};
  const int threads = std::min(1024, (std::max(num_heads, num_kv_heads * head_dim) + 31) / 32 * 32);
  dispatch_float(act, [&](auto t) {
    using TQ = decltype(t);
    route_kernel<TQ><<<num_seqs, threads, smem, stream>>>(static_cast<const TQ*>(q), num_heads, src, num_kv_heads,
                                                          head_dim, context_lens, routed, p, scores, skip, skip_count);
  });
  VLM_CUDA_CHECK_LAUNCH();
}

// grid (S, H), 128 threads: thread t takes keys t, t + 128, ... of the head's kv group with its own
// running max and sum of exp (f32 logits, as the CPU's first_token_attention_mass), then the block
// merges them; mass = exp(logit_0 - max) / sum.
constexpr int kMassThreads = 128;
template <class TQ>
__global__ void first_token_mass_kernel(const TQ* __restrict__ q, int H, KVView kv, DType dt,
                                        const int32_t* __restrict__ tables, int max_blocks,
                                        const int32_t* __restrict__ ctx, const uint8_t* __restrict__ routed,
                                        float scale, float* __restrict__ mass) {
  __shared__ float qs[1024], l0, wmax[kMassThreads / 32];
  const int s = blockIdx.x, h = blockIdx.y, D = kv.head_dim, g = h / (H / kv.num_kv_heads);
  const int n = ctx[s];
  if ((routed != nullptr && routed[s] == 0) || n < 1) {
    if (threadIdx.x == 0) mass[int64_t(s) * H + h] = 0.f;
    return;
  }
  for (int d = threadIdx.x; d < D; d += blockDim.x) qs[d] = to_f32(q[(int64_t(s) * H + h) * D + d]);
  __syncthreads();
  const int32_t* table = tables + int64_t(s) * max_blocks;
  float m = -INFINITY, sum = 0.f;
  for (int j = threadIdx.x; j < n; j += blockDim.x) {
    const int64_t off = kv.offset(table[j / kv.block_size], g, j % kv.block_size);
    float dot = 0.f;
    for (int d = 0; d < D; ++d) dot += qs[d] * load_kv_f32(kv, dt, false, g, off + d);
    const float x = dot * scale;
    if (j == 0) l0 = x;
    const float mn = fmaxf(m, x);
    sum = sum * __expf(m - mn) + __expf(x - mn);
    m = mn;
  }
  float mx = m;
  for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  if (threadIdx.x % 32 == 0) wmax[threadIdx.x / 32] = mx;
  __syncthreads();
  mx = wmax[0];
  for (int w = 1; w < kMassThreads / 32; ++w) mx = fmaxf(mx, wmax[w]);
  const float total = block_sum(m == -INFINITY ? 0.f : sum * __expf(m - mx));
  if (threadIdx.x == 0) mass[int64_t(s) * H + h] = __expf(l0 - mx) / total;
}

}  // namespace

void sink_first_token_mass(const void* q, DType act, int num_heads, const PagedKVLayer& kv,
                           const int32_t* block_tables, int max_blocks_per_seq, const int32_t* context_lens,
                           const uint8_t* routed, int num_seqs, float scale, float* mass, cudaStream_t stream) {
  VLM_CHECK(num_heads % kv.num_kv_heads == 0 && kv.head_dim <= 1024, "first-token mass: H {} Hkv {} D {}", num_heads,
            kv.num_kv_heads, kv.head_dim);
  if (num_seqs == 0) return;
  dispatch_float(act, [&](auto t) {
    using TQ = decltype(t);
    first_token_mass_kernel<TQ><<<dim3(num_seqs, num_heads), kMassThreads, 0, stream>>>(
        static_cast<const TQ*>(q), num_heads, kv_view(kv), kv.dtype, block_tables, max_blocks_per_seq, context_lens,
        routed, scale, mass);
  });
  VLM_CUDA_CHECK_LAUNCH();
}

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
  const AnchorSource src{anchor_k, KVView{}, DType::F32, nullptr, 0, nullptr};
  launch_route(q, act, num_heads, src, num_kv_heads, head_dim, context_lens, routed, num_seqs, c, scores, skip,
               skip_count, stream);
}

void sink_route_from_cache(const void* q, DType act, int num_heads, const PagedKVLayer& kv,
                           const int32_t* block_tables, int max_blocks_per_seq, const int32_t* context_lens,
                           const uint8_t* routed, int num_seqs, const SinkRouterConfig& c, float* scores,
                           uint8_t* skip, int32_t* skip_count, float* anchor_v, cudaStream_t stream) {
  const AnchorSource src{nullptr, kv_view(kv), kv.dtype, block_tables, max_blocks_per_seq, anchor_v};
  launch_route(q, act, num_heads, src, kv.num_kv_heads, kv.head_dim, context_lens, routed, num_seqs, c, scores, skip,
               skip_count, stream);
}

void sink_capture_anchors(const PagedKVLayer& kv, const int32_t* block_table, int layer, int num_layers,
                          float* store, cudaStream_t stream) {
  const int64_t n = int64_t(kv.num_kv_heads) * kv.head_dim;
  sink_gather_anchors(kv, block_table, 1, 1, store + layer * n, store + (int64_t(num_layers) + layer) * n, stream);
}

void sink_route_from_stores(const void* q, DType act, int num_heads, const float* const* stores, int layer,
                            int num_layers, int num_kv_heads, int head_dim, const int32_t* context_lens,
                            const uint8_t* routed, int num_seqs, const SinkRouterConfig& c, float* scores,
                            uint8_t* skip, int32_t* skip_count, float* anchor_v, cudaStream_t stream) {
  AnchorSource src{nullptr, KVView{}, DType::F32, nullptr, 0, anchor_v};
  src.stores = stores;
  src.layer = layer;
  src.num_layers = num_layers;
  launch_route(q, act, num_heads, src, num_kv_heads, head_dim, context_lens, routed, num_seqs, c, scores, skip,
               skip_count, stream);
}

}  // namespace vlm::cuda
