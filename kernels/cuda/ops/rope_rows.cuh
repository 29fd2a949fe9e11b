// The RoPE rotation of 8 consecutive elements of one head and the x8 kernels' thread indexing,
// shared by the x8 RoPE kernels (rope_split_qkv in ops_cuda.cu; rope_split_q_kv_write in
// kernels/cuda/attention).
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/core/element.cuh"

namespace vlm::cuda {

// Qwen3's per-head q/k RMSNorm inside the x8 kernels (head_rms_norm's x8 kernel in ops_cuda.cu
// and rope_split_q_kv_write share it, so both give the same bits): each of a head's D / 8 lanes
// squares and sums its 8 elements in order (fmaf), an xor tree adds the D / 8 partials, and each
// element becomes w * (x * rsqrt(sum / D + eps)) rounded to T. Needs head_norm_x8_supported(D):
// a head's lanes then form an aligned group of consecutive threads within one warp.
__host__ __device__ inline bool head_norm_x8_supported(int64_t D) {
  const int64_t lanes = D / 8;
  return D % 8 == 0 && lanes >= 1 && lanes <= 32 && (lanes & (lanes - 1)) == 0;
}
template <typename T>
__device__ __forceinline__ float sum_sq8(const T* x) {
  float s = 0.0f;
#pragma unroll
  for (int e = 0; e < 8; ++e) s = fmaf(to_f32(x[e]), to_f32(x[e]), s);
  return s;
}
// The head's sum from its lanes' partials. Every lane of the warp must call it (no lane may have
// returned): past-the-end lanes pass 0 and sit in groups of their own.
__device__ __forceinline__ float head_sum(float partial, int lanes) {
  for (int o = lanes / 2; o > 0; o >>= 1) partial += __shfl_xor_sync(0xffffffffu, partial, o);
  return partial;
}
__device__ __forceinline__ float head_inv_rms(float sum_sq, int D, float eps) {
  return rsqrtf(sum_sq / static_cast<float>(D) + eps);
}
template <typename T>
__device__ __forceinline__ T head_norm1(T x, float w, float inv) {
  return from_f32<T>(__fmul_rn(w, __fmul_rn(to_f32(x), inv)));
}

// Elements [i, i + 8) of the rotated head x [D] (16-bit T; i % 8 == 0) as one 16-byte vector:
// for i < 2 half, RotaryEmbedding::apply_cached's (x1 c - x2 s | x2 c + x1 s) with the products
// rounded before the sum (no FMA), c/s from the token's table row cs [2 half] (cos | sin); from
// 2 half on (and for half = 0: v heads) x as is. Needs half % 8 == 0. With `w` (a q/k norm's
// weights [D]) every element read is first normalized by head_norm1(x, w, inv), as if the head
// had been normalized in place before.
template <typename T>
__device__ __forceinline__ uint4 rope8(const T* x, int i, int half, const float* cs, const float* w = nullptr,
                                       float inv = 0.0f) {
  uint4 a8 = *reinterpret_cast<const uint4*>(x + i);
  if (w) {
    T* a = reinterpret_cast<T*>(&a8);
#pragma unroll
    for (int e = 0; e < 8; ++e) a[e] = head_norm1(a[e], w[i + e], inv);
  }
  if (i >= 2 * half) return a8;
  const bool first = i < half;
  const int j = first ? i + half : i - half;  // the rotation partner
  uint4 b8 = *reinterpret_cast<const uint4*>(x + j);
  if (w) {
    T* b = reinterpret_cast<T*>(&b8);
#pragma unroll
    for (int e = 0; e < 8; ++e) b[e] = head_norm1(b[e], w[j + e], inv);
  }
  const int ci = first ? i : i - half;  // cos index; sin at half + ci
  const T* a = reinterpret_cast<const T*>(&a8);
  const T* b = reinterpret_cast<const T*>(&b8);
  uint4 r8;
  T* r = reinterpret_cast<T*>(&r8);
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    const float c_ = cs[ci + e], s_ = cs[half + ci + e];
    const float xa = to_f32(a[e]), xb = to_f32(b[e]);
    r[e] = first ? from_f32<T>(__fsub_rn(__fmul_rn(xa, c_), __fmul_rn(xb, s_)))
                 : from_f32<T>(__fadd_rn(__fmul_rn(xa, c_), __fmul_rn(xb, s_)));
  }
  return r8;
}

// Which 8 elements thread `idx` of an x8 RoPE kernel over qkv [T, H + 2 Hkv, D] handles: token
// t, head h (q heads [0, H), then Hkv k heads and Hkv v heads), first element i. valid = false
// past the last token's chunks.
struct RopeChunk {
  int64_t t;
  int h, i;
  bool valid;
};
__device__ __forceinline__ RopeChunk rope_chunk(int64_t idx, int64_t T_, int H, int Hkv, int D) {
  const int chunks = (H + 2 * Hkv) * D / 8;  // per token
  if (idx >= T_ * chunks) return {0, 0, 0, false};
  const int c = static_cast<int>(idx % chunks);
  return {idx / chunks, c / (D / 8), (c % (D / 8)) * 8, true};
}

}  // namespace vlm::cuda
