// moe_grouped_mma_gemv (moe_cuda.h, step 3): the grouped products for few pairs per expert
// (decode) on tensor cores, weight rows as the 16-row side of mma.sync m16n8k16 and the expert's
// pairs as its 8 columns, so the product costs next to nothing and the kernel runs at the rate it
// streams the chosen experts' weights.
//
// Why not the warp GEMV (moe_grouped_gemv, one output column per warp, CUDA-core FMAs): at 64
// tokens (512 pairs over ~124 of 128 experts, ~4 pairs each) its down product gives each warp
// one 1.5 KB weight row (K = 768: 3 loads per lane) behind a chain of dependent index loads, so
// the SMs hold too few bytes in flight; and its FMA count grows with the pairs (8 pairs: half of
// the f32 FMA rate at the HBM rate), which caps it at ~8 pairs per expert.
//
// Block (column tile, y): y indexes the experts with pairs (moe_sort's active list; past their
// count: exit). The block owns 32 weight rows (two m16 tiles: gated, the gate rows and
// the up rows of 16 output columns, so the SiLU·mul pairs up in registers; ungated, 32 output
// columns) and splits K over its kMgWarps warps (chunk c of 32 k to warp c % kMgWarps). Lane
// (g = lane / 4, t = lane % 4) loads 16 bytes of weight rows g and g + 8 at k = 32c + 8t
// (streamed past L1, kMgUnroll chunks of each row in flight) and 16 bytes of pair g's x row at
// the same k (through L1: the block's warps share them); element 8t + j of the chunk is the
// mma's k index 2t + (j & 1) + 8 ((j >> 1) & 1) of step j / 4 for both operands, a permutation
// of k applied to both sides, so the dot products are unchanged. Pairs go 32 at a time (four
// groups of 8: four accumulator tiles per m16 tile; groups past the expert's pairs skipped,
// block-uniform), or 8 at a time when P <= E; the warps' partial sums meet in shared memory,
// summed in warp order, and warp w finishes pair group w (epilogue, store).
// kM = 1 (mma_rows 16, for a few tokens: twice the blocks, each half the rows, so the ~20 us
// decode product of 1 token is spread over more SMs sooner): the block owns one m16 tile of 16
// weight rows: gated, the gate rows of 8 output columns (mma rows g) and their up rows (rows
// g + 8), so c0/c2 and c1/c3 pair up; ungated, 16 output columns. Each output's sum is the same
// sequence of mma steps and the same warp-order reduction as with kM = 2: equal bit for bit.
#include <algorithm>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "kernels/cuda/attention/mma_tile.cuh"
#include "kernels/cuda/core/element.cuh"
#include "kernels/cuda/gemm/gemv_warp.cuh"
#include "kernels/cuda/moe/moe_cuda.h"

