#include "kernels/cuda/ops/row_ops_cuda.h"

#include "kernels/core/check.h"
#include "kernels/cuda/core/block_reduce.cuh"
#include "kernels/cuda/core/cuda_check.h"
#include "kernels/cuda/core/element.cuh"

namespace vlm::cuda {

namespace {

template <typename S, typename D>
__global__ void copy_rows_kernel(const S* src, const int32_t* src_idx, D* dst, const int32_t* dst_idx, int64_t C) {
  const int64_t j = blockIdx.x;
  const S* in = src + (src_idx ? static_cast<int64_t>(src_idx[j]) : j) * C;
  D* out = dst + static_cast<int64_t>(dst_idx[j]) * C;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) out[c] = from_f32<D>(to_f32(in[c]));
}

// A tap of one axis: source rows i0, i1 and weights l0, l1 (bilinear_resize's, in f32, rounded
// step by step).
struct Tap {
  int64_t i0, i1;
  float l0, l1;
};

__device__ Tap tap(int64_t d, int64_t in_size, int64_t out_size) {
  const float scale = __fdiv_rn(static_cast<float>(in_size), static_cast<float>(out_size));
  float src = __fsub_rn(__fmul_rn(scale, __fadd_rn(static_cast<float>(d), 0.5f)), 0.5f);
  if (src < 0) src = 0;
  const auto i0 = static_cast<int64_t>(src);
  const float l1 = __fsub_rn(src, static_cast<float>(i0));
  return {i0, i0 + (i0 < in_size - 1 ? 1 : 0), __fsub_rn(1.0f, l1), l1};
}

// a.l0 * (b.l0 * p00 + b.l1 * p01) + a.l1 * (b.l0 * p10 + b.l1 * p11), each operation rounded.
template <typename T>
__device__ float blend(const T* in, int64_t W, int64_t C, const Tap& a, const Tap& b, int64_t c) {
  const float p00 = to_f32(in[(a.i0 * W + b.i0) * C + c]), p01 = to_f32(in[(a.i0 * W + b.i1) * C + c]);
  const float p10 = to_f32(in[(a.i1 * W + b.i0) * C + c]), p11 = to_f32(in[(a.i1 * W + b.i1) * C + c]);
  const float top = __fadd_rn(__fmul_rn(b.l0, p00), __fmul_rn(b.l1, p01));
  const float bottom = __fadd_rn(__fmul_rn(b.l0, p10), __fmul_rn(b.l1, p11));
  return __fadd_rn(__fmul_rn(a.l0, top), __fmul_rn(a.l1, bottom));
}

template <typename T>
__global__ void bilinear_kernel(const T* in, int64_t H, int64_t W, int64_t C, int64_t oh, int64_t ow, T* out) {
  const int64_t y = blockIdx.x / ow, x = blockIdx.x % ow;
  const Tap a = tap(y, H, oh), b = tap(x, W, ow);
  T* o = out + static_cast<int64_t>(blockIdx.x) * C;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) o[c] = from_f32<T>(blend(in, W, C, a, b, c));
}

template <typename T>
__global__ void bilinear_naive_kernel(const T* in, int64_t H, int64_t W, int64_t C, int64_t oh, int64_t ow, T* out) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= oh * ow * C) return;
  const int64_t c = e % C, x = (e / C) % ow, y = e / (C * ow);
  out[e] = from_f32<T>(blend(in, W, C, tap(y, H, oh), tap(x, W, ow), c));
}

__global__ void add_blended_rows_kernel(const float* table, int64_t C, const int32_t* entries, float* dst) {
  const int32_t* e = entries + 11 * static_cast<int64_t>(blockIdx.x);
  const float* r0 = table + static_cast<int64_t>(e[0]) * C;
  const float* r1 = table + static_cast<int64_t>(e[1]) * C;
  const float* r2 = table + static_cast<int64_t>(e[2]) * C;
  const float* r3 = table + static_cast<int64_t>(e[3]) * C;
  const float w0 = __int_as_float(e[4]), w1 = __int_as_float(e[5]), w2 = __int_as_float(e[6]), w3 = __int_as_float(e[7]);
  const int64_t d = e[8], t = e[9], stride = e[10];
  for (int64_t k = threadIdx.x; k < C; k += blockDim.x) {
    const float v = __fadd_rn(__fadd_rn(__fadd_rn(__fmul_rn(r0[k], w0), __fmul_rn(r1[k], w1)), __fmul_rn(r2[k], w2)),
                              __fmul_rn(r3[k], w3));
    for (int64_t f = 0; f < t; ++f) {
      float* out = dst + (d + f * stride) * C + k;
      *out = __fadd_rn(*out, v);
    }
  }
}

__global__ void add_rows_at_kernel(const float* src, int64_t stride, const int32_t* rows, int64_t C, float* x) {
  const int64_t j = blockIdx.x;
  const float* in = src + j * stride;
  float* out = x + static_cast<int64_t>(rows[j]) * C;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) out[c] = __fadd_rn(out[c], in[c]);
}

