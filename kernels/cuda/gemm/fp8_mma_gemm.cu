#include "kernels/cuda/gemm/fp8_mma_gemm.h"

#include <algorithm>
#include <type_traits>

#include "kernels/cuda/core/cuda_check.h"
#include "kernels/cuda/gemm/fp8_mma_common.cuh"
#include "kernels/cuda/gemm/gemv_warp.cuh"

namespace vlm::cuda {
namespace {

using gemv_detail::load_stream;
using fp8_mma_detail::dispatch_tiles;
using fp8_mma_detail::fp8_mma_reduce_kernel;
using fp8_mma_detail::mma_e4m3;
using fp8_mma_detail::store_out;
using fp8_mma_detail::store_silu;

constexpr int kWarps = 4, kThreads = 32 * kWarps, kRowsPerBlock = 16 * kWarps;
constexpr int kStepBytes = 64;  // one k-step: 64 columns, a 16-byte vector per lane of a quad

// grid (ceil(R / 64), S), block 4 warps. Warp w owns output rows r0 = 64 blockIdx.x + 16 w .. +15
// (silu: gate rows r0.. and up rows R + r0..) over the k-steps [s0, s1) of split blockIdx.y, and all
// M tokens: MT tiles of 8 (token 8 j + g; loads clamp rows to R - 1 and tokens to M - 1, stores
// skip them). Lane (g = lane / 4, t = lane % 4) loads bytes [16 t, 16 t + 16) of each 64-column
// step from weight rows r0 + g and r0 + g + 8 and from its tokens' x rows; chunk c (0, 1) of the
// step takes bytes [8 c, 8 c + 4) as the fragments' k 4t..4t+3 and [8 c + 4, 8 c + 8) as k
// 4t+16..4t+19 on both operands (PTX's m16n8k32 layouts): every column of the step exactly once.
template <int MT, bool kSilu, class TO>
__global__ void __launch_bounds__(kThreads)
fp8_mma_kernel(const uint8_t* __restrict__ xq, const float* __restrict__ xs, const uint8_t* __restrict__ w,
               const float* __restrict__ ws, const __nv_bfloat16* __restrict__ bias, TO* y, float* partial,
               bool accumulate, int M, int R, int K, int steps_per_split) {
  constexpr int RT = kSilu ? 2 : 1;  // row tiles per warp
  constexpr int U = kSilu ? 2 : 4;   // k-steps of weights in flight
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int r0 = blockIdx.x * kRowsPerBlock + warp * 16;
  if (r0 >= R) return;  // the whole warp (nothing block-wide below)
  const int K64 = K / kStepBytes;
  const int s0 = blockIdx.y * steps_per_split, s1 = min(K64, s0 + steps_per_split);
  const uint4* wrow[RT][2];
#pragma unroll
  for (int rt = 0; rt < RT; ++rt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = min(r0 + g + 8 * h, R - 1) + rt * R;
      wrow[rt][h] = reinterpret_cast<const uint4*>(w + int64_t(r) * K) + t;
    }
  const uint4* xrow[MT];
#pragma unroll
  for (int j = 0; j < MT; ++j) xrow[j] = reinterpret_cast<const uint4*>(xq + int64_t(min(8 * j + g, M - 1)) * K) + t;

  float acc[RT][MT][4];
#pragma unroll
  for (int rt = 0; rt < RT; ++rt)
#pragma unroll
    for (int j = 0; j < MT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[rt][j][e] = 0.f;

  uint4 wbuf[U][RT][2];  // wbuf[u]: step s + u of the loop below
#pragma unroll
  for (int u = 0; u < U; ++u)
#pragma unroll
    for (int rt = 0; rt < RT; ++rt)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        wbuf[u][rt][h] = s0 + u < s1 ? load_stream(wrow[rt][h] + 4 * (s0 + u)) : make_uint4(0, 0, 0, 0);

  for (int s = s0; s < s1; s += U) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int st = s + u;
      if (st >= s1) break;
      uint4 wv[RT][2];
#pragma unroll
      for (int rt = 0; rt < RT; ++rt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          wv[rt][h] = wbuf[u][rt][h];
          if (st + U < s1) wbuf[u][rt][h] = load_stream(wrow[rt][h] + 4 * (st + U));
        }
#pragma unroll
      for (int j = 0; j < MT; ++j) {
        const uint4 xv = __ldg(xrow[j] + 4 * st);
#pragma unroll
        for (int rt = 0; rt < RT; ++rt) {
          mma_e4m3(acc[rt][j], wv[rt][0].x, wv[rt][1].x, wv[rt][0].y, wv[rt][1].y, xv.x, xv.y);
          mma_e4m3(acc[rt][j], wv[rt][0].z, wv[rt][1].z, wv[rt][0].w, wv[rt][1].w, xv.z, xv.w);
        }
      }
    }
  }

