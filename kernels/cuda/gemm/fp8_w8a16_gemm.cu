// fp8_w8a16_gemm: see fp8_w8a16_gemm.h for the layout and the contract.
#include "kernels/cuda/gemm/fp8_w8a16_gemm.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <type_traits>

#include "kernels/cuda/attention/mma_tile.cuh"
#include "kernels/cuda/core/cuda_check.h"
#include "kernels/cuda/core/element.cuh"
#include "kernels/cuda/gemm/fp8_dot.cuh"
#include "kernels/cuda/gemm/gemv_warp.cuh"

namespace vlm::cuda {
namespace {

using tile::mma;

constexpr int kWarps = 4, kThreads = 32 * kWarps;
constexpr int kChunk = 64;         // k per warp step: 16 bytes per lane
constexpr int kUnroll = 2;         // chunks of each weight row in flight per warp

// Two E4M3 bytes of w (bytes 2i, 2i + 1 for hi = i) as a bf16x2, exactly: the magnitude bits
// under bf16's exponent/mantissa (value * 2^-120), the sign on bf16's, then * 2^120 (exact).
__device__ __forceinline__ uint32_t e4m3x2_bf16x2(uint32_t w, bool hi) {
  const uint32_t t = __byte_perm(w, 0u, hi ? 0x3424u : 0x1404u);  // bytes at bits 8..15 and 24..31
  const uint32_t r = (t & 0x80008000u) | ((t >> 4) & 0x07f007f0u);
  const __nv_bfloat162 v = __hmul2(*reinterpret_cast<const __nv_bfloat162*>(&r), __nv_bfloat162(__float2bfloat16_rn(0x1p120f), __float2bfloat16_rn(0x1p120f)));
  return *reinterpret_cast<const uint32_t*>(&v);
}

template <class TO>
__device__ __forceinline__ void store_out(float sum, const float* ws, const TO* bias, TO* y, bool accumulate, int m,
                                          int n, int N) {
  float v = sum * ws[n];
  if (bias) v += to_f32(bias[n]);
  TO* o = y + int64_t(m) * N + n;
  if (accumulate) v += to_f32(*o);
  *o = from_f32<TO>(v);
}

// out[m, i] = silu(round(g)) * round(u), g / u the scaled gate / up sums + bias (bf16 [2I] or null).
__device__ __forceinline__ void store_silu(float g, float u, const float* ws, const __nv_bfloat16* bias,
                                           __nv_bfloat16* out, int m, int i, int I) {
  g = g * ws[i] + (bias ? __bfloat162float(bias[i]) : 0.f);
  u = u * ws[I + i] + (bias ? __bfloat162float(bias[I + i]) : 0.f);
  out[int64_t(m) * I + i] = __float2bfloat16_rn(gemv_detail::silu_mul_of<__nv_bfloat16>(g, u));
}

// Block (row tile x, split y), chunks [y * steps, (y + 1) * steps) of K. Plain: weight rows
// [32x, 32x + 32) (two m16 tiles), R = N output columns. kSilu: m tile 0 the gate rows
// [16x, 16x + 16), m tile 1 the up rows I + [16x, 16x + 16) (R = I outputs; wq has 2I rows), so
// the SiLU·mul pairs up in registers. part null: the epilogue here; else unscaled sums to
// part [S, M, N] (kSilu: [S, M, 2I], gate columns then up columns).
template <int kGroups, bool kSilu, class TO>
__global__ void __launch_bounds__(kThreads) w8a16_kernel(const __nv_bfloat16* __restrict__ x,
                                                         const uint8_t* __restrict__ wq, const float* __restrict__ ws,
                                                         const TO* __restrict__ bias, TO* y, float* part,
                                                         bool accumulate, int M, int R, int K, int steps) {
  constexpr int kAcc = 2 * kGroups * 4;  // [m tile][group][c0..c3]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  constexpr int kCols = kSilu ? 16 : 32;  // output columns per block
  const int n0 = blockIdx.x * kCols, N = kSilu ? 2 * R : R;
  const int nchunks = (K + kChunk - 1) / kChunk;
  const int cb = blockIdx.y * steps, ce = min(nchunks, cb + steps);
  const uint8_t* wr[2][2];  // [m tile][row g, g + 8]; null past N
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int col = kSilu ? n0 + g + 8 * h : n0 + 16 * mt + g + 8 * h;
      const int64_t row = kSilu ? int64_t(mt) * R + col : col;
      wr[mt][h] = col < R ? wq + row * K : nullptr;
    }
  const __nv_bfloat16* xr[kGroups];  // token gi * 8 + g's x row; null past M
#pragma unroll
  for (int gi = 0; gi < kGroups; ++gi) xr[gi] = gi * 8 + g < M ? x + int64_t(gi * 8 + g) * K : nullptr;
  const uint4 zero = make_uint4(0, 0, 0, 0);
  float acc[2][kGroups][4] = {};
  for (int c0 = cb + warp; c0 < ce; c0 += kWarps * kUnroll) {
    uint4 wv[kUnroll][2][2];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = c0 + u * kWarps, k = c * kChunk + 16 * t;
      const bool ok = c < ce && k < K;
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          wv[u][mt][h] =
              ok && wr[mt][h] ? gemv_detail::load_stream(reinterpret_cast<const uint4*>(wr[mt][h] + k)) : zero;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = c0 + u * kWarps, k = c * kChunk + 16 * t;
      if (c >= ce) break;  // warp-uniform
      uint32_t a[2][4][4];  // [m tile][step s][a0..a3]
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
        const uint4 &lo = wv[u][mt][0], &hi = wv[u][mt][1];
        const uint32_t wl[4] = {lo.x, lo.y, lo.z, lo.w}, wh[4] = {hi.x, hi.y, hi.z, hi.w};
#pragma unroll
        for (int s = 0; s < 4; ++s) {
          a[mt][s][0] = e4m3x2_bf16x2(wl[s], false);
          a[mt][s][1] = e4m3x2_bf16x2(wh[s], false);
          a[mt][s][2] = e4m3x2_bf16x2(wl[s], true);
          a[mt][s][3] = e4m3x2_bf16x2(wh[s], true);
        }
      }
#pragma unroll
      for (int gi = 0; gi < kGroups; ++gi) {
        if (gi * 8 >= M) break;  // block-uniform
        const bool okx = xr[gi] && k < K;
        const uint4 x0 = okx ? __ldg(reinterpret_cast<const uint4*>(xr[gi] + k)) : zero;
        const uint4 x1 = okx ? __ldg(reinterpret_cast<const uint4*>(xr[gi] + k + 8)) : zero;
        const uint32_t xv[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
#pragma unroll
        for (int s = 0; s < 4; ++s)
#pragma unroll
          for (int mt = 0; mt < 2; ++mt) mma<__nv_bfloat16>(acc[mt][gi], a[mt][s], xv[2 * s], xv[2 * s + 1]);
      }
    }
  }
  __shared__ float red[kWarps][kAcc][32];  // the warps' partial sums [warp][accumulator][lane]
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int gi = 0; gi < kGroups; ++gi)
#pragma unroll
      for (int c = 0; c < 4; ++c) red[warp][(mt * kGroups + gi) * 4 + c][lane] = acc[mt][gi][c];
  __syncthreads();
  for (int gi = warp; gi < kGroups; gi += kWarps) {  // warp w finishes groups w, w + 4
    if (gi * 8 >= M) break;
#pragma unroll
    for (int c = 0; c < 4; ++c) {  // c0, c1: row g; c2, c3: row g + 8; tokens 2t, 2t + 1
      const int m = gi * 8 + 2 * t + (c & 1);
      float v[2];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
        v[mt] = 0.f;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) v[mt] += red[w][(mt * kGroups + gi) * 4 + c][lane];
      }
      if (m >= M) continue;
      if constexpr (kSilu) {
        const int i = n0 + g + 8 * (c >> 1);
        if (i >= R) continue;
        if (part) {
          float* p = part + (int64_t(blockIdx.y) * M + m) * N;
          p[i] = v[0];
          p[R + i] = v[1];
        } else {
          store_silu(v[0], v[1], ws, reinterpret_cast<const __nv_bfloat16*>(bias),
                     reinterpret_cast<__nv_bfloat16*>(y), m, i, R);
        }
      } else {
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
          const int n = n0 + 16 * mt + g + 8 * (c >> 1);
          if (n >= N) continue;
          if (part) part[(int64_t(blockIdx.y) * M + m) * N + n] = v[mt];
          else store_out<TO>(v[mt], ws, bias, y, accumulate, m, n, N);
        }
      }
    }
  }
}

