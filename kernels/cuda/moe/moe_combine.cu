// The combine of the mixture-of-experts block (moe_cuda.h, step 4) beside its naive reference,
// and the load-time transpose of fused-transposed expert tensors.
#include <algorithm>
#include <cstdint>

#include "kernels/cuda/core/element.cuh"
#include "kernels/cuda/moe/moe_cuda.h"

namespace vlm::cuda {
namespace {

constexpr int kMaxK = static_cast<int>(kMoeMaxTopK);

// Block per token (rows t = blockIdx.y + i * gridDim.y), 8 columns per thread when C % 8 == 0
// and dt is 16-bit (one 16-byte load per choice), else one; the token's slots and weights read
// once into shared memory. The 16-byte form issues up to 8 choices' loads (and y's, with
// accumulate) before it sums them (the sum still in increasing j): at one load in flight per
// thread the prefill shape (8,192 tokens x 8 x 2048) ran at ~73 % of the read rate (session 17,
// 128 us for 268 MB of out + 2 x 67 MB of y); kVecY: y 16-byte aligned, read and written as float4.
template <class T, int kVec, bool kVecY>
__global__ void combine_kernel(const T* __restrict__ out, const int32_t* __restrict__ slot_of_pair,
                               const float* __restrict__ weight, float* y, bool accumulate, int T_rows, int K, int C) {
  __shared__ int slot[kMaxK];
  __shared__ float wt[kMaxK];
  constexpr int kBatch = kVec == 8 ? 8 : 1;  // loads in flight per thread
  for (int t = blockIdx.y; t < T_rows; t += gridDim.y) {
    __syncthreads();
    if (threadIdx.x < K) {
      slot[threadIdx.x] = slot_of_pair[static_cast<int64_t>(t) * K + threadIdx.x];
      wt[threadIdx.x] = weight[static_cast<int64_t>(t) * K + threadIdx.x];
    }
    __syncthreads();
    const int c = (blockIdx.x * blockDim.x + threadIdx.x) * kVec;
    if (c >= C) continue;
    float* yr = y + static_cast<int64_t>(t) * C + c;
    float old[kVec] = {};
    if (accumulate) {
      if constexpr (kVecY) {
        const float4 a = *reinterpret_cast<const float4*>(yr), b = *reinterpret_cast<const float4*>(yr + 4);
        old[0] = a.x, old[1] = a.y, old[2] = a.z, old[3] = a.w, old[4] = b.x, old[5] = b.y, old[6] = b.z, old[7] = b.w;
      } else {
#pragma unroll
        for (int i = 0; i < kVec; ++i) old[i] = yr[i];
      }
    }
    float acc[kVec] = {};
    for (int j0 = 0; j0 < K; j0 += kBatch) {
      uint4 raw[kBatch];  // kVec == 8: choice j0 + u's 8 elements
      T one[kBatch];      // kVec == 1
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        if (j0 + u >= K) break;
        const T* o = out + static_cast<int64_t>(slot[j0 + u]) * C + c;
        if constexpr (kVec == 8) raw[u] = __ldg(reinterpret_cast<const uint4*>(o));
        else one[u] = o[0];
      }
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        if (j0 + u >= K) break;
        if constexpr (kVec == 8) {
          const T* v = reinterpret_cast<const T*>(&raw[u]);
#pragma unroll
          for (int i = 0; i < kVec; ++i) acc[i] += to_f32(v[i]) * wt[j0 + u];
        } else {
          acc[0] += to_f32(one[u]) * wt[j0 + u];
        }
      }
    }
#pragma unroll
    for (int i = 0; i < kVec; ++i) acc[i] = accumulate ? old[i] + acc[i] : acc[i];
    if constexpr (kVecY) {
      *reinterpret_cast<float4*>(yr) = make_float4(acc[0], acc[1], acc[2], acc[3]);
      *reinterpret_cast<float4*>(yr + 4) = make_float4(acc[4], acc[5], acc[6], acc[7]);
    } else {
#pragma unroll
      for (int i = 0; i < kVec; ++i) yr[i] = acc[i];
    }
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
        if (reinterpret_cast<uintptr_t>(y) % 16 == 0)
          combine_kernel<E, 8, true><<<grid, threads, 0, s>>>(o, slot_of_pair, weight, y, accumulate,
                                                              static_cast<int>(T), static_cast<int>(K),
                                                              static_cast<int>(C));
        else
          combine_kernel<E, 8, false><<<grid, threads, 0, s>>>(o, slot_of_pair, weight, y, accumulate,
                                                               static_cast<int>(T), static_cast<int>(K),
                                                               static_cast<int>(C));
        return;
      }
    }
    const dim3 grid(static_cast<unsigned>((C + 255) / 256), rows);
    combine_kernel<E, 1, false><<<grid, 256, 0, s>>>(o, slot_of_pair, weight, y, accumulate, static_cast<int>(T),
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
