// moe_pair_down_combine_staged (moe_decode.h, 3. "staged"): the down product of a few tokens with
// the combine folded in, every weight byte a block needs copied into shared memory by cp.async at
// the block's start (no registers hold bytes in flight), then summed from shared memory.
//
// Why (session 18, H200, bench_cuda_moe T = 1): the warp-per-output form (moe_pair_gemv.cu) read
// the 25 MB of a layer's 8 down slices at 39 % of the read rate (14.67 us), its bytes in flight
// bounded by registers (108 per thread: ~16 warps per SM) and spent in two dependent rounds per
// warp (pairs 0-3, then 4-7). Here a block of 8 warps owns R consecutive output columns c0..c0+R
// of one token t (R = 8 for the 30B-A3B shape: C / R = 256 blocks, 2 per SM on 132 SMs, ONE wave)
// and issues, before anything waits, the k slices' rows [c0, c0 + R) (contiguous in down
// [E, C, I]: R x I x 2 bytes per pair, 12 KB at I = 768, 96 KB per block, ~190 KB per SM in
// flight) and the token's k act rows (contiguous, 12 KB). Then warp w sums pair j = w (w + 8, ...)
// against its R rows (lane l: 16-byte vectors l, l + 32, ... in order, as the old form's lanes),
// the xor butterfly, rounds to dt, and thread r < R adds the k outputs of column c0 + r in
// increasing j (f32, weight[t, j] each): the same partition and the same order of every sum as
// moe_pair_down_combine, so the two forms give the same bits (the test asserts it), and a run
// gives the same bits every time (no atomics).
// Shared memory per block: k x (R + 1) x I x dt bytes (R picked on the host as the largest of
// 8, 4, 2, 1 that fits kStagedSmemBytes; 30B-A3B: 8 x 9 x 768 x 2 = 110,592 B).
#include <algorithm>
#include <cstdint>

#include "kernels/cuda/attention/cuda_attention_common.cuh"  // once_per_device
#include "kernels/cuda/attention/mma_tile.cuh"
#include "kernels/cuda/core/cuda_check.h"
#include "kernels/cuda/core/element.cuh"
#include "kernels/cuda/gemm/gemv_warp.cuh"
#include "kernels/cuda/moe/moe_decode.h"

