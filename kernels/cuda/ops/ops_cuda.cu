#include "kernels/cuda/ops/ops_cuda.h"

#include <algorithm>

#include "kernels/cuda/core/block_reduce.cuh"
#include "kernels/cuda/core/element.cuh"
#include "kernels/cuda/core/pdl.cuh"
#include "kernels/cuda/ops/rope_rows.cuh"

namespace vlm::cuda {

namespace {

constexpr int64_t kMaxGridY = 65535;  // CUDA's limit on gridDim.y

// PDL (pdl.cuh): waits first (x may still be read by the previous step's kernels), triggers at once.
template <typename T>
__global__ void embedding_kernel(const T* table, const int32_t* ids, int64_t C, float* x) {
  pdl_wait();
  pdl_trigger();
  const int64_t t = blockIdx.x;
  const T* row = table + static_cast<int64_t>(ids[t]) * C;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) x[t * C + c] = to_f32(row[c]);
}

template <typename T>
__global__ void rms_norm_kernel(float* x, const T* residual, const float* w, float eps, const int32_t* rows, int64_t C,
                                T* out) {
  const int64_t r = blockIdx.x;
  float* xr = x + (rows ? rows[r] : r) * C;
  float ss = 0.0f;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    float v = xr[c];
    if (residual) {
      v = __fadd_rn(v, to_f32(residual[r * C + c]));
      xr[c] = v;
    }
    ss = fmaf(v, v, ss);
  }
  ss = block_sum(ss);
  const float inv = rsqrtf(ss / static_cast<float>(C) + eps);
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
    out[r * C + c] = from_f32<T>(__fmul_rn(w[c], __fmul_rn(xr[c], inv)));
}

// Four consecutive elements of T, one vector load/store.
template <typename T>
struct alignas(4 * sizeof(T)) Vec4 {
  T e[4];
};

// rms_norm_kernel for C % 4 == 0 and C <= 512 V: 128 threads, each holding its (up to) V groups
// of 4 consecutive x values in registers (16-byte loads issued together), so x is read once from
// memory instead of twice; the same arithmetic per element (only the order of the sum of squares
// differs).
template <typename T, int V>
__global__ void __launch_bounds__(128) rms_norm_x4_kernel(float* x, const T* residual, const float* w, float eps,
                                                          const int32_t* rows, int64_t C, T* out) {
  const int64_t r = blockIdx.x;
  float4* xr = reinterpret_cast<float4*>(x + (rows ? rows[r] : r) * C);
  const int C4 = static_cast<int>(C / 4);
  float4 v[V];
#pragma unroll
  for (int j = 0; j < V; ++j) {
    const int c4 = threadIdx.x + 128 * j;
    if (c4 < C4) v[j] = xr[c4];
  }
  float ss = 0.0f;
#pragma unroll
  for (int j = 0; j < V; ++j) {
    const int c4 = threadIdx.x + 128 * j;
    if (c4 >= C4) continue;
    if (residual) {
      const Vec4<T> a = reinterpret_cast<const Vec4<T>*>(residual + r * C)[c4];
      v[j] = make_float4(__fadd_rn(v[j].x, to_f32(a.e[0])), __fadd_rn(v[j].y, to_f32(a.e[1])),
                         __fadd_rn(v[j].z, to_f32(a.e[2])), __fadd_rn(v[j].w, to_f32(a.e[3])));
      xr[c4] = v[j];
    }
    ss = fmaf(v[j].x, v[j].x, ss);
    ss = fmaf(v[j].y, v[j].y, ss);
    ss = fmaf(v[j].z, v[j].z, ss);
    ss = fmaf(v[j].w, v[j].w, ss);
  }
  ss = block_sum(ss);
  const float inv = rsqrtf(ss / static_cast<float>(C) + eps);
#pragma unroll
  for (int j = 0; j < V; ++j) {
    const int c4 = threadIdx.x + 128 * j;
    if (c4 >= C4) continue;
    const float4 g = reinterpret_cast<const float4*>(w)[c4];
    Vec4<T> y;
    y.e[0] = from_f32<T>(__fmul_rn(g.x, __fmul_rn(v[j].x, inv)));
    y.e[1] = from_f32<T>(__fmul_rn(g.y, __fmul_rn(v[j].y, inv)));
    y.e[2] = from_f32<T>(__fmul_rn(g.z, __fmul_rn(v[j].z, inv)));
    y.e[3] = from_f32<T>(__fmul_rn(g.w, __fmul_rn(v[j].w, inv)));
    reinterpret_cast<Vec4<T>*>(out + r * C)[c4] = y;
  }
}