// The splits' partial sums [S, M, cols] added in split order, then the epilogue: one thread per
// output (m, n) of [M, R] (cols = R; kSilu: 2R, gate then up).
template <bool kSilu, class TO>
__global__ void w8a16_reduce_kernel(const float* __restrict__ part, int S, const float* __restrict__ ws,
                                    const TO* __restrict__ bias, TO* y, bool accumulate, int M, int R) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= int64_t(M) * R) return;
  const int m = static_cast<int>(i / R), n = static_cast<int>(i % R);
  const int cols = (kSilu ? 2 : 1) * R;
  float a = 0.f, b = 0.f;
  for (int sp = 0; sp < S; ++sp) {
    const float* p = part + (int64_t(sp) * M + m) * cols;
    a += p[n];
    if constexpr (kSilu) b += p[R + n];
  }
  if constexpr (kSilu)
    store_silu(a, b, ws, reinterpret_cast<const __nv_bfloat16*>(bias), reinterpret_cast<__nv_bfloat16*>(y), m, n, R);
  else store_out<TO>(a, ws, bias, y, accumulate, m, n, R);
}

template <class TO>
__global__ void w8a16_naive_kernel(const __nv_bfloat16* x, const uint8_t* w, const float* ws, const TO* bias, TO* y,
                                   bool accumulate, int N, int K) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x, m = blockIdx.y;
  if (n >= N) return;
  float v = 0.f;
  for (int k = 0; k < K; ++k)
    v = fmaf(gemv_detail::fp8_f32(w[int64_t(n) * K + k]), __bfloat162float(x[int64_t(m) * K + k]), v);
  store_out<TO>(v, ws, bias, y, accumulate, m, n, N);
}

