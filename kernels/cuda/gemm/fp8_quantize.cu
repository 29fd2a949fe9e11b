#include "kernels/cuda/gemm/fp8_quantize.h"

#include <cuda_fp8.h>

#include "kernels/core/fp8.h"
#include "kernels/cuda/core/element.cuh"

namespace vlm::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float fp8_f32(uint8_t v) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(v), __NV_E4M3)));
}

// grid R: block -> row r. amax over the row (max: exact in any order), then q.
template <class T>
__global__ void __launch_bounds__(kThreads) quantize_rows_kernel(const T* __restrict__ x, int64_t K, uint8_t* q,
                                                                 float* scale) {
  const int64_t r = blockIdx.x;
  const T* row = x + r * K;
  float amax = 0.f;
  for (int64_t k = threadIdx.x; k < K; k += kThreads) amax = fmaxf(amax, fabsf(to_f32(row[k])));
  __shared__ float red[kThreads / 32];
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = amax;
  __syncthreads();
  amax = 0.f;
#pragma unroll
  for (int i = 0; i < kThreads / 32; ++i) amax = fmaxf(amax, red[i]);
  const float inv = amax > 0.f ? kFp8E4M3Max / amax : 1.f;
  if (threadIdx.x == 0) scale[r] = amax > 0.f ? amax / kFp8E4M3Max : 1.f;
  for (int64_t k = threadIdx.x; k < K; k += kThreads)
    q[r * K + k] = static_cast<uint8_t>(__nv_cvt_float_to_fp8(to_f32(row[k]) * inv, __NV_SATFINITE, __NV_E4M3));
}

// The same bits for 16-bit rows with K % 8 == 0 (every decode step's activations): 16-byte loads
// (8 values), kVecThreads threads, the q of 8 values stored as one 8-byte word; the row read twice
// (the second time from L1/L2). grid R: block -> row r.
constexpr int kVecThreads = 512;
template <class T>
__global__ void __launch_bounds__(kVecThreads) quantize_rows_vec_kernel(const T* __restrict__ x, int64_t K, uint8_t* q,
                                                                        float* scale) {
  const int64_t r = blockIdx.x, K8 = K / 8;
  const uint4* row = reinterpret_cast<const uint4*>(x + r * K);
  float amax = 0.f;
  for (int64_t i = threadIdx.x; i < K8; i += kVecThreads) {
    const uint4 v = __ldg(row + i);
    const T* e = reinterpret_cast<const T*>(&v);
#pragma unroll
    for (int j = 0; j < 8; ++j) amax = fmaxf(amax, fabsf(to_f32(e[j])));
  }
  __shared__ float red[kVecThreads / 32];
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = amax;
  __syncthreads();
  amax = 0.f;
#pragma unroll
  for (int i = 0; i < kVecThreads / 32; ++i) amax = fmaxf(amax, red[i]);
  const float inv = amax > 0.f ? kFp8E4M3Max / amax : 1.f;
  if (threadIdx.x == 0) scale[r] = amax > 0.f ? amax / kFp8E4M3Max : 1.f;
  uint2* out = reinterpret_cast<uint2*>(q + r * K);
  for (int64_t i = threadIdx.x; i < K8; i += kVecThreads) {
    const uint4 v = __ldg(row + i);
    const T* e = reinterpret_cast<const T*>(&v);
    uint32_t w[2] = {0, 0};
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const uint32_t b = __nv_cvt_float_to_fp8(to_f32(e[j]) * inv, __NV_SATFINITE, __NV_E4M3);
      w[j / 4] |= b << (8 * (j % 4));
    }
    out[i] = make_uint2(w[0], w[1]);
  }
}

__global__ void dequantize_blocks_kernel(const uint8_t* q, const float* s, int64_t bn, int64_t bk, int64_t N,
                                         int64_t K, float* out) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= N * K) return;
  const int64_t n = i / K, k = i % K, KB = (K + bk - 1) / bk;
  out[i] = fp8_f32(q[i]) * s[(n / bn) * KB + k / bk];
}

template <class TO>
__global__ void fp8_gemm_naive_kernel(const uint8_t* xq, const float* xs, const uint8_t* wq, const float* ws,
                                      const __nv_bfloat16* bias, TO* y, bool accumulate, int N, int K) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x, m = blockIdx.y;
  if (n >= N) return;
  float acc = 0.f;
  for (int k = 0; k < K; ++k) acc = fmaf(fp8_f32(xq[int64_t(m) * K + k]), fp8_f32(wq[int64_t(n) * K + k]), acc);
  float v = acc * xs[m] * ws[n];
  if (bias) v += __bfloat162float(bias[n]);
  if (accumulate) v += to_f32(y[int64_t(m) * N + n]);
  y[int64_t(m) * N + n] = from_f32<TO>(v);
}