// Rows t = blockIdx.y + k * gridDim.y (grid.y is capped at 65,535: long chunks loop).
template <typename T>
__global__ void silu_mul_kernel(const T* gu, int64_t T_rows, int64_t I, T* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= I) return;
  for (int64_t t = blockIdx.y; t < T_rows; t += gridDim.y) {
    const float g = to_f32(gu[t * 2 * I + i]), u = to_f32(gu[t * 2 * I + I + i]);
    out[t * I + i] = from_f32<T>(g / (1.0f + expf(-g)) * u);
  }
}

// The same for 16-bit T and I % 8 == 0: 8 elements per thread, 16-byte loads and stores.
template <typename T>
__global__ void silu_mul_x8_kernel(const T* gu, int64_t T_rows, int64_t I, T* out) {
  const int64_t i = 8 * (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x);
  if (i >= I) return;
  for (int64_t t = blockIdx.y; t < T_rows; t += gridDim.y) {
    const uint4 g8 = *reinterpret_cast<const uint4*>(gu + t * 2 * I + i);
    const uint4 u8 = *reinterpret_cast<const uint4*>(gu + t * 2 * I + I + i);
    const T* g = reinterpret_cast<const T*>(&g8);
    const T* u = reinterpret_cast<const T*>(&u8);
    uint4 r8;
    T* r = reinterpret_cast<T*>(&r8);
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const float gf = to_f32(g[e]);
      r[e] = from_f32<T>(gf / (1.0f + expf(-gf)) * to_f32(u[e]));
    }
    *reinterpret_cast<uint4*>(out + t * I + i) = r8;
  }
}

__device__ __forceinline__ int mrope_axis(const MropeAxes& a, int i) {
  if (a.interleaved) return (i % 3 == 1 && i < 3 * a.s1) ? 1 : ((i % 3 == 2 && i < 3 * a.s2) ? 2 : 0);
  return i < a.s0 ? 0 : (i < a.s0 + a.s1 ? 1 : 2);
}

__global__ void rope_table_kernel(const int32_t* positions, const int32_t* mrope, MropeAxes axes,
                                  const float* inv_freq, int half, float scaling, float* table) {
  const int64_t t = blockIdx.x;
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    int32_t p;
    if (mrope) {
      p = mrope[t * 3 + mrope_axis(axes, i)];
    } else {
      p = positions[t];
    }
    const double angle = __fmul_rn(static_cast<float>(p), inv_freq[i]);
    table[t * 2 * half + i] = __fmul_rn(static_cast<float>(cos(angle)), scaling);
    table[t * 2 * half + half + i] = __fmul_rn(static_cast<float>(sin(angle)), scaling);
  }
}

// grid (T, H + Hkv): one block per (token, q or k head) of the fused rows; each thread normalizes
// the elements it read (no element crosses threads between the two passes).
template <typename T>
__global__ void head_rms_norm_kernel(T* qkv, int64_t H, int64_t Hkv, int64_t D, const float* q_w, const float* k_w,
                                     float eps) {
  const int64_t t = blockIdx.x, h = blockIdx.y;
  T* x = qkv + (t * (H + 2 * Hkv) + h) * D;
  const float* w = h < H ? q_w : k_w;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {
    const float v = to_f32(x[i]);
    ss = fmaf(v, v, ss);
  }
  ss = block_sum(ss);
  const float inv = rsqrtf(ss / static_cast<float>(D) + eps);
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) x[i] = from_f32<T>(__fmul_rn(w[i], __fmul_rn(to_f32(x[i]), inv)));
}

// head_rms_norm_kernel for head_norm_x8_supported(D): one thread per 8 elements of the q and k
// heads (lanes of a head consecutive), the sum by rope_rows.cuh's helpers, which
// rope_split_q_kv_write's fused norm shares: the two give the same bits.
template <typename T>
__global__ void head_rms_norm_x8_kernel(T* qkv, int64_t T_, int H, int Hkv, int D, const float* q_w, const float* k_w,
                                        float eps) {
  const int lanes = D / 8, per_token = (H + Hkv) * lanes;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const bool valid = idx < T_ * per_token;
  const int64_t t = valid ? idx / per_token : 0;
  const int c = static_cast<int>(idx % per_token), h = c / lanes, i = (c % lanes) * 8;
  T* x = qkv + (t * (H + 2 * Hkv) + h) * D + i;
  const float inv = head_inv_rms(head_sum(valid ? sum_sq8(x) : 0.0f, lanes), D, eps);
  if (!valid) return;
  const float* w = (h < H ? q_w : k_w) + i;
#pragma unroll
  for (int e = 0; e < 8; ++e) x[e] = head_norm1(x[e], w[e], inv);
}