  // acc[rt][j][e]: weight row r0 + g + 8 (e / 2) of row tile rt, token 8 j + 2 t + e % 2.
  const int cols = RT * R;
#pragma unroll
  for (int j = 0; j < MT; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int n = r0 + g + 8 * (e / 2), m = 8 * j + 2 * t + e % 2;
      if (n >= R || m >= M) continue;
      if (partial) {
        float* p = partial + (int64_t(blockIdx.y) * M + m) * cols;
#pragma unroll
        for (int rt = 0; rt < RT; ++rt) p[rt * R + n] = acc[rt][j][e];
      } else if constexpr (kSilu) {
        store_silu(acc[0][j][e], acc[RT - 1][j][e], xs, ws, bias, reinterpret_cast<__nv_bfloat16*>(y), m, n, R);
      } else {
        store_out<TO>(acc[0][j][e], xs, ws, bias, y, accumulate, m, n, R);
      }
    }
}

// Blocks of the kernel resident per SM (the F32-output form stands for both outputs: their
// register counts match), learned once per kernel.
template <int MT, bool kSilu>
int resident_blocks() {
  static const int n = [] {
    int v = 1;
    using TO = std::conditional_t<kSilu, __nv_bfloat16, float>;
    VLM_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&v, fp8_mma_kernel<MT, kSilu, TO>, kThreads, 0));
    return std::max(v, 1);
  }();
  return n;
}

int blocks_per_sm(int64_t M, bool silu) {
  int n = 1;
  dispatch_tiles(M, [&](auto tiles) {
    constexpr int MT = decltype(tiles)::value;
    n = silu ? resident_blocks<MT, true>() : resident_blocks<MT, false>();
  });
  return n;
}

// Splits of K (in 64-column steps) for R output rows: the S (1..16, at least 4 steps a split) of
// least modelled time, waves of resident blocks x steps per block, a split paying ~M / 16 steps
// for its partial sums (written and read back through L2).
struct Split {
  int S, steps;
};
Split choose_split(int64_t M, int64_t R, int64_t K, bool silu) {
  int dev = 0, sms = 132;
  VLM_CUDA_CHECK(cudaGetDevice(&dev));
  VLM_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  const int64_t tiles = (R + kRowsPerBlock - 1) / kRowsPerBlock, K64 = K / kStepBytes;
  const int64_t cap = int64_t(sms) * blocks_per_sm(M, silu);
  int64_t best_S = 1, best_cost = -1;
  for (int64_t S = 1; S <= std::max<int64_t>(1, K64 / 4) && S <= 16; ++S) {
    const int64_t steps = (K64 + S - 1) / S, waves = (tiles * S + cap - 1) / cap;
    const int64_t cost = waves * (16 * steps + (S > 1 ? M : 0));  // in 1/16 steps
    if (best_cost < 0 || cost < best_cost) best_S = S, best_cost = cost;
  }
  const int64_t steps = (K64 + best_S - 1) / best_S;
  return {static_cast<int>((K64 + steps - 1) / steps), static_cast<int>(steps)};
}