// Calls f(std::integral_constant<int, G>) for G = ceil(M / 8) rounded up to 1, 2, 4 or 8.
template <class F>
void dispatch_groups(int64_t M, F&& f) {
  const int64_t g = (M + 7) / 8;
  if (g <= 1) f(std::integral_constant<int, 1>{});
  else if (g <= 2) f(std::integral_constant<int, 2>{});
  else if (g <= 4) f(std::integral_constant<int, 4>{});
  else f(std::integral_constant<int, 8>{});
}

// Blocks of the kernel resident per SM (the F32-output form stands for both), learned once per kernel.
template <int G, bool kSilu>
int resident_blocks() {
  static const int n = [] {
    int v = 1;
    using TO = std::conditional_t<kSilu, __nv_bfloat16, float>;
    VLM_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&v, w8a16_kernel<G, kSilu, TO>, kThreads, 0));
    return std::max(v, 1);
  }();
  return n;
}

// Splits of K (in 64-column chunks) for R outputs (tiles of 32, kSilu 16): the S (1..16, at least kWarps * kUnroll chunks a
// split) of least modelled time, waves of resident blocks x chunks per block, a split paying
// ~M / 16 chunks for its partial sums (written and read back through L2).
struct Split {
  int S, steps;
};
Split choose_split(int64_t M, int64_t R, int64_t K, bool silu) {
  int dev = 0, sms = 132;
  VLM_CUDA_CHECK(cudaGetDevice(&dev));
  VLM_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  int per_sm = 1;
  dispatch_groups(M, [&](auto groups) {
    constexpr int G = decltype(groups)::value;
    per_sm = silu ? resident_blocks<G, true>() : resident_blocks<G, false>();
  });
  const int64_t cols = silu ? 16 : 32, tiles = (R + cols - 1) / cols, chunks = (K + kChunk - 1) / kChunk;
  const int64_t cap = int64_t(sms) * per_sm;
  int64_t best_S = 1, best_cost = -1;
  for (int64_t S = 1; S <= std::max<int64_t>(1, chunks / (kWarps * kUnroll)) && S <= 16; ++S) {
    const int64_t steps = (chunks + S - 1) / S, waves = (tiles * S + cap - 1) / cap;
    const int64_t cost = waves * (16 * steps + (S > 1 ? M : 0));  // in 1/16 chunks
    if (best_cost < 0 || cost < best_cost) best_S = S, best_cost = cost;
  }
  const int64_t steps = (chunks + best_S - 1) / best_S;
  return {static_cast<int>((chunks + steps - 1) / steps), static_cast<int>(steps)};
}

void check(int64_t M, int64_t N, int64_t K, DType out_dt) {  // N: the weight's rows
  if (!fp8_w8a16_supported(M, K)) precondition_failed("fp8_w8a16_gemm: M in [1, kW8a16MaxRows], K % 16 == 0");
  if (N < 1 || N >= (int64_t(1) << 30) || K >= (int64_t(1) << 30))
    precondition_failed("fp8_w8a16_gemm: N in [1, 2^30), K below 2^30");
  if (out_dt != DType::BF16 && out_dt != DType::F32) precondition_failed("fp8_w8a16_gemm: out_dt BF16 or F32");
}

