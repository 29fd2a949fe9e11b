#include "kernels/cuda/ops/vision_ops_cuda.h"

#include <type_traits>

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

// One warp per row for rows of C = 4 n (n <= 32 kLnWarpVecs, 16-byte aligned): each lane holds its
// float4s in registers, warp-shuffle sums, 4 stores per lane per vector. The same two-pass math
// (mean, then the centred sum of squares) as layer_norm_kernel; the block form above serves the rest.
constexpr int kLnWarpVecs = 12;  // C <= 1536 (ViT widths: CLIP 1024, SigLIP 1152, Qwen2-VL 1280)
constexpr int kLnWarpRows = 4;   // rows (warps) per block

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

template <typename T>
__device__ __forceinline__ void store4(T* p, float a, float b, float c, float d) {
  if constexpr (sizeof(T) == 4) {
    *reinterpret_cast<float4*>(p) = make_float4(a, b, c, d);
  } else {
    T e[4] = {from_f32<T>(a), from_f32<T>(b), from_f32<T>(c), from_f32<T>(d)};
    *reinterpret_cast<uint2*>(p) = *reinterpret_cast<const uint2*>(e);
  }
}

template <typename T>
__global__ void __launch_bounds__(32 * kLnWarpRows) layer_norm_warp_kernel(const float* x, const float* w,
                                                                          const float* b, float eps, int64_t T_,
                                                                          int64_t C, T* out) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kLnWarpRows + threadIdx.x / 32;
  if (r >= T_) return;
  const int lane = threadIdx.x % 32, n4 = static_cast<int>(C / 4);
  const float4* xr = reinterpret_cast<const float4*>(x + r * C);
  float4 v[kLnWarpVecs];
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < kLnWarpVecs; ++i) {
    const int c4 = lane + 32 * i;
    v[i] = c4 < n4 ? xr[c4] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    sum += (v[i].x + v[i].y) + (v[i].z + v[i].w);
  }
  const float mean = warp_sum(sum) / static_cast<float>(C);
  float ss = 0.0f;
#pragma unroll
  for (int i = 0; i < kLnWarpVecs; ++i)
    if (lane + 32 * i < n4) {
      const float a = v[i].x - mean, bb = v[i].y - mean, c = v[i].z - mean, d = v[i].w - mean;
      ss = fmaf(a, a, ss), ss = fmaf(bb, bb, ss), ss = fmaf(c, c, ss), ss = fmaf(d, d, ss);
    }
  const float inv = rsqrtf(warp_sum(ss) / static_cast<float>(C) + eps);
#pragma unroll
  for (int i = 0; i < kLnWarpVecs; ++i) {
    const int c4 = lane + 32 * i;
    if (c4 >= n4) continue;
    const float4 ww = reinterpret_cast<const float4*>(w)[c4], bv = reinterpret_cast<const float4*>(b)[c4];
    store4(out + r * C + 4 * c4, fmaf((v[i].x - mean) * inv, ww.x, bv.x), fmaf((v[i].y - mean) * inv, ww.y, bv.y),
           fmaf((v[i].z - mean) * inv, ww.z, bv.z), fmaf((v[i].w - mean) * inv, ww.w, bv.w));
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

// One thread per kP adjacent rotated pairs (t, j, i..i+kP-1): head j < H of q or j - H of k
// (adjacent in [3, H, D]), dims i.. and D/2 + i..; kP = 4 or 2 when D/2 and the alignment allow
// (8- or 4-byte loads of bf16), else 1. The same per-element products and roundings in every form.
template <typename T, int kP>
struct alignas(kP * sizeof(T)) Pack {
  T e[kP];
};

template <typename T, int kP>
__global__ void vision_rope_qk_kernel(T* qkv, int64_t T_, int64_t H, int64_t D, const float* table) {
  const int64_t half = D / 2, groups = half / kP;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (n >= T_ * 2 * H * groups) return;
  const int64_t i = (n % groups) * kP, j = (n / groups) % (2 * H), t = n / (groups * 2 * H);
  T* x = qkv + (t * 3 * H + j) * D;
  using P = Pack<T, kP>;
  P lo = *reinterpret_cast<const P*>(x + i), hi = *reinterpret_cast<const P*>(x + half + i);
#pragma unroll
  for (int p = 0; p < kP; ++p) {
    const float c = table[t * D + i + p], s = table[t * D + half + i + p];
    const float x1 = to_f32(lo.e[p]), x2 = to_f32(hi.e[p]);
    const float a1 = __fmul_rn(x1, c), b1 = __fmul_rn(x2, s);
    const float a2 = __fmul_rn(x2, c), b2 = __fmul_rn(x1, s);
    lo.e[p] = from_f32<T>(__fsub_rn(a1, b1));
    hi.e[p] = from_f32<T>(__fadd_rn(a2, b2));
  }
  *reinterpret_cast<P*>(x + i) = lo;
  *reinterpret_cast<P*>(x + half + i) = hi;
}

}  // namespace

void layer_norm(const float* x, const float* w, const float* b, float eps, int64_t T, int64_t C, void* out, DType dt,
                cudaStream_t s) {
  if (T == 0) return;
  dispatch_float(dt, [&](auto tag) {
    using E = decltype(tag);
    const auto aligned = [](const void* p, size_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; };
    if (C % 4 == 0 && C <= 128 * kLnWarpVecs && aligned(x, 16) && aligned(w, 16) && aligned(b, 16) &&
        aligned(out, 4 * sizeof(E)))
      layer_norm_warp_kernel<E><<<static_cast<unsigned>((T + kLnWarpRows - 1) / kLnWarpRows), 32 * kLnWarpRows, 0,
                                  s>>>(x, w, b, eps, T, C, static_cast<E*>(out));
    else
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
    const int64_t half = D / 2;
    // kP pairs per thread when every row offset of the pack is aligned to its size.
    const auto launch = [&](auto kp) {
      constexpr int kP = decltype(kp)::value;
      const int64_t n = T * 2 * H * (half / kP);
      vision_rope_qk_kernel<E, kP><<<static_cast<unsigned>((n + 255) / 256), 256, 0, s>>>(static_cast<E*>(qkv), T, H,
                                                                                        D, table);
    };
    const auto fits = [&](int kP) {
      const size_t bytes = kP * sizeof(E);
      return half % kP == 0 && (D * sizeof(E)) % bytes == 0 && reinterpret_cast<uintptr_t>(qkv) % bytes == 0;
    };
    if (fits(4)) launch(std::integral_constant<int, 4>{});
    else if (fits(2)) launch(std::integral_constant<int, 2>{});
    else launch(std::integral_constant<int, 1>{});
  });
  VLM_CUDA_CHECK_LAUNCH();
}

}  // namespace vlm::cuda
