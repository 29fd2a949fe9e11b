// Block-wide reductions shared by the row kernels (kernels/cuda/ops).
#pragma once

#include <cuda_runtime.h>

namespace vlm::cuda {

// Block-wide sum of one float per thread (blockDim.x a multiple of 32, at most 1024); every
// thread gets the sum.
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float part[32];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // part[] may still be read by a previous call
  if (lane == 0) part[warp] = v;
  __syncthreads();
  const int nw = blockDim.x / 32;
  v = lane < nw ? part[lane] : 0.0f;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

}  // namespace vlm::cuda

namespace vlm::cuda {

// Threads per block of a row kernel over rows of n elements.
inline int row_threads(long long n) { return n >= 1024 ? 1024 : (n >= 256 ? 256 : 128); }

}  // namespace vlm::cuda