void check(int64_t M, int64_t R, int64_t K, const float* partial, bool silu) {
  if (!fp8_mma_supported(M, K)) precondition_failed("fp8_mma_gemm: M in [1, kFp8MmaMaxRows], K % 64 == 0");
  if (R >= (int64_t(1) << 30) || K >= (int64_t(1) << 31))
    precondition_failed("fp8_mma_gemm: N below 2^30, K below 2^31");
  if (!partial && fp8_mma_partial_floats(M, (silu ? 2 : 1) * R, K, silu) > 0)
    precondition_failed("fp8_mma_gemm: a split product without its partial buffer");
}

template <bool kSilu, class TO>
void launch(const uint8_t* xq, const float* xs, const uint8_t* wq, const float* ws, const void* bias, void* y,
            bool accumulate, int64_t M, int64_t R, int64_t K, float* partial, cudaStream_t s) {
  const Split sp = choose_split(M, R, K, kSilu);
  float* part = sp.S > 1 ? partial : nullptr;
  const dim3 grid(static_cast<unsigned>((R + kRowsPerBlock - 1) / kRowsPerBlock), static_cast<unsigned>(sp.S));
  const auto* b = static_cast<const __nv_bfloat16*>(bias);
  dispatch_tiles(M, [&](auto tiles) {
    constexpr int MT = decltype(tiles)::value;
    fp8_mma_kernel<MT, kSilu, TO><<<grid, kThreads, 0, s>>>(xq, xs, wq, ws, b, static_cast<TO*>(y), part, accumulate,
                                                          static_cast<int>(M), static_cast<int>(R),
                                                          static_cast<int>(K), sp.steps);
  });
  VLM_CUDA_CHECK_LAUNCH();
  if (!part) return;
  const int64_t outs = M * R;
  fp8_mma_reduce_kernel<kSilu, TO><<<static_cast<unsigned>((outs + 255) / 256), 256, 0, s>>>(
      part, sp.S, xs, ws, b, static_cast<TO*>(y), accumulate, static_cast<int>(M), static_cast<int>(R));
  VLM_CUDA_CHECK_LAUNCH();
}

}  // namespace

bool fp8_mma_supported(int64_t M, int64_t K) { return M >= 1 && M <= kFp8MmaMaxRows && K > 0 && K % 64 == 0; }

int64_t fp8_mma_partial_floats(int64_t M, int64_t cols, int64_t K, bool silu_mul) {
  const Split sp = choose_split(M, silu_mul ? cols / 2 : cols, K, silu_mul);
  return sp.S > 1 ? int64_t(sp.S) * M * cols : 0;
}

void fp8_mma_gemm(const uint8_t* xq, const float* x_scale, const uint8_t* wq, const float* w_scale, const void* bias,
                  void* y, DType out_dt, bool accumulate, int64_t M, int64_t N, int64_t K, float* partial,
                  cudaStream_t s) {
  check(M, N, K, partial, false);
  if (out_dt == DType::F32)
    launch<false, float>(xq, x_scale, wq, w_scale, bias, y, accumulate, M, N, K, partial, s);
  else if (out_dt == DType::BF16)
    launch<false, __nv_bfloat16>(xq, x_scale, wq, w_scale, bias, y, accumulate, M, N, K, partial, s);
  else
    precondition_failed("fp8_mma_gemm: output BF16 or F32");
}

void fp8_mma_gemm_silu_mul(const uint8_t* xq, const float* x_scale, const uint8_t* wq, const float* w_scale,
                           const void* bias, void* out, int64_t M, int64_t I, int64_t K, float* partial,
                           cudaStream_t s) {
  check(M, I, K, partial, true);
  launch<true, __nv_bfloat16>(xq, x_scale, wq, w_scale, bias, out, false, M, I, K, partial, s);
}

}  // namespace vlm::cuda