namespace vlm::cuda {
namespace {

using tile::mma;

constexpr int kMgWarps = 4, kMgThreads = 32 * kMgWarps;
constexpr int kMgUnroll = 4;  // 32-k chunks of each weight row in flight per warp
// Pair groups of 8 per pass over the weights (kGroups): 4 (32 pairs), or 1 (8 pairs) when there
// is at most one pair per expert on average (P <= E: a few tokens), whose fewer accumulators let
// 4 blocks share an SM instead of 3.
constexpr int kMgGroupsMany = 4, kMgGroupsFew = 1;

__device__ __forceinline__ float silu(float g) { return g / (1.0f + expf(-g)); }

__device__ __forceinline__ int64_t x_row(const MoeGroupedArgs& a, int r) {
  return a.x_rows ? a.x_rows[r] / a.x_div : r;
}

template <class T, int kG, int kGroups, int kM>
__global__ void __launch_bounds__(kMgThreads) grouped_mma_gemv_kernel(MoeGroupedArgs a) {
  constexpr int kPassPairs = 8 * kGroups, kAcc = kM * kGroups * 4;  // accumulators: [m tile][group][c0..c3]
  const int E = static_cast<int>(a.E);
  const int busy = a.active[E], e = a.active[blockIdx.y];  // both loads at once (blockIdx.y < E)
  if (static_cast<int>(blockIdx.y) >= busy) return;
  const int s0 = a.offsets[e], s1 = a.offsets[e + 1];  // s0 < s1: an expert with pairs
  const int N = static_cast<int>(a.N), K = static_cast<int>(a.K);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  constexpr int kCols = (kG == 2 ? 8 : 16) * kM;  // output columns per block
  const int n0 = blockIdx.x * kCols;
  const T* wbase = static_cast<const T*>(a.w) + static_cast<int64_t>(e) * kG * N * K;
  const T* wr[kM][2];  // [m tile][row g, g + 8]; null past N
#pragma unroll
  for (int mt = 0; mt < kM; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      // kM = 2: gated, m tile mt = gate (0) or up (1) rows of columns n0 + g + 8h; ungated,
      // columns n0 + 16 mt + g + 8h. kM = 1: gated, h = gate (0) or up (1) of column n0 + g.
      const int col = kM == 1 && kG == 2 ? n0 + g : kG == 2 ? n0 + g + 8 * h : n0 + 16 * mt + g + 8 * h;
      const int part = kM == 1 ? (kG == 2 ? h : 0) : (kG == 2 ? mt : 0);
      const int64_t row = static_cast<int64_t>(part) * N + col;
      wr[mt][h] = col < N ? wbase + row * K : nullptr;
    }
  const T* x = static_cast<const T*>(a.x);
  T* out = static_cast<T*>(a.out);
  const int nchunks = (K + 31) / 32;
  const uint4 zero = make_uint4(0, 0, 0, 0);
  __shared__ float red[kMgWarps][kAcc][32];  // the warps' partial sums [warp][accumulator][lane]
  for (int p0 = s0; p0 < s1; p0 += kPassPairs) {
    const int m = min(kPassPairs, s1 - p0);  // this pass's pairs (block-uniform)
    const T* xr[kGroups];                    // pair gi * 8 + g's x row; null past m
#pragma unroll
    for (int gi = 0; gi < kGroups; ++gi) xr[gi] = gi * 8 + g < m ? x + x_row(a, p0 + gi * 8 + g) * K : nullptr;
    float acc[kM][kGroups][4] = {};
    for (int c0 = warp; c0 < nchunks; c0 += kMgWarps * kMgUnroll) {
      uint4 wv[kMgUnroll][kM][2];
#pragma unroll
      for (int u = 0; u < kMgUnroll; ++u) {
        const int c = c0 + u * kMgWarps, k = c * 32 + 8 * t;
        const bool ok = c < nchunks && k < K;
#pragma unroll
        for (int mt = 0; mt < kM; ++mt)
#pragma unroll
          for (int h = 0; h < 2; ++h)
            wv[u][mt][h] = ok && wr[mt][h] ? gemv_detail::load_stream(reinterpret_cast<const uint4*>(wr[mt][h] + k))
                                           : zero;
      }
#pragma unroll
      for (int u = 0; u < kMgUnroll; ++u) {
        const int c = c0 + u * kMgWarps, k = c * 32 + 8 * t;
        if (c >= nchunks) break;  // warp-uniform
#pragma unroll
        for (int gi = 0; gi < kGroups; ++gi) {
          if (gi * 8 >= m) break;  // block-uniform
          const uint4 xv = xr[gi] && k < K ? __ldg(reinterpret_cast<const uint4*>(xr[gi] + k)) : zero;
#pragma unroll
          for (int mt = 0; mt < kM; ++mt) {
            const uint4 &lo = wv[u][mt][0], &hi = wv[u][mt][1];
            const uint32_t a0[4] = {lo.x, hi.x, lo.y, hi.y}, a1[4] = {lo.z, hi.z, lo.w, hi.w};
            mma<T>(acc[mt][gi], a0, xv.x, xv.y);
            mma<T>(acc[mt][gi], a1, xv.z, xv.w);
          }
        }
      }
    }
#pragma unroll
    for (int mt = 0; mt < kM; ++mt)
#pragma unroll
      for (int gi = 0; gi < kGroups; ++gi)
#pragma unroll
        for (int c = 0; c < 4; ++c) red[warp][(mt * kGroups + gi) * 4 + c][lane] = acc[mt][gi][c];
    __syncthreads();
    if (warp < kGroups && warp * 8 < m) {  // warp w finishes pair group w
      const int gi = warp;
      float v[kM][4];
#pragma unroll
      for (int mt = 0; mt < kM; ++mt)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          float s = 0.f;
#pragma unroll
          for (int w = 0; w < kMgWarps; ++w) s += red[w][(mt * kGroups + gi) * 4 + c][lane];
          v[mt][c] = s;
        }
#pragma unroll
      for (int c = 0; c < 4; ++c) {  // c0, c1: row g; c2, c3: row g + 8; columns (pairs) 2t, 2t + 1
        const int pair = gi * 8 + 2 * t + (c & 1), h = c >> 1;
        if (pair >= m) continue;
        T* o = out + static_cast<int64_t>(p0 + pair) * N;
        if (kM == 1 && kG == 2) {  // c0 / c1 the gate, c2 / c3 the up value of column n0 + g
          const int col = n0 + g;
          if (h == 0 && col < N)
            o[col] = from_f32<T>(silu(to_f32(from_f32<T>(v[0][c]))) * to_f32(from_f32<T>(v[0][(c + 2) & 3])));
        } else if (kM == 1) {
          const int col = n0 + g + 8 * h;
          if (col < N) o[col] = from_f32<T>(v[0][c]);
        } else if (kG == 2) {
          const int col = n0 + g + 8 * h;
          if (col < N)
            o[col] = from_f32<T>(silu(to_f32(from_f32<T>(v[0][c]))) * to_f32(from_f32<T>(v[kM - 1][c])));
        } else {
#pragma unroll
          for (int mt = 0; mt < kM; ++mt) {
            const int col = n0 + 16 * mt + g + 8 * h;
            if (col < N) o[col] = from_f32<T>(v[mt][c]);
          }
        }
      }
    }
    __syncthreads();  // red is rewritten by the next pass
  }
}
static_assert(kMgGroupsMany <= kMgWarps, "warp w finishes pair group w");

}  // namespace

