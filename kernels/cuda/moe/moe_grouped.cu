// The grouped products of the mixture-of-experts block (moe_cuda.h, step 3): tensor-core row
// tiles over the sorted slots (prefill), per-expert warp GEMVs (decode), and the naive reference.
#include <mma.h>

#include <algorithm>

#include "kernels/cuda/core/element.cuh"
#include "kernels/cuda/gemm/gemv_warp.cuh"
#include "kernels/cuda/moe/moe_cuda.h"

namespace vlm::cuda {
namespace {

constexpr int kBM = kMoeTileRows, kBN = 64, kBK = 64, kTileThreads = 128;  // 4 warps, 32 x 32 each
constexpr int kLdAB = kBK + 8;                                            // 16-bit elements per smem row
constexpr int kLdC = kBN + 4;                                             // floats per staging row
constexpr int kGemvWarps = 8, kGemvRows = 8;                              // columns per block, pairs per pass

__device__ __forceinline__ float silu(float g) { return g / (1.0f + expf(-g)); }

// The row of x that slot r reads.
__device__ __forceinline__ int64_t x_row(const MoeGroupedArgs& a, int r) {
  return a.x_rows ? a.x_rows[r] / a.x_div : r;
}

// The largest i in [0, n) with v[i] <= key (v ascending, v[0] <= key).
__device__ __forceinline__ int last_at_most(const int32_t* v, int n, int key) {
  int lo = 0, hi = n - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (v[mid] <= key) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

template <class T>
__device__ __forceinline__ float epilogue(float g, float u, bool gated) {
  if (!gated) return g;
  return silu(to_f32(from_f32<T>(g))) * to_f32(from_f32<T>(u));
}

// Block (tile, column tile): tile -> its expert by tile_starts, kBM slots of that expert, kBN
// output columns (and the same columns of the up rows when gated); K in steps of kBK through
// shared memory, WMMA 16x16x16 with f32 accumulators, staged through shared memory for the
// epilogue.
template <class T, int kG>
__global__ void __launch_bounds__(kTileThreads) grouped_tc_kernel(MoeGroupedArgs a) {
  using namespace nvcuda;
  const int E = static_cast<int>(a.E), N = static_cast<int>(a.N), K = static_cast<int>(a.K);
  const int tile = blockIdx.x;
  if (tile >= a.tile_starts[E]) return;
  const int e = last_at_most(a.tile_starts, E, tile);
  const int r0 = a.offsets[e] + (tile - a.tile_starts[e]) * kBM, r1 = min(r0 + kBM, a.offsets[e + 1]);
  const int n0 = blockIdx.y * kBN;
  constexpr int kTiles = (kBM + kG * kBN) * kLdAB * 2, kStage = kG * kBM * kLdC * 4;
  __shared__ __align__(128) unsigned char smem[kTiles > kStage ? kTiles : kStage];
  __shared__ int64_t rows[kBM];
  T* sa = reinterpret_cast<T*>(smem);     // [kBM][kLdAB]
  T* sb = sa + kBM * kLdAB;               // [kG][kBN][kLdAB]
  float* sc = reinterpret_cast<float*>(smem);  // [kG][kBM][kLdC], after the K loop
  const int tid = threadIdx.x, warp = tid / 32, wm = warp / 2, wn = warp % 2;
  if (tid < kBM) rows[tid] = r0 + tid < r1 ? x_row(a, r0 + tid) : -1;
  __syncthreads();
  const T* x = static_cast<const T*>(a.x);
  const T* w = static_cast<const T*>(a.w) + static_cast<int64_t>(e) * kG * N * K;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[kG][2][2];
#pragma unroll
  for (int g = 0; g < kG; ++g)
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[g][i][j], 0.0f);
  constexpr int kVecs = kBK / 8;  // 16-byte vectors per tile row
  for (int k0 = 0; k0 < K; k0 += kBK) {
    for (int v = tid; v < kBM * kVecs; v += kTileThreads) {
      const int row = v / kVecs, col = (v % kVecs) * 8;
      uint4 val = make_uint4(0, 0, 0, 0);
      if (rows[row] >= 0 && k0 + col < K) val = *reinterpret_cast<const uint4*>(x + rows[row] * K + k0 + col);
      *reinterpret_cast<uint4*>(sa + row * kLdAB + col) = val;
    }
    for (int v = tid; v < kG * kBN * kVecs; v += kTileThreads) {
      const int g = v / (kBN * kVecs), rem = v % (kBN * kVecs), row = rem / kVecs, col = (rem % kVecs) * 8;
      const int n = n0 + row;
      uint4 val = make_uint4(0, 0, 0, 0);
      if (n < N && k0 + col < K)
        val = *reinterpret_cast<const uint4*>(w + (static_cast<int64_t>(g) * N + n) * K + k0 + col);
      *reinterpret_cast<uint4*>(sb + (g * kBN + row) * kLdAB + col) = val;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa[2];
#pragma unroll
      for (int i = 0; i < 2; ++i) wmma::load_matrix_sync(fa[i], sa + (wm * 32 + i * 16) * kLdAB + kk, kLdAB);
#pragma unroll
      for (int g = 0; g < kG; ++g)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> fb;  // (k, n) at [n][k]
          wmma::load_matrix_sync(fb, sb + (g * kBN + wn * 32 + j * 16) * kLdAB + kk, kLdAB);
#pragma unroll
          for (int i = 0; i < 2; ++i) wmma::mma_sync(acc[g][i][j], fa[i], fb, acc[g][i][j]);
        }
    }
    __syncthreads();
  }
#pragma unroll
  for (int g = 0; g < kG; ++g)
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < 2; ++j)
        wmma::store_matrix_sync(sc + (g * kBM + wm * 32 + i * 16) * kLdC + wn * 32 + j * 16, acc[g][i][j], kLdC,
                                wmma::mem_row_major);
  __syncthreads();
  T* out = static_cast<T*>(a.out);
  for (int v = tid; v < kBM * kBN; v += kTileThreads) {
    const int row = v / kBN, col = v % kBN, r = r0 + row, n = n0 + col;
    if (r >= r1 || n >= N) continue;
    const float g = sc[row * kLdC + col], u = kG == 2 ? sc[(kBM + row) * kLdC + col] : 0.f;
    out[static_cast<int64_t>(r) * N + n] = from_f32<T>(epilogue<T>(g, u, kG == 2));
  }
}

