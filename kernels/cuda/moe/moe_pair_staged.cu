// The staged pair GEMVs (moe_decode.h 2'. and 3'.): moe_pair_gate_up_staged and
// moe_pair_down_combine_staged, each the same sums in the same order as its warp-per-output twin
// in moe_pair_gemv.cu (equal bits), with every weight byte a block needs copied into shared memory
// by cp.async at the block's start.
//
// moe_pair_down_combine_staged (3'.): the down product of a few tokens with
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
//
// moe_pair_gate_up_staged (2'., opt-in: VLM_MOE_DECODE=staged): a block of 8 warps owns R
// consecutive columns n0..n0+R of one pair p (R = 12 at C = 2048: 64 x 8 = 512 blocks, 2 per SM,
// ~1.9 waves) and copies their gate rows and up rows (each R x C contiguous) and h[t] (C) into
// shared memory, (2R + 1) x C x dt bytes (102,400 B); warp w then sums columns w, w + 8 (lane l:
// vectors l, l + 32, ... in order, gate and up apart, as moe_pair_gate_up's lanes), the butterfly,
// silu(round(g)) * round(u). Unlike the down product it cannot run in one wave (50 MB over 132 SMs
// x 2 x 100 KB), so whether it beats the register form (69 % of the read rate in session 18) is
// for bench_cuda_moe's "kernel gate_up form=staged" row to say.
#include <algorithm>
#include <cstdint>

#include "kernels/cuda/attention/cuda_attention_common.cuh"  // once_per_device
#include "kernels/cuda/attention/mma_tile.cuh"
#include "kernels/cuda/core/cuda_check.h"
#include "kernels/cuda/core/element.cuh"
#include "kernels/cuda/gemm/gemv_warp.cuh"
#include "kernels/cuda/moe/moe_decode.h"
#include "kernels/cuda/moe/moe_pair_staged.cuh"

namespace vlm::cuda {
namespace {

using gemv_detail::dot8;
using gemv_detail::silu_mul_of;
using gemv_detail::warp_sum;

constexpr int kStWarps = staged_detail::kWarps, kStThreads = staged_detail::kThreads;
constexpr int kMaxK = static_cast<int>(kMoeMaxTopK);
// Dynamic shared memory per block at most: two blocks share an SM (228 KB on sm_90, 1 KB of each
// block reserved, plus the static red / base arrays below).
constexpr int64_t kStagedSmemBytes = 110592;

int64_t staged_smem(int64_t K, int64_t I, int R) { return K * (R + 1) * I * 2; }

// Once per kernel and GPU: the shared-memory limit, and the carveout at its maximum so that two
// blocks share an SM (the copies bypass L1: cp.async.cg).
template <class Kernel>
void opt_in(Kernel* kernel) {
  once_per_device(reinterpret_cast<const void*>(kernel), [&] {
    VLM_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kStagedSmemBytes)));
    VLM_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared));
  });
}

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
  for (int j = warp; j < Kt; j += kStWarps)
    staged_detail::sum_pair<T, R>(sw + static_cast<int64_t>(j) * R * I8, sx + static_cast<int64_t>(j) * I8, rows, I8,
                                  lane, red[j]);
  __syncthreads();
  staged_detail::combine<R>(red, wt, Kt, rows, y + static_cast<int64_t>(t) * C + c0, accumulate);
}