// grid (T, H + 2 Hkv): one block per (token, head); heads [0, H) are q, then k, then v.
template <typename T>
__global__ void rope_split_kernel(const T* qkv, int64_t H, int64_t Hkv, int64_t D, const float* table, int64_t R,
                                  T* q, T* k, T* v) {
  const int64_t t = blockIdx.x, h = blockIdx.y;
  const T* x = qkv + (t * (H + 2 * Hkv) + h) * D;
  T* y = h < H ? q + (t * H + h) * D : (h < H + Hkv ? k + (t * Hkv + h - H) * D : v + (t * Hkv + h - H - Hkv) * D);
  const int64_t half = h < H + Hkv ? R / 2 : 0;  // v: no rotation
  const float* cs = table + t * R;
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {
    if (i < half) {
      const float c = cs[i], s = cs[half + i];
      y[i] = from_f32<T>(__fsub_rn(__fmul_rn(to_f32(x[i]), c), __fmul_rn(to_f32(x[half + i]), s)));
    } else if (i < 2 * half) {
      const float c = cs[i - half], s = cs[i];
      y[i] = from_f32<T>(__fadd_rn(__fmul_rn(to_f32(x[i]), c), __fmul_rn(to_f32(x[i - half]), s)));
    } else {
      y[i] = x[i];
    }
  }
}

// The same for 16-bit T with D % 8 == 0 and (R / 2) % 8 == 0: one thread per 8 consecutive
// elements of a head (16-byte loads of the chunk, of its rotation partner and of the table), a
// block per group of tokens; the same arithmetic per element as rope_split_kernel.
template <typename T>
__global__ void rope_split_x8_kernel(const T* qkv, int64_t T_, int H, int Hkv, int D, const float* table, int R,
                                     T* q, T* k, T* v) {
  const RopeChunk ch = rope_chunk(static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x, T_, H, Hkv, D);
  if (!ch.valid) return;
  const int64_t t = ch.t;
  const int h = ch.h, i = ch.i;
  const T* x = qkv + (t * (H + 2 * Hkv) + h) * D;
  T* y = h < H ? q + (t * H + h) * D : (h < H + Hkv ? k + (t * Hkv + h - H) * D : v + (t * Hkv + h - H - Hkv) * D);
  const int half = h < H + Hkv ? R / 2 : 0;  // v: no rotation
  *reinterpret_cast<uint4*>(y + i) = rope8(x, i, half, table + t * R);
}

int threads_for(int64_t n) { return n >= 1024 ? 1024 : (n >= 256 ? 256 : 128); }

}  // namespace

void embedding(const void* table, DType dt, const int32_t* ids, int64_t T, int64_t C, float* x, cudaStream_t s) {
  if (T == 0) return;
  dispatch_float(dt, [&](auto tag) {
    using E = decltype(tag);
    launch_pdl(embedding_kernel<E>, static_cast<unsigned>(T), threads_for(C / 4), 0, s, static_cast<const E*>(table),
               ids, C, x);
  });
}

void rms_norm(float* x, const void* residual, const float* w, float eps, const int32_t* rows, int64_t R, int64_t C,
              void* out, DType dt, cudaStream_t s) {
  if (R == 0) return;
  dispatch_float(dt, [&](auto tag) {
    using E = decltype(tag);
    const auto* res = static_cast<const E*>(residual);
    E* y = static_cast<E*>(out);
    const int64_t c4 = C / 4;
    if (C % 4 == 0 && c4 <= 1024) {  // 16-byte vectors, x in registers (128 threads, V groups each)
      const unsigned grid = static_cast<unsigned>(R);
      if (c4 <= 128) rms_norm_x4_kernel<E, 1><<<grid, 128, 0, s>>>(x, res, w, eps, rows, C, y);
      else if (c4 <= 256) rms_norm_x4_kernel<E, 2><<<grid, 128, 0, s>>>(x, res, w, eps, rows, C, y);
      else if (c4 <= 512) rms_norm_x4_kernel<E, 4><<<grid, 128, 0, s>>>(x, res, w, eps, rows, C, y);
      else rms_norm_x4_kernel<E, 8><<<grid, 128, 0, s>>>(x, res, w, eps, rows, C, y);
    } else {
      rms_norm_kernel<E><<<R, threads_for(C / 4), 0, s>>>(x, res, w, eps, rows, C, y);
    }
  });
  VLM_CUDA_CHECK_LAUNCH();
}

