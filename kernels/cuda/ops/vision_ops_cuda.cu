#include "kernels/cuda/ops/vision_ops_cuda.h"

#include "kernels/cuda/core/block_reduce.cuh"
#include "kernels/cuda/core/element.cuh"

namespace vlm::cuda {

namespace {

// One block per row: mean, then the centred sum of squares. The row is read once into
// registers (up to kLnPer elements per thread, else re-read from memory); out may alias x: every
// thread writes only the elements it read.
constexpr int kLnPer = 8;
template <typename T>
__global__ void layer_norm_kernel(const float* x, const float* w, const float* b, float eps, int64_t C, T* out) {
  const int64_t r = blockIdx.x;
  const float* xr = x + r * C;
  const bool regs = C <= static_cast<int64_t>(kLnPer) * blockDim.x;
  float v[kLnPer];
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < kLnPer; ++i) {
    const int64_t c = threadIdx.x + static_cast<int64_t>(i) * blockDim.x;
    v[i] = regs && c < C ? xr[c] : 0.0f;
    sum += v[i];
  }
  if (!regs)
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) sum += xr[c];
  const float mean = block_sum(sum) / static_cast<float>(C);
  float ss = 0.0f;
  if (regs) {
#pragma unroll
    for (int i = 0; i < kLnPer; ++i)
      if (threadIdx.x + static_cast<int64_t>(i) * blockDim.x < C) ss = fmaf(v[i] - mean, v[i] - mean, ss);
  } else {
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) ss = fmaf(xr[c] - mean, xr[c] - mean, ss);
  }
  const float inv = rsqrtf(block_sum(ss) / static_cast<float>(C) + eps);
  if (regs) {
#pragma unroll
    for (int i = 0; i < kLnPer; ++i) {
      const int64_t c = threadIdx.x + static_cast<int64_t>(i) * blockDim.x;
      if (c < C) out[r * C + c] = from_f32<T>(fmaf((v[i] - mean) * inv, w[c], b[c]));
    }
  } else {
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
      out[r * C + c] = from_f32<T>(fmaf((xr[c] - mean) * inv, w[c], b[c]));
  }
}

__device__ __forceinline__ float activate(float v, Activation act) {
  if (act == Activation::QuickGelu) return v / (1.0f + expf(-1.702f * v));
  if (act == Activation::GeluErf) return v * 0.5f * (1.0f + erff(v * 0.70710678118654752440f));
  return 0.5f * v * (1.0f + tanhf(0.79788456080286535588f * (v + 0.044715f * v * v * v)));
}

// 16 bytes per thread (8 bf16/f16 or 4 f32 values) where n and the pointer allow, else one value.
template <typename T>
__global__ void activation_kernel(T* x, int64_t n, Activation act, bool vec) {
  constexpr int kV = 16 / sizeof(T);
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (vec) {
    if (i * kV >= n) return;
    uint4 raw = reinterpret_cast<const uint4*>(x)[i];
    T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
    for (int j = 0; j < kV; ++j) e[j] = from_f32<T>(activate(to_f32(e[j]), act));
    reinterpret_cast<uint4*>(x)[i] = raw;
    return;
  }
  if (i < n) x[i] = from_f32<T>(activate(to_f32(x[i]), act));
}

template <typename S, typename D>
__global__ void gather_rows_kernel(const S* src, const int32_t* idx, int64_t C, D* dst, int64_t dst_stride,
                                   int64_t dst_col) {
  const int64_t r = blockIdx.x;
  const S* row = src + (idx ? static_cast<int64_t>(idx[r]) : r) * C;
  D* out = dst + r * dst_stride + dst_col;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) out[c] = from_f32<D>(to_f32(row[c]));
}

// One block per patch row.
template <typename T>
__global__ void unfold_kernel(const float* pixels, int64_t S, int64_t p, T* patches) {
  const int64_t G = S / p, row = blockIdx.x;
  const int64_t n = row / (G * G), gy = (row / G) % G, gx = row % G;
  const int64_t K = 3 * p * p;
  for (int64_t i = threadIdx.x; i < K; i += blockDim.x) {
    const int64_t ch = i / (p * p), ky = (i / p) % p, kx = i % p;
    patches[row * K + i] = from_f32<T>(pixels[((n * 3 + ch) * S + gy * p + ky) * S + gx * p + kx]);
  }
}

__global__ void clip_embed_kernel(const float* pe, const float* cls_emb, const float* bias, const float* pos,
                                  int64_t P, int64_t L, int64_t C, float* x) {
  const int64_t row = blockIdx.x, n = row / L, t = row % L, cls = L - P;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    const float e = t < cls ? cls_emb[c] : pe[(n * P + t - cls) * C + c] + (bias ? bias[c] : 0.0f);
    x[row * C + c] = e + pos[t * C + c];
  }
}