void moe_grouped_mma_gemv(const MoeGroupedArgs& a, DType dt, cudaStream_t s) {
  if (a.P < 0 || a.E < 1 || a.N < 1 || a.K < 1 || a.x_div < 1 || a.P > (1ll << 30) || a.N > (1 << 30) ||
      a.K > (1 << 30))
    precondition_failed("moe_grouped_mma_gemv: P >= 0, E, N, K >= 1");
  if (!moe_grouped_fast_supported(a.K, dt)) precondition_failed("moe_grouped_mma_gemv: 16-bit dt and K % 8 == 0");
  if (a.P == 0) return;
  static const int env_rows = [] {
    const char* v = std::getenv("VLM_MOE_MMA_ROWS");
    return v != nullptr && std::string(v) == "16" ? 16 : 32;
  }();
  if (a.mma_rows != 0 && a.mma_rows != 16 && a.mma_rows != 32) precondition_failed("moe_grouped_mma_gemv: mma_rows");
  const bool rows16 = (a.mma_rows != 0 ? a.mma_rows : env_rows) == 16;
  const int64_t cols = (a.gated ? 8 : 16) * (rows16 ? 1 : 2);  // output columns per block
  const dim3 grid(static_cast<unsigned>((a.N + cols - 1) / cols), static_cast<unsigned>(std::min(a.P, a.E)));
  auto pick = [&](auto tag, auto m_tag) {
    using T = decltype(tag);
    constexpr int kM = decltype(m_tag)::value;
    const bool few = a.P <= a.E;
    if (a.gated && few) grouped_mma_gemv_kernel<T, 2, kMgGroupsFew, kM><<<grid, kMgThreads, 0, s>>>(a);
    else if (a.gated) grouped_mma_gemv_kernel<T, 2, kMgGroupsMany, kM><<<grid, kMgThreads, 0, s>>>(a);
    else if (few) grouped_mma_gemv_kernel<T, 1, kMgGroupsFew, kM><<<grid, kMgThreads, 0, s>>>(a);
    else grouped_mma_gemv_kernel<T, 1, kMgGroupsMany, kM><<<grid, kMgThreads, 0, s>>>(a);
  };
  auto launch = [&](auto tag) {
    if (rows16) pick(tag, std::integral_constant<int, 1>{});
    else pick(tag, std::integral_constant<int, 2>{});
  };
  if (dt == DType::BF16) launch(__nv_bfloat16{});
  else launch(__half{});
  VLM_CUDA_CHECK_LAUNCH();
}

}  // namespace vlm::cuda