template <bool kSilu, class TO>
void launch(const void* x, const uint8_t* wq, const float* ws, const void* bias, void* y, bool accumulate, int64_t M,
            int64_t R, int64_t K, float* partial, cudaStream_t s) {
  const Split sp = choose_split(M, R, K, kSilu);
  if (sp.S > 1 && !partial) precondition_failed("fp8_w8a16_gemm: a split product without its partial buffer");
  float* part = sp.S > 1 ? partial : nullptr;
  const int64_t cols = kSilu ? 16 : 32;
  const dim3 grid(static_cast<unsigned>((R + cols - 1) / cols), static_cast<unsigned>(sp.S));
  const auto* xb = static_cast<const __nv_bfloat16*>(x);
  const auto* b = static_cast<const TO*>(bias);
  dispatch_groups(M, [&](auto groups) {
    constexpr int G = decltype(groups)::value;
    w8a16_kernel<G, kSilu, TO><<<grid, kThreads, 0, s>>>(xb, wq, ws, b, static_cast<TO*>(y), part, accumulate,
                                                          static_cast<int>(M), static_cast<int>(R),
                                                          static_cast<int>(K), sp.steps);
  });
  VLM_CUDA_CHECK_LAUNCH();
  if (!part) return;
  w8a16_reduce_kernel<kSilu, TO><<<gemv_detail::blocks(M * R, 256), 256, 0, s>>>(
      part, sp.S, ws, b, static_cast<TO*>(y), accumulate, static_cast<int>(M), static_cast<int>(R));
  VLM_CUDA_CHECK_LAUNCH();
}

}  // namespace

bool fp8_w8a16_supported(int64_t M, int64_t K) { return M >= 1 && M <= kW8a16MaxRows && K > 0 && K % 16 == 0; }

int64_t fp8_w8a16_partial_floats(int64_t M, int64_t cols, int64_t K, bool silu_mul) {
  const Split sp = choose_split(M, silu_mul ? cols / 2 : cols, K, silu_mul);
  return sp.S > 1 ? int64_t(sp.S) * M * cols : 0;
}

void fp8_w8a16_gemm(const void* x, const uint8_t* wq, const float* w_scale, const void* bias, void* y, DType out_dt,
                    bool accumulate, int64_t M, int64_t N, int64_t K, float* partial, cudaStream_t s) {
  check(M, N, K, out_dt);
  if (out_dt == DType::F32) launch<false, float>(x, wq, w_scale, bias, y, accumulate, M, N, K, partial, s);
  else launch<false, __nv_bfloat16>(x, wq, w_scale, bias, y, accumulate, M, N, K, partial, s);
}

void fp8_w8a16_gemm_silu_mul(const void* x, const uint8_t* wq, const float* w_scale, const void* bias, void* out,
                             int64_t M, int64_t I, int64_t K, float* partial, cudaStream_t s) {
  check(M, 2 * I, K, DType::BF16);
  launch<true, __nv_bfloat16>(x, wq, w_scale, bias, out, false, M, I, K, partial, s);
}

void fp8_w8a16_naive(const void* x, const uint8_t* wq, const float* w_scale, const void* bias, void* y, DType out_dt,
                     bool accumulate, int64_t M, int64_t N, int64_t K, cudaStream_t s) {
  check(M, N, K, out_dt);
  const dim3 grid(gemv_detail::blocks(N, 128), static_cast<unsigned>(M));
  const auto* xb = static_cast<const __nv_bfloat16*>(x);
  if (out_dt == DType::F32)
    w8a16_naive_kernel<float><<<grid, 128, 0, s>>>(xb, wq, w_scale, static_cast<const float*>(bias),
                                                   static_cast<float*>(y), accumulate, static_cast<int>(N),
                                                   static_cast<int>(K));
  else
    w8a16_naive_kernel<__nv_bfloat16><<<grid, 128, 0, s>>>(xb, wq, w_scale, static_cast<const __nv_bfloat16*>(bias),
                                                           static_cast<__nv_bfloat16*>(y), accumulate,
                                                           static_cast<int>(N), static_cast<int>(K));
  VLM_CUDA_CHECK_LAUNCH();
}

}  // namespace vlm::cuda