namespace vlm::cuda {
namespace {

using gemv_detail::dot8;
using gemv_detail::warp_sum;

constexpr int kStWarps = 8, kStThreads = 32 * kStWarps;
constexpr int kMaxK = static_cast<int>(kMoeMaxTopK);
// Dynamic shared memory per block at most: two blocks share an SM (228 KB on sm_90, 1 KB of each
// block reserved, plus the static red / base arrays below).
constexpr int64_t kStagedSmemBytes = 110592;

int64_t staged_smem(int64_t K, int64_t I, int R) { return K * (R + 1) * I * 2; }

// Columns per block for (K, I): the largest of 8, 4, 2, 1 whose staging fits, 0 if none does.
int staged_rows(int64_t K, int64_t I) {
  for (int R = 8; R >= 1; R /= 2)
    if (staged_smem(K, I, R) <= kStagedSmemBytes) return R;
  return 0;
}

// Block (blockIdx.x: columns [c0, c0 + R), blockIdx.y: token t). Shared: sw [K][R][I] (the
// pairs' down rows), sx [K][I] (the token's act rows), then the k outputs per column in red.
template <class T, int R>
__global__ void __launch_bounds__(kStThreads)
    pair_down_staged_kernel(const T* __restrict__ act, const T* __restrict__ w, const int32_t* __restrict__ expert,
                            const float* __restrict__ weight, int Kt, int C, int I, float* y, bool accumulate) {
  extern __shared__ __align__(16) unsigned char st_smem[];
  __shared__ const uint4* src[kMaxK];  // pair j's first row c0 in down
  __shared__ float wt[kMaxK];
  __shared__ float red[kMaxK][R];      // the rounded down output of pair j, column c0 + r
  const int t = blockIdx.y, c0 = blockIdx.x * R, rows = min(R, C - c0), I8 = I / 8;
  const int64_t pair0 = static_cast<int64_t>(t) * Kt;
  if (threadIdx.x < Kt) {
    const int64_t e = expert[pair0 + threadIdx.x];
    src[threadIdx.x] = reinterpret_cast<const uint4*>(w + (e * C + c0) * I);
    wt[threadIdx.x] = weight[pair0 + threadIdx.x];
  }
  __syncthreads();
  uint4* sw = reinterpret_cast<uint4*>(st_smem);  // [Kt][R][I8]
  uint4* sx = sw + static_cast<int64_t>(Kt) * R * I8;  // [Kt][I8]
  // All copies at once: the token's act rows (contiguous: pairs t*k .. t*k + k - 1), then each
  // pair's `rows` down rows (contiguous in its slice).
  const uint4* xg = reinterpret_cast<const uint4*>(act + pair0 * I);
  for (int v = threadIdx.x; v < Kt * I8; v += kStThreads) tile::cp_async16(sx + v, xg + v, 16);
  const int per_pair = rows * I8;
  for (int v = threadIdx.x; v < Kt * per_pair; v += kStThreads) {
    const int j = v / per_pair, off = v - j * per_pair;
    tile::cp_async16(sw + static_cast<int64_t>(j) * R * I8 + off, src[j] + off, 16);
  }
  tile::cp_async_commit();
  tile::cp_async_wait<0>();
  __syncthreads();

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int j = warp; j < Kt; j += kStWarps) {
    const uint4* wj = sw + static_cast<int64_t>(j) * R * I8;
    const uint4* xj = sx + static_cast<int64_t>(j) * I8;
    float acc[R] = {};
    for (int i = lane; i < I8; i += 32) {
      const uint4 xv = xj[i];
#pragma unroll
      for (int r = 0; r < R; ++r)
        if (r < rows) acc[r] = dot8<T>(wj[r * I8 + i], xv, acc[r]);
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const float o = warp_sum(acc[r]);
      if (lane == 0) red[j][r] = to_f32(from_f32<T>(o));  // the down output as dt, as the combine reads it
    }
  }
  __syncthreads();
  if (static_cast<int>(threadIdx.x) < rows) {
    float total = 0.f;
    for (int j = 0; j < Kt; ++j) total += red[j][threadIdx.x] * wt[j];
    float* yr = y + static_cast<int64_t>(t) * C + c0 + threadIdx.x;
    *yr = accumulate ? *yr + total : total;
  }
}

template <class Tt, int R>
void launch_staged(const void* act, const void* down, const int32_t* expert, const float* weight, int64_t T,
                   int64_t K, int64_t C, int64_t I, float* y, bool accumulate, cudaStream_t s) {
  // Once per kernel and GPU: the shared-memory limit, and the carveout at its maximum so that two
  // blocks share an SM (the copies bypass L1: cp.async.cg).
  once_per_device(reinterpret_cast<const void*>(pair_down_staged_kernel<Tt, R>), [] {
    VLM_CUDA_CHECK(cudaFuncSetAttribute(pair_down_staged_kernel<Tt, R>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(kStagedSmemBytes)));
    VLM_CUDA_CHECK(cudaFuncSetAttribute(pair_down_staged_kernel<Tt, R>,
                                        cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared));
  });
  const dim3 grid(static_cast<unsigned>((C + R - 1) / R), static_cast<unsigned>(T));
  pair_down_staged_kernel<Tt, R><<<grid, kStThreads, static_cast<size_t>(staged_smem(K, I, R)), s>>>(
      static_cast<const Tt*>(act), static_cast<const Tt*>(down), expert, weight, static_cast<int>(K),
      static_cast<int>(C), static_cast<int>(I), y, accumulate);
}

template <class Tt, int R>
MoeStagedShape staged_shape(int64_t T, int64_t K, int64_t C, int64_t I) {
  MoeStagedShape sh;
  sh.rows = R;
  sh.blocks = (C + R - 1) / R * T;
  sh.smem = staged_smem(K, I, R);
  int n = 0;
  VLM_CUDA_CHECK(cudaFuncSetAttribute(pair_down_staged_kernel<Tt, R>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(kStagedSmemBytes)));
  VLM_CUDA_CHECK(cudaFuncSetAttribute(pair_down_staged_kernel<Tt, R>, cudaFuncAttributePreferredSharedMemoryCarveout,
                                      cudaSharedmemCarveoutMaxShared));
  VLM_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, pair_down_staged_kernel<Tt, R>, kStThreads,
                                                               static_cast<size_t>(sh.smem)));
  sh.blocks_per_sm = n;
  return sh;
}