// Block (column tile, y): y indexes the experts with pairs (active; past their count: exit);
// warp w owns output column n (its gate and up rows when gated) and walks the expert's slots
// kGemvRows at a time; lane j takes 16-byte vectors j, j + 32, ...
template <class T, int kG>
__global__ void __launch_bounds__(32 * kGemvWarps) grouped_gemv_kernel(MoeGroupedArgs a) {
  if (static_cast<int>(blockIdx.y) >= a.active[a.E]) return;
  const int e = a.active[blockIdx.y];
  const int s0 = a.offsets[e], s1 = a.offsets[e + 1];
  if (s0 == s1) return;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int N = static_cast<int>(a.N), K8 = static_cast<int>(a.K / 8);
  const int n = blockIdx.x * kGemvWarps + warp;
  if (n >= N) return;
  const uint4* wg = reinterpret_cast<const uint4*>(static_cast<const T*>(a.w) +
                                                   (static_cast<int64_t>(e) * kG * N + n) * a.K);
  const uint4* wu = wg + static_cast<int64_t>(N) * K8;  // the up row (gated only)
  const uint4* x = static_cast<const uint4*>(a.x);
  T* out = static_cast<T*>(a.out);
  for (int c0 = s0; c0 < s1; c0 += kGemvRows) {
    const int m = min(kGemvRows, s1 - c0);
    const uint4* xr[kGemvRows];
#pragma unroll
    for (int i = 0; i < kGemvRows; ++i) xr[i] = x + x_row(a, c0 + (i < m ? i : 0)) * K8;
    float ag[kGemvRows] = {}, au[kGemvRows] = {};
    for (int v = lane; v < K8; v += 32) {
      const uint4 gv = __ldg(wg + v);
      const uint4 uv = kG == 2 ? __ldg(wu + v) : gv;
#pragma unroll
      for (int i = 0; i < kGemvRows; ++i) {
        if (i >= m) break;
        const uint4 xv = __ldg(xr[i] + v);
        ag[i] = gemv_detail::dot8<T>(gv, xv, ag[i]);
        if (kG == 2) au[i] = gemv_detail::dot8<T>(uv, xv, au[i]);
      }
    }
#pragma unroll
    for (int i = 0; i < kGemvRows; ++i) {
      const float g = gemv_detail::warp_sum(ag[i]);
      const float u = kG == 2 ? gemv_detail::warp_sum(au[i]) : 0.f;
      if (lane == 0 && i < m) out[static_cast<int64_t>(c0 + i) * N + n] = from_f32<T>(epilogue<T>(g, u, kG == 2));
    }
  }
}

