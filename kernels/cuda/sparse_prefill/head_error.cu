#include "kernels/cuda/sparse_prefill/head_error.h"

#include "kernels/cuda/core/cuda_check.h"
#include "kernels/cuda/core/element.cuh"

namespace vlm::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kRowsPerBlock = 64;

__device__ __forceinline__ double block_sum_f64(double v, double* part) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) part[warp] = v;
  __syncthreads();
  double s = 0;
  if (threadIdx.x == 0)
    for (int w = 0; w < kThreads / 32; ++w) s += part[w];
  __syncthreads();
  return s;
}

// Grid (H, ceil(T / kRowsPerBlock)): block (h, r) sums rows [r * kRowsPerBlock, ...) of head h.
template <typename T>
__global__ void head_error_kernel(const T* out, const T* ref, int64_t rows, int H, int D, double* sums) {
  __shared__ double part[kThreads / 32];
  const int h = blockIdx.x;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kRowsPerBlock;
  const int64_t left = rows - r0, n = (left < kRowsPerBlock ? left : kRowsPerBlock) * D;
  double e = 0, d2 = 0;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    const int64_t r = r0 + i / D, at = (r * H + h) * D + i % D;
    const double o = to_f32(out[at]), f = to_f32(ref[at]);
    e += (o - f) * (o - f);
    d2 += f * f;
  }
  e = block_sum_f64(e, part);
  d2 = block_sum_f64(d2, part);
  if (threadIdx.x == 0) {
    atomicAdd(&sums[2 * h], e);
    atomicAdd(&sums[2 * h + 1], d2);
  }
}

__global__ void plan_head_blocks_kernel(SparsePlanView plan, int seq, int H, double* counts) {
  const int h = blockIdx.x * blockDim.x + threadIdx.x;
  if (h >= H) return;
  const SparseHeadDesc hd = plan.descs[static_cast<int64_t>(seq) * H + h];
  const int nqb = (hd.q_len + 63) / 64;
  const int32_t* bptr = plan.data + hd.block_ptr;
  const int32_t* cptr = plan.data + hd.col_ptr;
  counts[h] = nqb > 0 ? (bptr[nqb] - bptr[0]) + (cptr[nqb] - cptr[0]) / 64.0 : 0.0;
}

}  // namespace

void head_error_sums(const void* out, const void* ref, DType act, int64_t T, int H, int D, double* sums,
                     cudaStream_t stream) {
  if (T <= 0 || H <= 0) return;
  const dim3 grid(H, static_cast<unsigned>((T + kRowsPerBlock - 1) / kRowsPerBlock));
  dispatch_float(act, [&](auto tag) {
    using E = decltype(tag);
    head_error_kernel<E><<<grid, kThreads, 0, stream>>>(static_cast<const E*>(out), static_cast<const E*>(ref), T, H,
                                                        D, sums);
  });
  VLM_CUDA_CHECK_LAUNCH();
}

void plan_head_blocks(const SparsePlanView& plan, int seq, int H, double* counts, cudaStream_t stream) {
  if (H <= 0) return;
  plan_head_blocks_kernel<<<(H + 127) / 128, 128, 0, stream>>>(plan, seq, H, counts);
  VLM_CUDA_CHECK_LAUNCH();
}

}  // namespace vlm::cuda