template <class Tt, int R>
void launch_staged(const void* act, const void* down, const int32_t* expert, const float* weight, int64_t T,
                   int64_t K, int64_t C, int64_t I, float* y, bool accumulate, cudaStream_t s) {
  opt_in(pair_down_staged_kernel<Tt, R>);
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
  opt_in(pair_down_staged_kernel<Tt, R>);
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

// gate|up: (2R + 1) x C x 2 bytes; R the largest of 12, 8, 4, 2, 1 that fits, 0 if none does.
int64_t gate_up_smem(int64_t C, int R) { return (2 * R + 1) * C * 2; }
int gate_up_rows(int64_t C) {
  for (int R : {12, 8, 4, 2, 1})
    if (gate_up_smem(C, R) <= kStagedSmemBytes) return R;
  return 0;
}

// Block (blockIdx.x: columns [n0, n0 + R), blockIdx.y: pair p). Shared: sg [R][C] gate rows,
// su [R][C] up rows, sx [C] = h[p / k].
template <class T, int R>
__global__ void __launch_bounds__(kStThreads)
    pair_gate_up_staged_kernel(const T* __restrict__ h, const T* __restrict__ w, const int32_t* __restrict__ expert,
                               int Kt, int N, int C, T* __restrict__ act) {
  extern __shared__ __align__(16) unsigned char st_smem[];
  const int p = blockIdx.y, n0 = blockIdx.x * R, rows = min(R, N - n0), C8 = C / 8;
  const int64_t e = expert[p];
  const uint4* gsrc = reinterpret_cast<const uint4*>(w + (e * 2 * N + n0) * C);  // rows n0.. of the gate half
  const uint4* usrc = gsrc + static_cast<int64_t>(N) * C8;                         // the same rows of the up half
  const uint4* xsrc = reinterpret_cast<const uint4*>(h + static_cast<int64_t>(p / Kt) * C);
  uint4* sg = reinterpret_cast<uint4*>(st_smem);  // [R][C8]
  uint4* su = sg + R * C8;                         // [R][C8]
  uint4* sx = su + R * C8;                         // [C8]
  for (int v = threadIdx.x; v < C8; v += kStThreads) tile::cp_async16(sx + v, xsrc + v, 16);
  for (int v = threadIdx.x; v < rows * C8; v += kStThreads) {
    tile::cp_async16(sg + v, gsrc + v, 16);
    tile::cp_async16(su + v, usrc + v, 16);
  }
  tile::cp_async_commit();
  tile::cp_async_wait<0>();
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int r = warp; r < rows; r += kStWarps) {
    const uint4* gr = sg + r * C8;
    const uint4* ur = su + r * C8;
    float g = 0.f, u = 0.f;
    for (int i = lane; i < C8; i += 32) {
      const uint4 xv = sx[i];
      g = dot8<T>(gr[i], xv, g);
      u = dot8<T>(ur[i], xv, u);
    }
    g = warp_sum(g);
    u = warp_sum(u);
    if (lane == 0) act[static_cast<int64_t>(p) * N + n0 + r] = from_f32<T>(silu_mul_of<T>(g, u));
  }
}

template <class Tt, int R>
void launch_gate_up(const void* h, const void* w, const int32_t* expert, int64_t T, int64_t K, int64_t I, int64_t C,
                    void* act, cudaStream_t s) {
  opt_in(pair_gate_up_staged_kernel<Tt, R>);
  const dim3 grid(static_cast<unsigned>((I + R - 1) / R), static_cast<unsigned>(T * K));
  pair_gate_up_staged_kernel<Tt, R><<<grid, kStThreads, static_cast<size_t>(gate_up_smem(C, R)), s>>>(
      static_cast<const Tt*>(h), static_cast<const Tt*>(w), expert, static_cast<int>(K), static_cast<int>(I),
      static_cast<int>(C), static_cast<Tt*>(act));
}

template <class Tt>
void launch_gate_up_rows(int R, const void* h, const void* w, const int32_t* expert, int64_t T, int64_t K, int64_t I,
                         int64_t C, void* act, cudaStream_t s) {
  switch (R) {
    case 12: launch_gate_up<Tt, 12>(h, w, expert, T, K, I, C, act, s); break;
    case 8: launch_gate_up<Tt, 8>(h, w, expert, T, K, I, C, act, s); break;
    case 4: launch_gate_up<Tt, 4>(h, w, expert, T, K, I, C, act, s); break;
    case 2: launch_gate_up<Tt, 2>(h, w, expert, T, K, I, C, act, s); break;
    default: launch_gate_up<Tt, 1>(h, w, expert, T, K, I, C, act, s); break;
  }
}

}  // namespace

bool moe_pair_gate_up_staged_supported(int64_t C) { return C > 0 && gate_up_rows(C) > 0; }

void moe_pair_gate_up_staged(const void* h, const void* gate_up, const int32_t* expert, DType dt, int64_t T,
                             int64_t K, int64_t I, int64_t C, void* act, cudaStream_t s) {
  if (T < 0 || K < 1 || K > kMoeMaxTopK || T * K > 65535 || I < 1 || I > (1 << 20) || C > (1 << 20) ||
      !moe_decode_supported(C, I, dt) || !moe_pair_gate_up_staged_supported(C))
    precondition_failed(
        "moe_pair_gate_up_staged: T x K <= 65535, 1 <= K <= 32, 16-bit dt, C and I multiples of 8, 3 x C x 2 bytes "
        "<= 110,592 (moe_pair_gate_up_staged_supported)");
  if ((reinterpret_cast<uintptr_t>(h) | reinterpret_cast<uintptr_t>(gate_up)) % 16 != 0)
    precondition_failed("moe_pair_gate_up_staged: h and gate_up 16-byte aligned");
  if (T == 0) return;
  const int R = gate_up_rows(C);
  if (dt == DType::BF16) launch_gate_up_rows<__nv_bfloat16>(R, h, gate_up, expert, T, K, I, C, act, s);
  else launch_gate_up_rows<__half>(R, h, gate_up, expert, T, K, I, C, act, s);
  VLM_CUDA_CHECK_LAUNCH();
}

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