void silu_mul(const void* gu, int64_t T, int64_t I, void* out, DType dt, cudaStream_t s) {
  if (T == 0) return;
  const auto rows = static_cast<unsigned>(std::min<int64_t>(T, kMaxGridY));
  dispatch_float(dt, [&](auto tag) {
    using E = decltype(tag);
    if constexpr (sizeof(E) == 2) {
      if (I % 8 == 0) {
        const dim3 grid(static_cast<unsigned>((I / 8 + 255) / 256), rows);
        silu_mul_x8_kernel<E><<<grid, 256, 0, s>>>(static_cast<const E*>(gu), T, I, static_cast<E*>(out));
        return;
      }
    }
    const dim3 grid(static_cast<unsigned>((I + 255) / 256), rows);
    silu_mul_kernel<E><<<grid, 256, 0, s>>>(static_cast<const E*>(gu), T, I, static_cast<E*>(out));
  });
  VLM_CUDA_CHECK_LAUNCH();
}

void rope_table(const int32_t* positions, const int32_t* mrope_positions, const MropeAxes& axes, const float* inv_freq,
                int half, float scaling, int64_t T, float* table, cudaStream_t s) {
  if (T == 0) return;
  rope_table_kernel<<<T, 64, 0, s>>>(positions, mrope_positions, axes, inv_freq, half, scaling, table);
  VLM_CUDA_CHECK_LAUNCH();
}

void head_rms_norm(void* qkv, int64_t T, int64_t H, int64_t Hkv, int64_t D, const float* q_w, const float* k_w,
                   float eps, DType dt, cudaStream_t s) {
  if (T == 0) return;
  dispatch_float(dt, [&](auto tag) {
    using E = decltype(tag);
    if (head_norm_x8_supported(D)) {
      const int64_t n = T * (H + Hkv) * (D / 8);
      head_rms_norm_x8_kernel<E><<<static_cast<unsigned>((n + 255) / 256), 256, 0, s>>>(
          static_cast<E*>(qkv), T, static_cast<int>(H), static_cast<int>(Hkv), static_cast<int>(D), q_w, k_w, eps);
      return;
    }
    head_rms_norm_kernel<E><<<dim3(static_cast<unsigned>(T), static_cast<unsigned>(H + Hkv)), D >= 128 ? 128 : 64, 0,
                              s>>>(static_cast<E*>(qkv), H, Hkv, D, q_w, k_w, eps);
  });
  VLM_CUDA_CHECK_LAUNCH();
}

void rope_split_qkv(const void* qkv, int64_t T, int64_t H, int64_t Hkv, int64_t D, const float* table, int64_t R,
                    void* q, void* k, void* v, DType dt, cudaStream_t s) {
  if (T == 0) return;
  dispatch_float(dt, [&](auto tag) {
    using E = decltype(tag);
    if constexpr (sizeof(E) == 2) {
      if (D % 8 == 0 && (R / 2) % 8 == 0) {
        const int64_t n = T * (H + 2 * Hkv) * D / 8;
        rope_split_x8_kernel<E><<<static_cast<unsigned>((n + 255) / 256), 256, 0, s>>>(
            static_cast<const E*>(qkv), T, static_cast<int>(H), static_cast<int>(Hkv), static_cast<int>(D), table,
            static_cast<int>(R), static_cast<E*>(q), static_cast<E*>(k), static_cast<E*>(v));
        return;
      }
    }
    const dim3 grid(static_cast<unsigned>(T), static_cast<unsigned>(H + 2 * Hkv));
    rope_split_kernel<E><<<grid, 64, 0, s>>>(static_cast<const E*>(qkv), H, Hkv, D, table, R, static_cast<E*>(q),
                                             static_cast<E*>(k), static_cast<E*>(v));
  });
  VLM_CUDA_CHECK_LAUNCH();
}

}  // namespace vlm::cuda
