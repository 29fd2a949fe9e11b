#include "kernels/cuda/gemm/fp8_tile_gemm.h"

#include <algorithm>
#include <atomic>
#include <type_traits>

#include "kernels/cuda/core/cuda_check.h"
#include "kernels/cuda/attention/wgmma_tile.cuh"
#include "kernels/cuda/gemm/fp8_tile_common.cuh"
#include "kernels/cuda/gemm/fp8_wgmma.cuh"

namespace vlm::cuda {
namespace {

using fp8_tile_detail::dispatch_tiles;
using fp8_tile_detail::fp8_tile_reduce_kernel;
using fp8_tile_detail::store_out;
using fp8_tile_detail::store_silu;

constexpr int kThreads = 128;  // one warpgroup
constexpr int kTileRows = 128;  // weight rows of a block: two 64-row A tiles (silu: 64 gate rows, their 64 up rows)
constexpr int kStep = 128;      // one k-step: 128 columns (bytes) of every row, 4 wgmma k32 steps
constexpr int kStages = kFp8TileStages;
constexpr int kWChunks = kTileRows * (kStep / 16) / kThreads;  // 16-byte weight copies per thread a step
static_assert(kStages >= 2 && kWChunks * kThreads == kTileRows * (kStep / 16), "a step's copies split evenly");

// One stage: the block's weight rows [kTileRows][128 B] then its tokens' x rows [8 MT][128 B], both
// SW128 (wgmma_tile.cuh: chunk c of row r at chunk c ^ (r & 7)); every stage 1024-byte aligned.
constexpr int stage_bytes(int MT) { return (kTileRows + 8 * MT) * kStep; }
constexpr int smem_bytes(int MT) { return kStages * stage_bytes(MT) + 1024; }  // + the alignment slack
constexpr int outs_per_block(bool silu) { return silu ? kTileRows / 2 : kTileRows; }
constexpr int64_t steps_of(int64_t K) { return (K + kStep - 1) / kStep; }

// 16-byte async copy global -> shared (L2 only); src_bytes 0 zero-fills (the tail of K % 128 == 64).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(tile::smem_addr(dst)), "l"(src),
               "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// grid (ceil(R / outs_per_block), S), block one warpgroup, smem_bytes(MT) of dynamic shared memory.
// Block b owns output columns o0 = b * outs_per_block .. (plain: weight rows o0 .. o0 + 127 as
// A tiles 0 and 1; silu: gate rows o0 .. o0 + 63 as tile 0 and up rows R + o0 .. as tile 1; rows
// past the end clamped to the last, their outputs never stored) over the k-steps [s0, s0 + n) of
// split blockIdx.y, and all M tokens as the wgmma's N = 8 MT columns (token rows clamped to M - 1,
// never stored; K's tail past a multiple of 128 zero-filled on both operands).
// Swap-AB: d[64 rows x 8 MT tokens] += W[64 x 32] . x^T[32 x 8 MT] per k32, on the FP8 tensor
// cores (mma.sync's E4M3 form is emulated through f16 on sm_90). Each 128-column step accumulates
// into fresh registers (scale_d 0 on its first k32) that are then added to f32 sums on the CUDA
// cores: Hopper's FP8 tensor-core accumulation keeps fewer bits than f32, so no chain runs longer
// than 128 products (the promotion of CUTLASS's FP8 kernels without fast accumulation and of
// DeepSeek-V3's).
// Copies: thread i copies 16-byte chunk i % 8 of weight rows i / 8 + 16 c (c < 8) and of x rows
// i / 8 + 16 c (c < MT / 2, rounded up; rows < 8 MT) of each step, kStages - 1 steps ahead.
template <int MT, bool kSilu, class TO>
__global__ void __launch_bounds__(kThreads, 2)
fp8_tile_kernel(const uint8_t* __restrict__ xq, const float* __restrict__ xs, const uint8_t* __restrict__ w,
                const float* __restrict__ ws, const __nv_bfloat16* __restrict__ bias, TO* y, float* partial,
                bool accumulate, int M, int R, int K, int steps_per_split) {
  extern __shared__ uint8_t smem_raw[];
  uint8_t* const smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  constexpr int kSB = stage_bytes(MT), kHalf = kTileRows / 2, kXRows = 8 * MT;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int o0 = blockIdx.x * outs_per_block(kSilu);
  const int steps = static_cast<int>(steps_of(K));
  const int s0 = blockIdx.y * steps_per_split, n = min(steps, s0 + steps_per_split) - s0;

  const int chunk = tid % 8, r8 = tid / 8;               // this thread's chunk and first row
  const int sw_off = r8 * kStep + ((chunk ^ (r8 & 7)) * 16);  // its swizzled offset (rows r8 + 16 c: same r & 7)
  int wrow[kWChunks];                                    // the global weight rows it copies
#pragma unroll
  for (int c = 0; c < kWChunks; ++c) {
    const int lr = r8 + 16 * c;
    if constexpr (kSilu) wrow[c] = lr < kHalf ? min(o0 + lr, R - 1) : R + min(o0 + lr - kHalf, R - 1);
    else wrow[c] = min(o0 + lr, R - 1);
  }
  auto load = [&](int buf, int st) {
    uint8_t* sw = smem + buf * kSB;
    uint8_t* sx = sw + kTileRows * kStep;
    const int64_t col = int64_t(st) * kStep + 16 * chunk;
    const int bytes = col < K ? 16 : 0;
    const int64_t cc = col < K ? col : 0;  // a valid address where nothing is read
#pragma unroll
    for (int c = 0; c < kWChunks; ++c) cp_async16(sw + sw_off + 16 * c * kStep, w + int64_t(wrow[c]) * K + cc, bytes);
#pragma unroll
    for (int c = 0; c < (kXRows + 15) / 16; ++c) {
      const int xr = r8 + 16 * c;
      if (xr < kXRows) cp_async16(sx + sw_off + 16 * c * kStep, xq + int64_t(min(xr, M - 1)) * K + cc, bytes);
    }
  };

  float acc[2][MT][4], part[2][MT][4];
#pragma unroll
  for (int a = 0; a < 2; ++a)
#pragma unroll
    for (int j = 0; j < MT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[a][j][e] = part[a][j][e] = 0.f;

  // Stages: step i of the split lives in buffer i % kStages; kStages - 1 steps are copied ahead.
  // Each iteration commits one group (empty past the end), so waiting until at most kStages - 2
  // groups are pending means step i's own copies landed; each thread fences its copies toward the
  // async proxy (wgmma reads shared memory through it), the barrier publishes them and marks the
  // end of step i - 1's wgmmas (each iteration waits for its own), whose buffer the next copy reuses.
#pragma unroll
  for (int p = 0; p < kStages - 1; ++p) {
    if (p < n) load(p, s0 + p);
    cp_async_commit();
  }
#pragma unroll 1
  for (int i = 0; i < n; ++i) {
    cp_async_wait<kStages - 2>();
    wg::fence_proxy_async();
    __syncthreads();
    if (i + kStages - 1 < n) load((i + kStages - 1) % kStages, s0 + i + kStages - 1);
    cp_async_commit();
    const uint8_t* sw = smem + (i % kStages) * kSB;
    const uint8_t* sx = sw + kTileRows * kStep;
    wg::fence();
#pragma unroll
    for (int kk = 0; kk < kStep / 32; ++kk) {
      const uint64_t db = wg::desc_k_major<kXRows>(sx, 0, kk);
#pragma unroll
      for (int a = 0; a < 2; ++a)
        fp8_wgmma::Mma<MT>::run(part[a], wg::desc_k_major<kTileRows>(sw, 64 * a, kk), db, kk > 0 ? 1 : 0);
    }
    wg::commit();
    wg::wait<0>();
#pragma unroll
    for (int a = 0; a < 2; ++a) {
      wg::fence_regs(part[a]);
#pragma unroll
      for (int j = 0; j < MT; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[a][j][e] += part[a][j][e];
    }
  }

  // acc[a][j][e]: row 16 warp + g + 8 (e / 2) of A tile a, token 8 j + 2 t + e % 2.
#pragma unroll
  for (int j = 0; j < MT; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int m = 8 * j + 2 * t + e % 2, hr = 16 * warp + g + 8 * (e / 2);
      if (m >= M) continue;
      if constexpr (kSilu) {
        const int i = o0 + hr;
        if (i >= R) continue;
        if (partial) {
          float* p = partial + (int64_t(blockIdx.y) * M + m) * (2 * int64_t(R));
          p[i] = acc[0][j][e];
          p[R + i] = acc[1][j][e];
        } else {
          store_silu(acc[0][j][e], acc[1][j][e], xs, ws, bias, reinterpret_cast<__nv_bfloat16*>(y), m, i, R);
        }
      } else {
#pragma unroll
        for (int a = 0; a < 2; ++a) {
          const int nn = o0 + kHalf * a + hr;
          if (nn >= R) continue;
          if (partial) partial[(int64_t(blockIdx.y) * M + m) * R + nn] = acc[a][j][e];
          else store_out<TO>(acc[a][j][e], xs, ws, bias, y, accumulate, m, nn, R);
        }
      }
    }
}

// The kernel's dynamic shared-memory limit raised to what it takes, once per device (the
// attribute belongs to the current device's context).
template <int MT, bool kSilu, class TO>
void set_smem_limit() {
  static std::atomic<uint64_t> done{0};  // bit d: device d's limit is set
  int dev = 0;
  VLM_CUDA_CHECK(cudaGetDevice(&dev));
  const uint64_t bit = dev < 64 ? uint64_t(1) << dev : 0;
  if (bit && (done.load(std::memory_order_acquire) & bit)) return;
  VLM_CUDA_CHECK(cudaFuncSetAttribute(fp8_tile_kernel<MT, kSilu, TO>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      smem_bytes(MT)));
  done.fetch_or(bit, std::memory_order_release);
}

// Blocks of the kernel resident per SM (the F32-output form stands for both plain outputs: equal
// shared memory, launch bounds cap the registers), learned once per kernel.
template <int MT, bool kSilu>
int resident_blocks() {
  using TO = std::conditional_t<kSilu, __nv_bfloat16, float>;
  set_smem_limit<MT, kSilu, TO>();
  static const int n = [] {
    int v = 1;
    VLM_CUDA_CHECK(
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&v, fp8_tile_kernel<MT, kSilu, TO>, kThreads, smem_bytes(MT)));
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

std::atomic<int> g_split_override{0};

// Splits of K (in 128-column steps) for R outputs: the S (1..16, at most one per step) of least
// modelled time (ns), estimates for an H100/H200-class GPU, not measurements:
//  - per wave of resident blocks (the last one partial), the wave's weights at ~4 TB/s or, where
//    too few blocks run, one block's bytes at ~30 GB/s (its kStages - 1 stages of 16 KB in flight
//    over ~1.6 us of loaded latency), whichever is slower;
//  - a split's partial sums [S, M, cols] f32 written and read back through L2 (~8 TB/s) plus ~1 us
//    for the reduce launch.
struct Split {
  int S, steps;
};
Split choose_split(int64_t M, int64_t R, int64_t K, bool silu) {
  int dev = 0, sms = 132;
  VLM_CUDA_CHECK(cudaGetDevice(&dev));
  VLM_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  const int64_t tiles = (R + outs_per_block(silu) - 1) / outs_per_block(silu), KS = steps_of(K);
  const int64_t cap = int64_t(sms) * blocks_per_sm(M, silu), cols = (silu ? 2 : 1) * R;
  const int64_t max_S = std::min<int64_t>(16, KS);
  int64_t best_S = 1;
  if (const int forced = g_split_override.load(std::memory_order_relaxed); forced > 0) {
    best_S = std::min<int64_t>(forced, max_S);
  } else {
    const double per_block_bytes_ns = (kStages - 1) * kTileRows * kStep / 1600.0;
    double best = -1;
    for (int64_t S = 1; S <= max_S; ++S) {
      const int64_t steps = (KS + S - 1) / S, units = tiles * ((KS + steps - 1) / steps);
      const double block_bytes = double(kTileRows) * steps * kStep, block_ns = block_bytes / per_block_bytes_ns;
      auto wave_ns = [&](int64_t blocks) { return std::max(double(blocks) * block_bytes / 4000.0, block_ns); };
      const double part = S > 1 ? 2.0 * double(S) * M * cols * 4 / 8000.0 + 1000.0 : 0.0;
      const double cost =
          double(units / cap) * wave_ns(cap) + (units % cap > 0 ? wave_ns(units % cap) : 0.0) + part;
      if (best < 0 || cost < best) best_S = S, best = cost;
    }
  }
  const int64_t steps = (KS + best_S - 1) / best_S;
  return {static_cast<int>((KS + steps - 1) / steps), static_cast<int>(steps)};
}

void check(int64_t M, int64_t R, int64_t K, const float* partial, bool silu) {
  if (!fp8_tile_supported(M, K)) precondition_failed("fp8_tile_gemm: M in [1, kFp8TileMaxRows], K % 64 == 0");
  if (R >= (int64_t(1) << 29) || K >= (int64_t(1) << 31))
    precondition_failed("fp8_tile_gemm: N below 2^29, K below 2^31");
  if (!partial && fp8_tile_partial_floats(M, (silu ? 2 : 1) * R, K, silu) > 0)
    precondition_failed("fp8_tile_gemm: a split product without its partial buffer");
}

template <bool kSilu, class TO>
void launch(const uint8_t* xq, const float* xs, const uint8_t* wq, const float* ws, const void* bias, void* y,
            bool accumulate, int64_t M, int64_t R, int64_t K, float* partial, cudaStream_t s) {
  const Split sp = choose_split(M, R, K, kSilu);
  float* part = sp.S > 1 ? partial : nullptr;
  const dim3 grid(static_cast<unsigned>((R + outs_per_block(kSilu) - 1) / outs_per_block(kSilu)),
                  static_cast<unsigned>(sp.S));
  const auto* b = static_cast<const __nv_bfloat16*>(bias);
  dispatch_tiles(M, [&](auto tiles) {
    constexpr int MT = decltype(tiles)::value;
    set_smem_limit<MT, kSilu, TO>();
    fp8_tile_kernel<MT, kSilu, TO><<<grid, kThreads, smem_bytes(MT), s>>>(
        xq, xs, wq, ws, b, static_cast<TO*>(y), part, accumulate, static_cast<int>(M), static_cast<int>(R),
        static_cast<int>(K), sp.steps);
  });
  VLM_CUDA_CHECK_LAUNCH();
  if (!part) return;
  const int64_t outs = M * R;
  fp8_tile_reduce_kernel<kSilu, TO><<<static_cast<unsigned>((outs + 255) / 256), 256, 0, s>>>(
      part, sp.S, xs, ws, b, static_cast<TO*>(y), accumulate, static_cast<int>(M), static_cast<int>(R));
  VLM_CUDA_CHECK_LAUNCH();
}

}  // namespace

bool fp8_tile_supported(int64_t M, int64_t K) { return M >= 1 && M <= kFp8TileMaxRows && K > 0 && K % 64 == 0; }

int64_t fp8_tile_partial_floats(int64_t M, int64_t cols, int64_t K, bool silu_mul) {
  const Split sp = choose_split(M, silu_mul ? cols / 2 : cols, K, silu_mul);
  return sp.S > 1 ? int64_t(sp.S) * M * cols : 0;
}

int fp8_tile_splits(int64_t M, int64_t cols, int64_t K, bool silu_mul) {
  return choose_split(M, silu_mul ? cols / 2 : cols, K, silu_mul).S;
}

void fp8_tile_set_split_override(int S) { g_split_override.store(std::max(S, 0), std::memory_order_relaxed); }

void fp8_tile_gemm(const uint8_t* xq, const float* x_scale, const uint8_t* wq, const float* w_scale, const void* bias,
                   void* y, DType out_dt, bool accumulate, int64_t M, int64_t N, int64_t K, float* partial,
                   cudaStream_t s) {
  check(M, N, K, partial, false);
  if (out_dt == DType::F32)
    launch<false, float>(xq, x_scale, wq, w_scale, bias, y, accumulate, M, N, K, partial, s);
  else if (out_dt == DType::BF16)
    launch<false, __nv_bfloat16>(xq, x_scale, wq, w_scale, bias, y, accumulate, M, N, K, partial, s);
  else
    precondition_failed("fp8_tile_gemm: output BF16 or F32");
}

void fp8_tile_gemm_silu_mul(const uint8_t* xq, const float* x_scale, const uint8_t* wq, const float* w_scale,
                            const void* bias, void* out, int64_t M, int64_t I, int64_t K, float* partial,
                            cudaStream_t s) {
  check(M, I, K, partial, true);
  launch<true, __nv_bfloat16>(xq, x_scale, wq, w_scale, bias, out, false, M, I, K, partial, s);
}

}  // namespace vlm::cuda
