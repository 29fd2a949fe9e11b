// The combine of the mixture-of-experts block (moe_cuda.h, step 4) beside its naive reference,
// and the load-time transpose of fused-transposed expert tensors.
#include <algorithm>

#include "kernels/cuda/core/element.cuh"
#include "kernels/cuda/moe/moe_cuda.h"

namespace vlm::cuda {
namespace {

constexpr int kMaxK = static_cast<int>(kMoeMaxTopK);

// Block per token (rows t = blockIdx.y + i * gridDim.y), 8 columns per thread when C % 8 == 0
// and dt is 16-bit (one 16-byte load per choice), else one; the token's slots and weights read
// once into shared memory.
template <class T, int kVec>
__global__ void combine_kernel(const T* __restrict__ out, const int32_t* __restrict__ slot_of_pair,
                               const float* __restrict__ weight, float* y, bool accumulate, int T_rows, int K, int C) {
  __shared__ int slot[kMaxK];
  __shared__ float wt[kMaxK];
  for (int t = blockIdx.y; t < T_rows; t += gridDim.y) {
    __syncthreads();
    if (threadIdx.x < K) {
      slot[threadIdx.x] = slot_of_pair[static_cast<int64_t>(t) * K + threadIdx.x];
      wt[threadIdx.x] = weight[static_cast<int64_t>(t) * K + threadIdx.x];
    }
    __syncthreads();
    const int c = (blockIdx.x * blockDim.x + threadIdx.x) * kVec;
    if (c >= C) continue;
    float acc[kVec] = {};
    for (int j = 0; j < K; ++j) {
      const T* o = out + static_cast<int64_t>(slot[j]) * C + c;
      T v[kVec];
      if constexpr (kVec == 8) *reinterpret_cast<uint4*>(v) = *reinterpret_cast<const uint4*>(o);
      else v[0] = o[0];
#pragma unroll
      for (int i = 0; i < kVec; ++i) acc[i] += to_f32(v[i]) * wt[j];
    }
    float* yr = y + static_cast<int64_t>(t) * C + c;
#pragma unroll
    for (int i = 0; i < kVec; ++i) yr[i] = accumulate ? yr[i] + acc[i] : acc[i];
  }
}

template <class T>
__global__ void combine_naive_kernel(const T* out, const int32_t* slot_of_pair, const float* weight, float* y,
                                     bool accumulate, int64_t T_rows, int64_t K, int64_t C) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= T_rows * C) return;
  const int64_t t = idx / C, c = idx % C;
  float acc = 0.f;
  for (int64_t j = 0; j < K; ++j) acc += to_f32(out[slot_of_pair[t * K + j] * C + c]) * weight[t * K + j];
  y[idx] = accumulate ? y[idx] + acc : acc;
}

// 32 x 32 tiles of one slice through shared memory (blockIdx.z = the slice).
template <class U>
__global__ void transpose_kernel(const U* src, U* dst, int64_t R, int64_t Cc) {
  __shared__ U tile[32][33];
  const int64_t base = static_cast<int64_t>(blockIdx.z) * R * Cc;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * 32, c0 = static_cast<int64_t>(blockIdx.x) * 32;
  for (int i = threadIdx.y; i < 32; i += blockDim.y) {
    const int64_t r = r0 + i, c = c0 + threadIdx.x;
    if (r < R && c < Cc) tile[i][threadIdx.x] = src[base + r * Cc + c];
  }
  __syncthreads();
  for (int i = threadIdx.y; i < 32; i += blockDim.y) {
    const int64_t c = c0 + i, r = r0 + threadIdx.x;
    if (r < R && c < Cc) dst[base + c * R + r] = tile[threadIdx.x][i];
  }
}

void check_combine(int64_t T, int64_t K, int64_t C) {
  if (T < 0 || K < 1 || K > kMoeMaxTopK || C < 1 || C > (1 << 30)) precondition_failed("moe_combine: 1 <= K <= 32");
}

}  // namespace

void moe_combine(const void* out, DType dt, const int32_t* slot_of_pair, const float* weight, float* y,
                 bool accumulate, int64_t T, int64_t K, int64_t C, cudaStream_t s) {
  check_combine(T, K, C);
  if (T == 0) return;
  const auto rows = static_cast<unsigned>(std::min<int64_t>(T, 65535));
  dispatch_float(dt, [&](auto tag) {
    using E = decltype(tag);
    const auto* o = static_cast<const E*>(out);
    if constexpr (sizeof(E) == 2) {
      if (C % 8 == 0) {
        const int threads = static_cast<int>(std::min<int64_t>(256, std::max<int64_t>(32, C / 8)));
        const dim3 grid(static_cast<unsigned>((C / 8 + threads - 1) / threads), rows);
        combine_kernel<E, 8><<<grid, threads, 0, s>>>(o, slot_of_pair, weight, y, accumulate, static_cast<int>(T),
                                                      static_cast<int>(K), static_cast<int>(C));
        return;
      }
    }
    const dim3 grid(static_cast<unsigned>((C + 255) / 256), rows);
    combine_kernel<E, 1><<<grid, 256, 0, s>>>(o, slot_of_pair, weight, y, accumulate, static_cast<int>(T),
                                              static_cast<int>(K), static_cast<int>(C));
  });
  VLM_CUDA_CHECK_LAUNCH();
}

void moe_combine_naive(const void* out, DType dt, const int32_t* slot_of_pair, const float* weight, float* y,
                       bool accumulate, int64_t T, int64_t K, int64_t C, cudaStream_t s) {
  check_combine(T, K, C);
  if (T == 0) return;
  dispatch_float(dt, [&](auto tag) {
    using E = decltype(tag);
    combine_naive_kernel<E><<<static_cast<unsigned>((T * C + 255) / 256), 256, 0, s>>>(
        static_cast<const E*>(out), slot_of_pair, weight, y, accumulate, T, K, C);
  });
  VLM_CUDA_CHECK_LAUNCH();
}

void moe_transpose_slices(const void* src, void* dst, int64_t E, int64_t R, int64_t Cc, DType dt, cudaStream_t s) {
  if (E < 1 || E > 65535 || R < 1 || Cc < 1 || R > (1ll << 36) / 32 || (R + 31) / 32 > 65535)
    precondition_failed("moe_transpose_slices: 1 <= E <= 65535, R <= 65535 * 32");
  const dim3 grid(static_cast<unsigned>((Cc + 31) / 32), static_cast<unsigned>((R + 31) / 32), static_cast<unsigned>(E));
  const dim3 block(32, 8);
  const size_t es = dtype_size(dt);
  if (es == 2)
    transpose_kernel<uint16_t><<<grid, block, 0, s>>>(static_cast<const uint16_t*>(src), static_cast<uint16_t*>(dst), R,
                                                      Cc);
  else if (es == 4)
    transpose_kernel<uint32_t><<<grid, block, 0, s>>>(static_cast<const uint32_t*>(src), static_cast<uint32_t*>(dst), R,
                                                      Cc);
  else
    unsupported_dtype(dt);
  VLM_CUDA_CHECK_LAUNCH();
}

}  // namespace vlm::cuda
