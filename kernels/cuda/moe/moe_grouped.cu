// The grouped products of the mixture-of-experts block (moe_cuda.h, step 3): tensor-core row
// tiles over the sorted slots (prefill), per-expert warp GEMVs (decode), and the naive reference.
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

using tile::cp_async16;
using tile::cp_async_commit;
using tile::cp_async_wait;
using tile::ldmatrix_x4;
using tile::mma;

// moe_grouped: kBM slots x kBN weight rows per block, 8 warps; K in steps of kBK (32, or 64 in
// the v3 form), kS stages of cp.async (moe_cuda.h's MoeTiles: old 2 x 32, v2 4 x 32, v3 3 x 64).
constexpr int kBM = kMoeTileRows, kBN = 128, kTileThreads = 256;
// moe_grouped_gemv: columns per block, pairs per pass, weight loads per row in flight.
constexpr int kGemvWarps = 8, kGemvRows = 8, kGemvUnroll = 4;

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

// The tile's shared-memory layout: rows of kBK 16-bit elements. kBK = 32 (64-byte rows, four
// 16-byte chunks): chunk c of row r is stored at chunk c ^ ((r >> 1) & 3), so the 8 rows an
// ldmatrix reads (two per 128-byte bank cycle) fall in distinct banks; kBK = 64 (128-byte rows,
// eight chunks): at chunk c ^ (r & 7), the 8 rows' chunks in 8 distinct bank groups.
template <int kBK>
struct RowsK {
  static_assert(kBK == 32 || kBK == 64, "32 or 64 columns");
  __device__ static int at(int row, int col) {
    const int swz = kBK == 32 ? (row >> 1) & 3 : row & 7;
    return row * kBK + (((col >> 3) ^ swz) << 3) + (col & 7);
  }
};

// Block (tile, column tile): tile -> its expert by tile_starts and kBM of that expert's slots
// (rows of x gathered through x_row); 8 warps, 2 (rows) x 4 (columns), each 64 rows x 32 B-tile
// rows as 4 x 4 mma.sync m16n8k16 tiles with f32 accumulators; K in steps of kBK through a
// kS-stage cp.async pipeline (rows past the expert's slots, weight rows past N and k past K
// zero-filled). The B tile's 128 rows are weight rows: ungated, columns n0 .. n0+127; gated,
// warp w's 32 rows are gate rows n0+16w .. +15 then the up rows of the same columns, so a
// thread's accumulator tiles nt and nt+2 hold the gate and up values of the same output element
// (64 output columns per block). kS stages in dynamic shared memory (tile_smem_bytes): group kt
// + kS - 1 is loaded while tile kt is multiplied, kS - 1 groups in flight.
// kColFast (v2c, v3): grid (column tiles, row tiles), column tiles fastest in launch order, so
// the blocks resident at once share few row tiles: a row tile of x (gathered rows, 512 KB at
// K = 2048) is read from memory about once, not once per column tile (gate|up at the prefill
// shape: 12 column tiles x 268 MB of x rows, ~3.2 GB, more than the 50 MB L2 keeps between the
// sweeps), and an expert's weights (6.3 MB) are reused from the L2 by its consecutive row tiles.
// Else grid (row tiles, column tiles), row tiles fastest. 2 blocks per SM (<= 128 registers:
// v3 spills ~24 bytes, nvcc --resource-usage).
// The epilogue stores two adjacent columns at once (4 bytes) when N is even.
template <class T, int kS, int kBK>
constexpr size_t tile_smem_bytes() {
  return static_cast<size_t>(kS) * (kBM + kBN) * kBK * sizeof(T);
}