// The scales multiply the product as the naive kernel does (acc * x_scale * w_scale), then the
// bias, then the residual.
template <class T>
__global__ void fp8_scale_epilogue_kernel(T* __restrict__ y, const float* __restrict__ tmp,
                                          const float* __restrict__ x_scale, const float* __restrict__ w_scale,
                                          const __nv_bfloat16* __restrict__ bias, bool accumulate, int64_t N,
                                          int64_t total) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= total) return;
  const int64_t m = i / N, n = i % N;
  float v = tmp[i];
  if (x_scale) v = v * x_scale[m];
  if (w_scale) v = v * w_scale[n];
  if (bias) v += __bfloat162float(bias[n]);
  if (accumulate) v += to_f32(y[i]);
  y[i] = from_f32<T>(v);
}

unsigned blocks_of(int64_t n, int per) { return static_cast<unsigned>((n + per - 1) / per); }

}  // namespace

void quantize_fp8_rows(const void* x, DType dt, int64_t R, int64_t K, uint8_t* q, float* scale, cudaStream_t s) {
  if (R == 0) return;
  if (R >= (int64_t(1) << 31)) precondition_failed("quantize_fp8_rows: R below 2^31");
  const bool aligned = reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(q) % 8 == 0;
  dispatch_float(dt, [&](auto t) {
    using T = decltype(t);
    if constexpr (sizeof(T) == 2) {
      if (K % 8 == 0 && aligned) {
        quantize_rows_vec_kernel<T><<<static_cast<unsigned>(R), kVecThreads, 0, s>>>(static_cast<const T*>(x), K, q,
                                                                                     scale);
        return;
      }
    }
    quantize_rows_kernel<T><<<static_cast<unsigned>(R), kThreads, 0, s>>>(static_cast<const T*>(x), K, q, scale);
  });
  VLM_CUDA_CHECK_LAUNCH();
}

void dequantize_fp8_blocks(const uint8_t* q, const float* block_scale, int64_t bn, int64_t bk, int64_t N, int64_t K,
                           float* out, cudaStream_t s) {
  if (N * K == 0) return;
  if (bn <= 0 || bk <= 0) precondition_failed("dequantize_fp8_blocks: block sizes > 0");
  dequantize_blocks_kernel<<<blocks_of(N * K, 256), 256, 0, s>>>(q, block_scale, bn, bk, N, K, out);
  VLM_CUDA_CHECK_LAUNCH();
}

void fp8_scale_epilogue(void* y, DType out_dt, const float* tmp, const float* x_scale, const float* w_scale,
                        const void* bias, bool accumulate, int64_t M, int64_t N, cudaStream_t s) {
  if (M * N == 0) return;
  const auto* b = static_cast<const __nv_bfloat16*>(bias);
  if (out_dt == DType::F32)
    fp8_scale_epilogue_kernel<float><<<blocks_of(M * N, 256), 256, 0, s>>>(static_cast<float*>(y), tmp, x_scale, w_scale,
                                                                           b, accumulate, N, M * N);
  else if (out_dt == DType::BF16)
    fp8_scale_epilogue_kernel<__nv_bfloat16><<<blocks_of(M * N, 256), 256, 0, s>>>(
        static_cast<__nv_bfloat16*>(y), tmp, x_scale, w_scale, b, accumulate, N, M * N);
  else
    unsupported_dtype(out_dt);
  VLM_CUDA_CHECK_LAUNCH();
}

void fp8_gemm_naive(const uint8_t* xq, const float* x_scale, const uint8_t* wq, const float* w_scale,
                    const void* bias, void* y, DType out_dt, bool accumulate, int64_t M, int64_t N, int64_t K,
                    cudaStream_t s) {
  if (M == 0) return;
  const dim3 grid(blocks_of(N, 128), static_cast<unsigned>(M));
  const auto* b = static_cast<const __nv_bfloat16*>(bias);
  if (out_dt == DType::F32)
    fp8_gemm_naive_kernel<float><<<grid, 128, 0, s>>>(xq, x_scale, wq, w_scale, b, static_cast<float*>(y), accumulate,
                                                      static_cast<int>(N), static_cast<int>(K));
  else if (out_dt == DType::BF16)
    fp8_gemm_naive_kernel<__nv_bfloat16><<<grid, 128, 0, s>>>(xq, x_scale, wq, w_scale, b,
                                                              static_cast<__nv_bfloat16*>(y), accumulate,
                                                              static_cast<int>(N), static_cast<int>(K));
  else
    unsupported_dtype(out_dt);
  VLM_CUDA_CHECK_LAUNCH();
}

}  // namespace vlm::cuda
