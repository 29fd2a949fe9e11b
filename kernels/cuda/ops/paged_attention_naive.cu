#include "kernels/cuda/ops/paged_attention_naive.h"

#include <cfloat>

#include "kernels/cuda/core/element.cuh"

namespace vlm::cuda {

namespace {

constexpr int kWarps = 4;
constexpr int kMaxPerLane = 8;  // D <= 256

template <typename T>
__global__ void kv_write_kernel(const T* k, const T* v, int64_t stride, const int32_t* slots, int Hkv, int D, int B,
                                T* kc, T* vc) {
  const int64_t t = blockIdx.x;
  const int32_t slot = slots[t];
  if (slot < 0) return;
  const int64_t block = slot / B, off = slot % B;
  for (int i = threadIdx.x; i < Hkv * D; i += blockDim.x) {
    const int h = i / D, d = i % D;
    const int64_t dst = ((block * Hkv + h) * B + off) * D + d;
    kc[dst] = k[t * stride + i];
    vc[dst] = v[t * stride + i];
  }
}

// grid (T, H), kWarps warps: warp w takes keys w, w + kWarps, ...; lane l holds dims l + 32j.
template <typename T>
__global__ void attention_kernel(const T* q, int64_t q_stride, int H, const T* kc, const T* vc, int Hkv, int D, int B,
                                 AttentionMeta meta, float scale, T* out) {
  const int64_t t = blockIdx.x;
  const int h = blockIdx.y, kvh = h / (H / Hkv);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  int s = 0;  // the token's sequence: cu[s] <= t < cu[s + 1]
  int lo = 0, hi = meta.num_seqs - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (meta.cu_seqlens_q[mid] <= t) lo = mid; else hi = mid - 1;
  }
  s = lo;
  const int n = meta.cu_seqlens_q[s + 1] - meta.cu_seqlens_q[s];
  const int pos = meta.context_lens[s] - n + static_cast<int>(t - meta.cu_seqlens_q[s]);
  const int32_t* table = meta.block_tables + static_cast<int64_t>(s) * meta.max_blocks_per_seq;
  const int per_lane = (D + 31) / 32;

  float qv[kMaxPerLane], acc[kMaxPerLane];
#pragma unroll
  for (int j = 0; j < kMaxPerLane; ++j) {
    const int d = lane + 32 * j;
    qv[j] = (j < per_lane && d < D) ? to_f32(q[t * q_stride + static_cast<int64_t>(h) * D + d]) : 0.0f;
    acc[j] = 0.0f;
  }
  float m = -FLT_MAX, l = 0.0f;
  for (int p = warp; p <= pos; p += kWarps) {
    const int64_t base = ((static_cast<int64_t>(table[p / B]) * Hkv + kvh) * B + p % B) * D;
    float dot = 0.0f;
#pragma unroll
    for (int j = 0; j < kMaxPerLane; ++j) {
      const int d = lane + 32 * j;
      if (j < per_lane && d < D) dot = fmaf(qv[j], to_f32(kc[base + d]), dot);
    }
    for (int o = 16; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
    const float sc = dot * scale;
    const float m_new = fmaxf(m, sc);
    const float corr = expf(m - m_new), w = expf(sc - m_new);
    l = l * corr + w;
#pragma unroll
    for (int j = 0; j < kMaxPerLane; ++j) {
      const int d = lane + 32 * j;
      const float vv = (j < per_lane && d < D) ? to_f32(vc[base + d]) : 0.0f;
      acc[j] = acc[j] * corr + w * vv;
    }
    m = m_new;
  }
  // Merge the warps' partial results.
  __shared__ float sm[kWarps], sl[kWarps];
  __shared__ float sacc[kWarps][kMaxPerLane * 32];
  if (lane == 0) {
    sm[warp] = m;
    sl[warp] = l;
  }
#pragma unroll
  for (int j = 0; j < kMaxPerLane; ++j) sacc[warp][lane + 32 * j] = acc[j];
  __syncthreads();
  float gm = -FLT_MAX;
  for (int w = 0; w < kWarps; ++w) gm = fmaxf(gm, sm[w]);
  float gl = 0.0f;
  for (int w = 0; w < kWarps; ++w) gl += sl[w] * expf(sm[w] - gm);
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float o = 0.0f;
    for (int w = 0; w < kWarps; ++w) o += sacc[w][d] * expf(sm[w] - gm);
    out[t * static_cast<int64_t>(H) * D + static_cast<int64_t>(h) * D + d] = from_f32<T>(o / gl);
  }
}

}  // namespace

void paged_kv_write(const void* k, const void* v, int64_t stride, const int32_t* slot_mapping, int64_t T,
                    const PagedKVView& kv, cudaStream_t s) {
  if (T == 0) return;
  dispatch_float(kv.dtype, [&](auto tag) {
    using E = decltype(tag);
    kv_write_kernel<E><<<T, 256, 0, s>>>(static_cast<const E*>(k), static_cast<const E*>(v), stride, slot_mapping,
                                         kv.num_kv_heads, kv.head_dim, kv.block_size, static_cast<E*>(kv.k),
                                         static_cast<E*>(kv.v));
  });
  VLM_CUDA_CHECK_LAUNCH();
}

void paged_attention_naive(const void* q, int64_t q_stride, int64_t H, const PagedKVView& kv,
                           const AttentionMeta& meta, float scale, void* out, cudaStream_t s) {
  if (meta.num_tokens == 0) return;
  if (kv.head_dim > 32 * kMaxPerLane || H % kv.num_kv_heads != 0)
    precondition_failed("paged_attention_naive: head_dim <= 256 and H a multiple of Hkv");
  dispatch_float(kv.dtype, [&](auto tag) {
    using E = decltype(tag);
    const dim3 grid(static_cast<unsigned>(meta.num_tokens), static_cast<unsigned>(H));
    attention_kernel<E><<<grid, 32 * kWarps, 0, s>>>(static_cast<const E*>(q), q_stride, static_cast<int>(H),
                                                     static_cast<const E*>(kv.k), static_cast<const E*>(kv.v),
                                                     kv.num_kv_heads, kv.head_dim, kv.block_size, meta, scale,
                                                     static_cast<E*>(out));
  });
  VLM_CUDA_CHECK_LAUNCH();
}

}  // namespace vlm::cuda