template <class Tt>
void launch_rows(int R, const void* act, const void* down, const int32_t* expert, const float* weight, int64_t T,
                 int64_t K, int64_t C, int64_t I, float* y, bool accumulate, cudaStream_t s) {
  switch (R) {
    case 8: launch_staged<Tt, 8>(act, down, expert, weight, T, K, C, I, y, accumulate, s); break;
    case 4: launch_staged<Tt, 4>(act, down, expert, weight, T, K, C, I, y, accumulate, s); break;
    case 2: launch_staged<Tt, 2>(act, down, expert, weight, T, K, C, I, y, accumulate, s); break;
    default: launch_staged<Tt, 1>(act, down, expert, weight, T, K, C, I, y, accumulate, s); break;
  }
}

}  // namespace

bool moe_pair_down_staged_supported(int64_t K, int64_t I) { return K >= 1 && I > 0 && staged_rows(K, I) > 0; }

MoeStagedShape moe_pair_down_staged_shape(int64_t T, int64_t K, int64_t C, int64_t I, DType dt) {
  if (!moe_pair_down_staged_supported(K, I)) return {};
  const int R = staged_rows(K, I);
  auto pick = [&](auto tag) {
    using Tt = decltype(tag);
    switch (R) {
      case 8: return staged_shape<Tt, 8>(T, K, C, I);
      case 4: return staged_shape<Tt, 4>(T, K, C, I);
      case 2: return staged_shape<Tt, 2>(T, K, C, I);
      default: return staged_shape<Tt, 1>(T, K, C, I);
    }
  };
  return dt == DType::BF16 ? pick(__nv_bfloat16{}) : pick(__half{});
}

void moe_pair_down_combine_staged(const void* act, const void* down, const int32_t* expert, const float* weight,
                                  DType dt, int64_t T, int64_t K, int64_t C, int64_t I, float* y, bool accumulate,
                                  cudaStream_t s) {
  if (T < 0 || T > 65535 || K < 1 || K > kMoeMaxTopK || C < 1 || C > (1 << 20) || I > (1 << 20) ||
      !moe_decode_supported(C, I, dt) || !moe_pair_down_staged_supported(K, I))
    precondition_failed(
        "moe_pair_down_combine_staged: 0 <= T <= 65535, 1 <= K <= 32, 16-bit dt, C and I multiples of 8, "
        "K x I x 2 x 2 bytes <= 110,592 (moe_pair_down_staged_supported)");
  if ((reinterpret_cast<uintptr_t>(act) | reinterpret_cast<uintptr_t>(down)) % 16 != 0)
    precondition_failed("moe_pair_down_combine_staged: act and down 16-byte aligned");
  if (T == 0) return;
  const int R = staged_rows(K, I);
  if (dt == DType::BF16) launch_rows<__nv_bfloat16>(R, act, down, expert, weight, T, K, C, I, y, accumulate, s);
  else launch_rows<__half>(R, act, down, expert, weight, T, K, C, I, y, accumulate, s);
  VLM_CUDA_CHECK_LAUNCH();
}

}  // namespace vlm::cuda