template <class T, int kG, int kS, int kBK, bool kColFast>
__global__ void __launch_bounds__(kTileThreads, 2) grouped_tc_kernel(MoeGroupedArgs a) {  // <= 128 registers
  using Rows = RowsK<kBK>;
  const int E = static_cast<int>(a.E), N = static_cast<int>(a.N), K = static_cast<int>(a.K);
  constexpr int kOutCols = kG == 2 ? kBN / 2 : kBN;
  const int tile = kColFast ? static_cast<int>(blockIdx.y) : static_cast<int>(blockIdx.x);
  if (tile >= a.tile_starts[E]) return;
  const int e = last_at_most(a.tile_starts, E, tile);
  const int r0 = a.offsets[e] + (tile - a.tile_starts[e]) * kBM, r1 = min(r0 + kBM, a.offsets[e + 1]);
  const int n0 = (kColFast ? static_cast<int>(blockIdx.x) : static_cast<int>(blockIdx.y)) * kOutCols;
  extern __shared__ __align__(128) unsigned char tile_smem[];
  T (*sa)[kBM * kBK] = reinterpret_cast<T (*)[kBM * kBK]>(tile_smem);  // [kS][kBM * kBK]
  T (*sb)[kBN * kBK] = reinterpret_cast<T (*)[kBN * kBK]>(tile_smem + kS * kBM * kBK * sizeof(T));  // [kS][...]
  __shared__ int64_t xrow[kBM];
  __shared__ int64_t wrow[kBN];
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, wm = warp / 4, wn = warp % 4;
  if (tid < kBM) xrow[tid] = r0 + tid < r1 ? x_row(a, r0 + tid) : -1;
  if (tid < kBN) {
    int col = n0 + tid, part = 0;  // ungated: weight row n0 + tid
    if (kG == 2) col = n0 + (tid / 32) * 16 + tid % 16, part = (tid % 32) / 16;
    wrow[tid] = col < N ? static_cast<int64_t>(part) * N + col : -1;
  }
  __syncthreads();
  const T* x = static_cast<const T*>(a.x);
  const T* w = static_cast<const T*>(a.w) + static_cast<int64_t>(e) * kG * N * K;
  auto load_stage = [&](int st, int k0) {
#pragma unroll
    for (int j = 0; j < (kBM * kBK / 8) / kTileThreads; ++j) {  // A: kBM rows x kBK / 8 chunks
      const int i = tid + j * kTileThreads, row = i / (kBK / 8), col = (i % (kBK / 8)) * 8;
      const bool ok = xrow[row] >= 0 && k0 + col < K;
      cp_async16(&sa[st][Rows::at(row, col)], ok ? x + xrow[row] * K + k0 + col : x, ok ? 16 : 0);
    }
#pragma unroll
    for (int j = 0; j < (kBN * kBK / 8) / kTileThreads; ++j) {  // B: kBN weight rows x kBK / 8 chunks
      const int i = tid + j * kTileThreads, row = i / (kBK / 8), col = (i % (kBK / 8)) * 8;
      const bool ok = wrow[row] >= 0 && k0 + col < K;
      cp_async16(&sb[st][Rows::at(row, col)], ok ? w + wrow[row] * K + k0 + col : w, ok ? 16 : 0);
    }
  };
  float acc[4][4][4] = {};  // [row slab mt][column tile nt][c0..c3]
  const int nk = (K + kBK - 1) / kBK;
#pragma unroll
  for (int st = 0; st < kS - 1; ++st) {  // groups 0 .. kS - 2 (possibly empty)
    if (st < nk) load_stage(st, st * kBK);
    cp_async_commit();
  }
  for (int kt = 0; kt < nk; ++kt) {
    cp_async_wait<kS - 2>();  // group kt has landed (this thread's copies)
    __syncthreads();          // every thread's; and every warp is past tile kt - 1
    if (kt + kS - 1 < nk) load_stage((kt + kS - 1) % kS, (kt + kS - 1) * kBK);  // the stage of tile kt - 1
    cp_async_commit();  // (possibly empty) group kt + kS - 1
    const T* ta = sa[kt % kS];
    const T* tb = sb[kt % kS];
#pragma unroll
    for (int kh = 0; kh < kBK / 32; ++kh) {  // k kh*32 .. +31 (k ascending: the same sums for any kBK)
      uint32_t af[4][2][4];
#pragma unroll
      for (int mt = 0; mt < 4; ++mt)
#pragma unroll
        for (int k2 = 0; k2 < 2; ++k2)
          ldmatrix_x4(af[mt][k2], ta + Rows::at(wm * 64 + mt * 16 + (lane & 7) + ((lane >> 3) & 1) * 8,
                                                kh * 32 + k2 * 16 + (lane >> 4) * 8));
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        uint32_t bf[4];  // bf[0], bf[1]: k 0..15; bf[2], bf[3]: k 16..31
        ldmatrix_x4(bf, tb + Rows::at(wn * 32 + nt * 8 + (lane & 7), kh * 32 + (lane >> 3) * 8));
#pragma unroll
        for (int mt = 0; mt < 4; ++mt) {
          mma<T>(acc[mt][nt], af[mt][0], bf[0], bf[1]);
          mma<T>(acc[mt][nt], af[mt][1], bf[2], bf[3]);
        }
      }
    }
  }
  cp_async_wait<0>();  // no copy outlives the block
  T* out = static_cast<T*>(a.out);
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int mt = 0; mt < 4; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {  // c0, c1: row g; c2, c3: row g + 8
      const int r = r0 + wm * 64 + mt * 16 + g + half * 8;
      if (r >= r1) continue;
#pragma unroll
      for (int nt = 0; nt < (kG == 2 ? 2 : 4); ++nt) {
        const int col = n0 + (kG == 2 ? wn * 16 : wn * 32) + nt * 8 + 2 * t;  // even
        T v[2];
#pragma unroll
        for (int q = 0; q < 2; ++q) {
          const float gv = acc[mt][nt][half * 2 + q], uv = kG == 2 ? acc[mt][nt + 2][half * 2 + q] : 0.f;
          v[q] = from_f32<T>(epilogue<T>(gv, uv, kG == 2));
        }
        T* o = out + static_cast<int64_t>(r) * N + col;
        if (N % 2 == 0 && col + 1 < N) {  // 4-byte aligned: out 16-byte aligned, r * N and col even
          using T2 = std::conditional_t<std::is_same_v<T, __half>, __half2, __nv_bfloat162>;
          T2 pair;
          pair.x = v[0];
          pair.y = v[1];
          *reinterpret_cast<T2*>(o) = pair;
        } else {
#pragma unroll
          for (int q = 0; q < 2; ++q)
            if (col + q < N) o[q] = v[q];
        }
      }
    }
}