__global__ void vision_rope_table_kernel(const int32_t* pos_hw, const float* inv_freq, int64_t D, float* table) {
  const int64_t t = blockIdx.x, q4 = D / 4, half = D / 2;
  for (int64_t i = threadIdx.x; i < half; i += blockDim.x) {
    const float p = static_cast<float>(pos_hw[t * 2 + (i < q4 ? 0 : 1)]);
    const double angle = __fmul_rn(p, inv_freq[i % q4]);
    table[t * D + i] = static_cast<float>(cos(angle));
    table[t * D + half + i] = static_cast<float>(sin(angle));
  }
}

// One thread per rotated pair (t, j, i): head j < H of q or j - H of k (adjacent in [3, H, D]),
// dims i and D/2 + i.
template <typename T>
__global__ void vision_rope_qk_kernel(T* qkv, int64_t T_, int64_t H, int64_t D, const float* table) {
  const int64_t half = D / 2;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (n >= T_ * 2 * H * half) return;
  const int64_t i = n % half, j = (n / half) % (2 * H), t = n / (half * 2 * H);
  T* x = qkv + (t * 3 * H + j) * D;
  const float c = table[t * D + i], s = table[t * D + half + i];
  const float x1 = to_f32(x[i]), x2 = to_f32(x[half + i]);
  const float a1 = __fmul_rn(x1, c), b1 = __fmul_rn(x2, s);
  const float a2 = __fmul_rn(x2, c), b2 = __fmul_rn(x1, s);
  x[i] = from_f32<T>(__fsub_rn(a1, b1));
  x[half + i] = from_f32<T>(__fadd_rn(a2, b2));
}

}  // namespace

void layer_norm(const float* x, const float* w, const float* b, float eps, int64_t T, int64_t C, void* out, DType dt,
                cudaStream_t s) {
  if (T == 0) return;
  dispatch_float(dt, [&](auto tag) {
    using E = decltype(tag);
    layer_norm_kernel<E><<<T, row_threads(C / 4), 0, s>>>(x, w, b, eps, C, static_cast<E*>(out));
  });
  VLM_CUDA_CHECK_LAUNCH();
}

void activation(void* x, DType dt, int64_t n, Activation act, cudaStream_t s) {
  if (n == 0) return;
  dispatch_float(dt, [&](auto tag) {
    using E = decltype(tag);
    constexpr int64_t kV = 16 / sizeof(E);
    const bool vec = n % kV == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0;
    const int64_t threads = vec ? n / kV : n;
    activation_kernel<E><<<static_cast<unsigned>((threads + 255) / 256), 256, 0, s>>>(static_cast<E*>(x), n, act, vec);
  });
  VLM_CUDA_CHECK_LAUNCH();
}

void gather_rows(const void* src, DType src_dt, const int32_t* idx, int64_t R, int64_t C, void* dst, DType dst_dt,
                 int64_t dst_stride, int64_t dst_col, cudaStream_t s) {
  if (R == 0) return;
  dispatch_float(src_dt, [&](auto st) {
    dispatch_float(dst_dt, [&](auto dt) {
      using S = decltype(st);
      using D = decltype(dt);
      gather_rows_kernel<S, D><<<R, row_threads(C / 2), 0, s>>>(static_cast<const S*>(src), idx, C,
                                                                static_cast<D*>(dst), dst_stride, dst_col);
    });
  });
  VLM_CUDA_CHECK_LAUNCH();
}

void unfold_patches(const float* pixels, int64_t N, int64_t S, int64_t p, void* patches, DType dt, cudaStream_t s) {
  const int64_t G = S / p;
  if (N * G * G == 0) return;
  dispatch_float(dt, [&](auto tag) {
    using E = decltype(tag);
    unfold_kernel<E><<<N * G * G, 256, 0, s>>>(pixels, S, p, static_cast<E*>(patches));
  });
  VLM_CUDA_CHECK_LAUNCH();
}

void clip_embed(const float* pe, const float* class_emb, const float* patch_bias, const float* pos, int64_t N,
                int64_t P, int64_t L, int64_t C, float* x, cudaStream_t s) {
  if (N == 0) return;
  clip_embed_kernel<<<N * L, row_threads(C / 2), 0, s>>>(pe, class_emb, patch_bias, pos, P, L, C, x);
  VLM_CUDA_CHECK_LAUNCH();
}

void vision_rope_table(const int32_t* pos_hw, const float* inv_freq, int64_t T, int64_t D, float* table,
                       cudaStream_t s) {
  if (T == 0) return;
  vision_rope_table_kernel<<<T, 64, 0, s>>>(pos_hw, inv_freq, D, table);
  VLM_CUDA_CHECK_LAUNCH();
}

void vision_rope_qk(void* qkv, DType dt, int64_t T, int64_t H, int64_t D, const float* table, cudaStream_t s) {
  if (T == 0) return;
  dispatch_float(dt, [&](auto tag) {
    using E = decltype(tag);
    const int64_t n = T * 2 * H * (D / 2);
    vision_rope_qk_kernel<E><<<static_cast<unsigned>((n + 255) / 256), 256, 0, s>>>(static_cast<E*>(qkv), T, H, D,
                                                                                  table);
  });
  VLM_CUDA_CHECK_LAUNCH();
}

}  // namespace vlm::cuda