// C, stride multiples of 4 and both bases 16-byte aligned: every row's float4s are aligned.
__global__ void add_rows_at_vec4_kernel(const float* src, int64_t stride, const int32_t* rows, int64_t C, float* x) {
  const int64_t j = blockIdx.x;
  const auto* in = reinterpret_cast<const float4*>(src + j * stride);
  auto* out = reinterpret_cast<float4*>(x + static_cast<int64_t>(rows[j]) * C);
  for (int64_t c = threadIdx.x; c < C / 4; c += blockDim.x) {
    const float4 a = in[c];
    float4 o = out[c];
    o.x = __fadd_rn(o.x, a.x), o.y = __fadd_rn(o.y, a.y), o.z = __fadd_rn(o.z, a.z), o.w = __fadd_rn(o.w, a.w);
    out[c] = o;
  }
}

__global__ void add_rows_at_naive_kernel(const float* src, int64_t stride, const int32_t* rows, int64_t M, int64_t C,
                                         float* x) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= M * C) return;
  const int64_t j = e / C, c = e % C;
  float* out = x + static_cast<int64_t>(rows[j]) * C + c;
  *out = __fadd_rn(*out, src[j * stride + c]);
}

}  // namespace

void add_rows_at(const float* src, int64_t stride, const int32_t* rows, int64_t M, int64_t C, float* x, cudaStream_t s) {
  VLM_CHECK(M >= 0 && C >= 0 && stride >= C, "add_rows_at: {} rows of {} at stride {}", M, C, stride);
  if (M == 0 || C == 0) return;
  const bool vec = C % 4 == 0 && stride % 4 == 0 && reinterpret_cast<uintptr_t>(src) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(x) % 16 == 0;
  if (vec)
    add_rows_at_vec4_kernel<<<static_cast<unsigned>(M), row_threads(C / 4), 0, s>>>(src, stride, rows, C, x);
  else
    add_rows_at_kernel<<<static_cast<unsigned>(M), row_threads(C), 0, s>>>(src, stride, rows, C, x);
  VLM_CUDA_CHECK_LAUNCH();
}

void add_rows_at_naive(const float* src, int64_t stride, const int32_t* rows, int64_t M, int64_t C, float* x,
                       cudaStream_t s) {
  VLM_CHECK(M >= 0 && C >= 0 && stride >= C, "add_rows_at_naive: {} rows of {} at stride {}", M, C, stride);
  if (M == 0 || C == 0) return;
  const int64_t n = M * C;
  add_rows_at_naive_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, s>>>(src, stride, rows, M, C, x);
  VLM_CUDA_CHECK_LAUNCH();
}

void add_blended_rows(const float* table, int64_t C, const int32_t* entries, int64_t E, float* dst, cudaStream_t s) {
  if (E == 0 || C == 0) return;
  add_blended_rows_kernel<<<static_cast<unsigned>(E), row_threads(C / 2), 0, s>>>(table, C, entries, dst);
  VLM_CUDA_CHECK_LAUNCH();
}

void copy_rows(const void* src, DType src_dt, const int32_t* src_idx, void* dst, DType dst_dt, const int32_t* dst_idx,
               int64_t R, int64_t C, cudaStream_t s) {
  if (R == 0 || C == 0) return;
  dispatch_float(src_dt, [&](auto st) {
    dispatch_float(dst_dt, [&](auto dt) {
      using S = decltype(st);
      using D = decltype(dt);
      copy_rows_kernel<S, D><<<static_cast<unsigned>(R), row_threads(C / 2), 0, s>>>(
          static_cast<const S*>(src), src_idx, static_cast<D*>(dst), dst_idx, C);
    });
  });
  VLM_CUDA_CHECK_LAUNCH();
}

void bilinear_resize(const void* in, DType dt, int64_t H, int64_t W, int64_t C, int64_t oh, int64_t ow, void* out,
                     cudaStream_t s) {
  VLM_CHECK(H > 0 && W > 0 && C > 0 && oh > 0 && ow > 0, "bilinear {}x{}x{} -> {}x{}", H, W, C, oh, ow);
  dispatch_float(dt, [&](auto tag) {
    using T = decltype(tag);
    bilinear_kernel<T><<<static_cast<unsigned>(oh * ow), row_threads(C / 2), 0, s>>>(static_cast<const T*>(in), H, W,
                                                                                      C, oh, ow, static_cast<T*>(out));
  });
  VLM_CUDA_CHECK_LAUNCH();
}

void bilinear_resize_naive(const void* in, DType dt, int64_t H, int64_t W, int64_t C, int64_t oh, int64_t ow,
                           void* out, cudaStream_t s) {
  VLM_CHECK(H > 0 && W > 0 && C > 0 && oh > 0 && ow > 0, "bilinear {}x{}x{} -> {}x{}", H, W, C, oh, ow);
  const int64_t n = oh * ow * C;
  dispatch_float(dt, [&](auto tag) {
    using T = decltype(tag);
    bilinear_naive_kernel<T><<<static_cast<unsigned>((n + 255) / 256), 256, 0, s>>>(static_cast<const T*>(in), H, W, C,
                                                                                    oh, ow, static_cast<T*>(out));
  });
  VLM_CUDA_CHECK_LAUNCH();
}

}  // namespace vlm::cuda