// Block (column tile, y): y indexes the experts with pairs (active; past their count: exit);
// warp w owns output column n (its gate and up rows when gated) and walks the expert's slots
// kGemvRows at a time; lane j takes 16-byte vectors j, j + 32, ... of the weight rows, streamed
// (kGemvUnroll loads per row in flight, bypassing L1: read once per pass), and the same vectors
// of the pairs' x rows through L1 (shared by the block's warps).
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
    for (int base = lane; base < K8; base += 32 * kGemvUnroll) {
      uint4 gv[kGemvUnroll], uv[kGemvUnroll];  // kGemvUnroll 16-byte weight loads per row in flight
#pragma unroll
      for (int u = 0; u < kGemvUnroll; ++u) {
        const int v = base + u * 32;
        gv[u] = v < K8 ? gemv_detail::load_stream(wg + v) : make_uint4(0, 0, 0, 0);
        uv[u] = kG == 2 && v < K8 ? gemv_detail::load_stream(wu + v) : gv[u];
      }
#pragma unroll
      for (int u = 0; u < kGemvUnroll; ++u) {
        const int v = base + u * 32;
        if (v >= K8) break;
#pragma unroll
        for (int i = 0; i < kGemvRows; ++i) {
          if (i >= m) break;
          const uint4 xv = __ldg(xr[i] + v);
          ag[i] = gemv_detail::dot8<T>(gv[u], xv, ag[i]);
          if (kG == 2) au[i] = gemv_detail::dot8<T>(uv[u], xv, au[i]);
        }
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

// One tile form's kernel and its dynamic shared memory (opted in past 48 KB, once per kernel).
template <class T, int kG, int kS, int kBK, bool kColFast>
void launch_tiles(const MoeGroupedArgs& a, cudaStream_t s) {
  constexpr size_t smem = tile_smem_bytes<T, kS, kBK>();
  static const bool opted = [] {
    VLM_CUDA_CHECK(cudaFuncSetAttribute(grouped_tc_kernel<T, kG, kS, kBK, kColFast>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    return true;
  }();
  (void)opted;
  constexpr int64_t out_cols = kG == 2 ? kBN / 2 : kBN;  // output columns per block
  const int64_t tiles = moe_max_tiles(a.P, a.E), columns = (a.N + out_cols - 1) / out_cols;
  const dim3 grid = kColFast ? dim3(static_cast<unsigned>(columns), static_cast<unsigned>(tiles))
                             : dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(columns));
  grouped_tc_kernel<T, kG, kS, kBK, kColFast><<<grid, kTileThreads, smem, s>>>(a);
}

template <class T, int kG>
void launch_tiles_form(const MoeGroupedArgs& a, int form, cudaStream_t s) {
  if (moe_max_tiles(a.P, a.E) > 65535 && (form == kMoeTilesV2c || form == kMoeTilesV3))
    form = kMoeTilesV2;  // the row tiles on the grid's y (65,535 at most): past ~8.4M pairs
  switch (form) {
    case kMoeTilesOld: launch_tiles<T, kG, 2, 32, false>(a, s); break;
    case kMoeTilesV2: launch_tiles<T, kG, 4, 32, false>(a, s); break;
    case kMoeTilesV2c: launch_tiles<T, kG, 4, 32, true>(a, s); break;
    default: launch_tiles<T, kG, 3, 64, true>(a, s); break;  // kMoeTilesV3
  }
}

void check_args(const MoeGroupedArgs& a) {
  if (a.P < 0 || a.E < 1 || a.N < 1 || a.K < 1 || a.x_div < 1 || a.P > (1ll << 30) || a.N > (1 << 30))
    precondition_failed("moe_grouped: P >= 0, E, N, K >= 1");
}

}  // namespace

bool moe_grouped_fast_supported(int64_t K, DType dt) {
  return (dt == DType::BF16 || dt == DType::F16) && K % 8 == 0 && K > 0;
}

int moe_tiles_env_form() {  // VLM_MOE_TILES, read once
  static const int form = []() -> int {
    const char* v = std::getenv("VLM_MOE_TILES");
    const std::string f = v != nullptr ? v : "";
    if (f == "old") return kMoeTilesOld;
    if (f == "v2") return kMoeTilesV2;
    if (f == "v2c") return kMoeTilesV2c;
    if (f == "v3") return kMoeTilesV3;
    return kMoeTilesDefault;
  }();
  return form;
}

void moe_grouped(const MoeGroupedArgs& a, DType dt, cudaStream_t s) {
  check_args(a);
  if (!moe_grouped_fast_supported(a.K, dt)) precondition_failed("moe_grouped: 16-bit dt and K % 8 == 0");
  if (a.tile_form < 0 || a.tile_form > kMoeTilesV3) precondition_failed("moe_grouped: tile_form 0 .. kMoeTilesV3");
  if (a.P == 0) return;
  const int form = a.tile_form != 0 ? a.tile_form : moe_tiles_env_form();
  auto launch = [&](auto tag) {
    using T = decltype(tag);
    if (a.gated) launch_tiles_form<T, 2>(a, form, s);
    else launch_tiles_form<T, 1>(a, form, s);
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