// One thread per output element (slot r, column n); its expert by binary search over offsets.
template <class T>
__global__ void grouped_naive_kernel(MoeGroupedArgs a) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= a.P * a.N) return;
  const int r = static_cast<int>(idx / a.N);
  const int64_t n = idx % a.N, K = a.K, G = a.gated ? 2 : 1;
  const int e = last_at_most(a.offsets, static_cast<int>(a.E), r);
  const T* x = static_cast<const T*>(a.x) + x_row(a, r) * K;
  const T* wg = static_cast<const T*>(a.w) + (e * G * a.N + n) * K;
  float g = 0.f, u = 0.f;
  for (int64_t k = 0; k < K; ++k) g = fmaf(to_f32(x[k]), to_f32(wg[k]), g);
  if (a.gated)
    for (int64_t k = 0; k < K; ++k) u = fmaf(to_f32(x[k]), to_f32(wg[a.N * K + k]), u);
  static_cast<T*>(a.out)[static_cast<int64_t>(r) * a.N + n] = from_f32<T>(epilogue<T>(g, u, a.gated));
}

void check_args(const MoeGroupedArgs& a) {
  if (a.P < 0 || a.E < 1 || a.N < 1 || a.K < 1 || a.x_div < 1 || a.P > (1ll << 30) || a.N > (1 << 30))
    precondition_failed("moe_grouped: P >= 0, E, N, K >= 1");
}

}  // namespace

bool moe_grouped_fast_supported(int64_t K, DType dt) {
  return (dt == DType::BF16 || dt == DType::F16) && K % 8 == 0 && K > 0;
}

void moe_grouped(const MoeGroupedArgs& a, DType dt, cudaStream_t s) {
  check_args(a);
  if (!moe_grouped_fast_supported(a.K, dt)) precondition_failed("moe_grouped: 16-bit dt and K % 8 == 0");
  if (a.P == 0) return;
  const dim3 grid(static_cast<unsigned>(moe_max_tiles(a.P, a.E)), static_cast<unsigned>((a.N + kBN - 1) / kBN));
  auto launch = [&](auto tag) {
    using T = decltype(tag);
    if (a.gated) grouped_tc_kernel<T, 2><<<grid, kTileThreads, 0, s>>>(a);
    else grouped_tc_kernel<T, 1><<<grid, kTileThreads, 0, s>>>(a);
  };
  if (dt == DType::BF16) launch(__nv_bfloat16{});
  else launch(__half{});
  VLM_CUDA_CHECK_LAUNCH();
}

void moe_grouped_gemv(const MoeGroupedArgs& a, DType dt, cudaStream_t s) {
  check_args(a);
  if (!moe_grouped_fast_supported(a.K, dt)) precondition_failed("moe_grouped_gemv: 16-bit dt and K % 8 == 0");
  if (a.P == 0) return;
  const dim3 grid(static_cast<unsigned>((a.N + kGemvWarps - 1) / kGemvWarps),
                  static_cast<unsigned>(std::min(a.P, a.E)));  // at most P experts have pairs
  auto launch = [&](auto tag) {
    using T = decltype(tag);
    if (a.gated) grouped_gemv_kernel<T, 2><<<grid, 32 * kGemvWarps, 0, s>>>(a);
    else grouped_gemv_kernel<T, 1><<<grid, 32 * kGemvWarps, 0, s>>>(a);
  };
  if (dt == DType::BF16) launch(__nv_bfloat16{});
  else launch(__half{});
  VLM_CUDA_CHECK_LAUNCH();
}

void moe_grouped_naive(const MoeGroupedArgs& a, DType dt, cudaStream_t s) {
  check_args(a);
  if (a.P == 0) return;
  const int64_t n = a.P * a.N;
  dispatch_float(dt, [&](auto tag) {
    using T = decltype(tag);
    grouped_naive_kernel<T><<<static_cast<unsigned>((n + 255) / 256), 256, 0, s>>>(a);
  });
  VLM_CUDA_CHECK_LAUNCH();
}

}  // namespace vlm::cuda
