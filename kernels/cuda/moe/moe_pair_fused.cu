// moe_pair_fused (moe_decode.h 2f.): 2b. (the gate|up ring) and 3b. (the down+combine) in ONE
// cooperative launch, one persistent block per SM, so that the down rows stream while the gate|up
// drains: no kernel boundary between the two products.
//  - Phase 1, 2b.'s ring (moe_pair_ring.cu's scheme): a producer warp fills S stages of G columns'
//    gate and up rows by bulk copies, 8 consumer warps sum them (2.'s order, 2.'s bits) and write
//    act [P, I] to global memory.
//  - As soon as the consumers have released every stage, the producer warp (lane j: pair j) asks
//    the copy engine for the down rows of the block's first D items (item = token t, R columns
//    c0..c0+R; per pair R x I contiguous bytes, one mbarrier per (slot, pair)) into the same
//    shared memory: they stream during the grid barrier and the other blocks' tails.
//  - A grid barrier (every block arrives once; a generation word, so a graph replays it) makes all
//    of act visible; then per item warp w sums pair w (the act row through L2, __ldcg), and the
//    combine adds the k outputs of each column in increasing j (3'.'s order, 3'.'s bits); the slot
//    then takes the block's item k + D.
// The grid barrier needs every block resident at once: grid = SMs x blocks per SM (occupancy,
// here 1), launched cooperative (cudaLaunchAttributeCooperative: an error, never a hang, when they
// do not fit). Not measured yet (bench_cuda_moe "kernel pair_fused form=coop" against the
// gate_up + down_combine rows, "decode norm_fused2" against "norm_bulk").
#include <algorithm>
#include <atomic>
#include <cstdint>

#include "kernels/cuda/attention/cuda_attention_common.cuh"  // once_per_device
#include "kernels/cuda/core/cuda_check.h"
#include "kernels/cuda/core/element.cuh"
#include "kernels/cuda/gemm/gemv_warp.cuh"
#include "kernels/cuda/moe/moe_bulk_copy.cuh"
#include "kernels/cuda/moe/moe_decode.h"
#include "kernels/cuda/moe/moe_pair_staged.cuh"

namespace vlm::cuda {
namespace {

constexpr int kConsumers = 8, kThreads = 32 * (kConsumers + 1);
constexpr int kMaxStages = 4, kMaxSlots = 4, kMaxK = static_cast<int>(kMoeMaxTopK);
constexpr int64_t kStageBudget = 64 * 1024, kArenaBudget = 200 * 1024;

struct FusedShape {
  int G = 0, S = 0, R = 0, D = 0;  // gate|up columns per chunk, stages; down columns per item, item slots
  int64_t stage = 0, arena = 0;    // bytes
};
FusedShape fused_shape(int64_t K, int64_t I, int64_t C) {
  FusedShape f;
  for (int G = 8; G >= 1; G /= 2) {
    const int64_t stage = 2 * static_cast<int64_t>(G) * C * 2;
    if (stage <= kStageBudget || G == 1) {
      f.G = G;
      f.stage = stage;
      f.S = static_cast<int>(std::min<int64_t>(kMaxStages, kArenaBudget / stage));
      break;
    }
  }
  if (f.S < 2) return FusedShape{};
  f.arena = f.stage * f.S;
  for (int R = 8; R >= 1; R /= 2)
    if (K * R * I * 2 <= f.arena) {
      f.R = R;
      f.D = static_cast<int>(std::min<int64_t>(kMaxSlots, f.arena / (K * R * I * 2)));
      break;
    }
  if (f.R == 0) return FusedShape{};
  return f;
}

__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Every block's thread 0 once: returns when all n blocks have arrived. sync [2]: the arrival count
// (back to 0 by the last arrival) and the generation (one more per barrier).
__device__ __forceinline__ void grid_barrier(unsigned* sync, unsigned n) {
  const unsigned gen = ld_acquire(sync + 1);
  __threadfence();  // this block's writes (ordered before by its block barrier) before the arrival
  if (atomicAdd(sync, 1u) == n - 1) {
    atomicExch(sync, 0u);
    __threadfence();
    atomicAdd(sync + 1, 1u);
  } else {
    while (ld_acquire(sync + 1) == gen) __nanosleep(32);
  }
  __threadfence();
}

template <class T, int R>
__global__ void __launch_bounds__(kThreads, 1)
    pair_fused_kernel(const T* __restrict__ h, const T* __restrict__ gu, const T* __restrict__ down,
                      const int32_t* __restrict__ expert, const float* __restrict__ weight, int Tn, int Kt, int N,
                      int C, int G, int S, int D, T* act, float* y, bool accumulate, unsigned* sync) {
  extern __shared__ __align__(128) unsigned char fz_smem[];
  __shared__ __align__(8) uint64_t full[kMaxStages], empty[kMaxStages], dbar[kMaxSlots][kMaxK];
  __shared__ float red[kMaxK][R];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, C8 = C / 8, I8 = N / 8;
  const int per_pair = (N + G - 1) / G, Q = Tn * Kt * per_pair;
  const int cols = (C + R - 1) / R, items = Tn * cols;
  const int64_t stage_vecs = 2 * static_cast<int64_t>(G) * C8, item_vecs = static_cast<int64_t>(Kt) * R * I8;
  if (threadIdx.x < S) {
    bulk::bar_init(&full[threadIdx.x], 1);
    bulk::bar_init(&empty[threadIdx.x], kConsumers);
  }
  for (int i = threadIdx.x; i < D * Kt; i += kThreads) bulk::bar_init(&dbar[i / Kt][i % Kt], 1);
  __syncthreads();
  uint4* arena = reinterpret_cast<uint4*>(fz_smem);
  // The producer warp asks for item `item`'s down rows into slot k % D (lane j: pair j).
  auto issue_item = [&](int k, int item) {
    const int slot = k % D, t = item / cols, c0 = (item - t * cols) * R, rows = min(R, C - c0);
    const uint32_t bytes = static_cast<uint32_t>(rows) * static_cast<uint32_t>(N) * 2u;
    for (int j = lane; j < Kt; j += 32) {
      const int64_t e = expert[static_cast<int64_t>(t) * Kt + j];
      bulk::bar_expect(&dbar[slot][j], bytes);
      bulk::copy(arena + slot * item_vecs + static_cast<int64_t>(j) * R * I8, down + (e * C + c0) * N, bytes,
                 &dbar[slot][j]);
    }
  };

  // Phase 1: gate|up through the ring (moe_pair_ring.cu), then the first items' down rows.
  if (warp == kConsumers) {
    int k = 0;
    if (lane == 0) {
      for (int q = blockIdx.x; q < Q; q += gridDim.x, ++k) {
        const int s = k % S;
        if (k >= S) bulk::bar_wait(&empty[s], static_cast<uint32_t>((k / S - 1) & 1));
        const int p = q / per_pair, n0 = (q - p * per_pair) * G, rows = min(G, N - n0);
        const int64_t e = expert[p];
        const uint32_t bytes = static_cast<uint32_t>(rows) * static_cast<uint32_t>(C) * 2u;
        const T* g0 = gu + (e * 2 * N + n0) * C;
        uint4* sg = arena + s * stage_vecs;
        bulk::bar_expect(&full[s], 2u * bytes);
        bulk::copy(sg, g0, bytes, &full[s]);
        bulk::copy(sg + static_cast<int64_t>(G) * C8, g0 + static_cast<int64_t>(N) * C, bytes, &full[s]);
      }
      // Every stage released: the last chunk k' of stage s is s + S x floor((k - 1 - s) / S).
      for (int s = 0; s < S && s < k; ++s) {
        const int last = s + ((k - 1 - s) / S) * S;
        bulk::bar_wait(&empty[s], static_cast<uint32_t>((last / S) & 1));
      }
    }
    __syncwarp();
    for (int d = 0; d < D; ++d) {
      const int item = blockIdx.x + d * gridDim.x;
      if (item >= items) break;
      issue_item(d, item);
    }
  } else {
    int k = 0;
    for (int q = blockIdx.x; q < Q; q += gridDim.x, ++k) {
      const int s = k % S;
      const int p = q / per_pair, n0 = (q - p * per_pair) * G, rows = min(G, N - n0);
      bulk::bar_wait(&full[s], static_cast<uint32_t>((k / S) & 1));
      for (int r = warp; r < rows; r += kConsumers) {  // 2.'s sums (moe_pair_ring.cu)
        const uint4* gr = arena + s * stage_vecs + static_cast<int64_t>(r) * C8;
        const uint4* ur = gr + static_cast<int64_t>(G) * C8;
        const uint4* x = reinterpret_cast<const uint4*>(h + static_cast<int64_t>(p / Kt) * C);
        float g = 0.f, u = 0.f;
        for (int i = lane; i < C8; i += 32) {
          const uint4 xv = __ldg(x + i);
          g = gemv_detail::dot8<T>(gr[i], xv, g);
          u = gemv_detail::dot8<T>(ur[i], xv, u);
        }
        g = gemv_detail::warp_sum(g);
        u = gemv_detail::warp_sum(u);
        if (lane == 0) act[static_cast<int64_t>(p) * N + n0 + r] = from_f32<T>(gemv_detail::silu_mul_of<T>(g, u));
      }
      __syncwarp();
      if (lane == 0) bulk::bar_arrive(&empty[s]);
    }
  }
  __syncthreads();  // this block's act written
  if (threadIdx.x == 0) grid_barrier(sync, gridDim.x);
  __syncthreads();  // every block's act visible

  // Phase 2: the down+combine of the block's items, D in flight (3'.'s sums, 3'.'s bits).
  const uint4* actv = reinterpret_cast<const uint4*>(act);
  for (int k = 0;; ++k) {
    const int item = blockIdx.x + k * gridDim.x;
    if (item >= items) break;
    const int slot = k % D, t = item / cols, c0 = (item - t * cols) * R, rows = min(R, C - c0);
    if (warp < kConsumers) {
      for (int j = warp; j < Kt; j += kConsumers) {
        bulk::bar_wait(&dbar[slot][j], static_cast<uint32_t>((k / D) & 1));
        staged_detail::sum_pair_gx<T, R>(arena + slot * item_vecs + static_cast<int64_t>(j) * R * I8,
                                         actv + (static_cast<int64_t>(t) * Kt + j) * I8, rows, I8, lane, red[j]);
      }
    }
    __syncthreads();  // red complete; slot free
    staged_detail::combine<R>(red, weight + static_cast<int64_t>(t) * Kt, Kt, rows,
                              y + static_cast<int64_t>(t) * C + c0, accumulate);
    if (warp == kConsumers) {
      const int next = blockIdx.x + (k + D) * gridDim.x;
      if (next < items) issue_item(k + D, next);
    }
    __syncthreads();  // red read before the next item writes it
  }
}

struct GpuInfo {
  int sms = 0;
  bool bulk = false;
};
GpuInfo gpu_info() {
  static std::atomic<int> sms[64] = {}, major[64] = {};
  int dev = 0;
  VLM_CUDA_CHECK(cudaGetDevice(&dev));
  if (dev < 0 || dev >= 64) return {};
  if (sms[dev].load() == 0) {
    int n = 0, m = 0;
    VLM_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
    VLM_CUDA_CHECK(cudaDeviceGetAttribute(&m, cudaDevAttrComputeCapabilityMajor, dev));
    major[dev].store(m);
    sms[dev].store(n);
  }
  return GpuInfo{sms[dev].load(), major[dev].load() >= 9};
}

template <class Tt, int R>
void launch_fused(const FusedShape& f, const void* h, const void* gu, const void* down, const int32_t* expert,
                  const float* weight, int64_t T, int64_t K, int64_t I, int64_t C, void* act, float* y,
                  bool accumulate, uint32_t* sync, cudaStream_t s) {
  auto* kernel = pair_fused_kernel<Tt, R>;
  const size_t smem = static_cast<size_t>(f.arena);
  once_per_device(reinterpret_cast<const void*>(kernel), [&] {
    VLM_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kArenaBudget)));
  });
  // Blocks per SM for this arena (asked once per kernel and arena size: the decode step's shapes
  // repeat every layer).
  static std::atomic<int64_t> cached{-1};  // (smem << 8) | blocks per SM
  int64_t c = cached.load();
  if (c < 0 || (c >> 8) != static_cast<int64_t>(smem)) {
    int n = 0;
    VLM_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, kThreads, smem));
    c = (static_cast<int64_t>(smem) << 8) | std::min(n, 255);
    cached.store(c);
  }
  const int per_sm = static_cast<int>(c & 255);
  if (per_sm < 1) precondition_failed("moe_pair_fused: a block does not fit an SM");
  const int64_t Q = T * K * ((I + f.G - 1) / f.G), items = T * ((C + f.R - 1) / f.R);
  const int64_t grid = std::max<int64_t>(1, std::min<int64_t>(int64_t{gpu_info().sms} * per_sm, std::max(Q, items)));
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(grid));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cudaLaunchAttribute attr[1] = {};
  attr[0].id = cudaLaunchAttributeCooperative;  // every block resident: the grid barrier cannot hang
  attr[0].val.cooperative = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  VLM_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, static_cast<const Tt*>(h), static_cast<const Tt*>(gu),
                                    static_cast<const Tt*>(down), expert, weight, static_cast<int>(T),
                                    static_cast<int>(K), static_cast<int>(I), static_cast<int>(C), f.G, f.S, f.D,
                                    static_cast<Tt*>(act), y, accumulate, reinterpret_cast<unsigned*>(sync)));
}

template <class Tt>
void launch_rows(const FusedShape& f, const void* h, const void* gu, const void* down, const int32_t* expert,
                 const float* weight, int64_t T, int64_t K, int64_t I, int64_t C, void* act, float* y,
                 bool accumulate, uint32_t* sync, cudaStream_t s) {
  switch (f.R) {
    case 8: launch_fused<Tt, 8>(f, h, gu, down, expert, weight, T, K, I, C, act, y, accumulate, sync, s); break;
    case 4: launch_fused<Tt, 4>(f, h, gu, down, expert, weight, T, K, I, C, act, y, accumulate, sync, s); break;
    case 2: launch_fused<Tt, 2>(f, h, gu, down, expert, weight, T, K, I, C, act, y, accumulate, sync, s); break;
    default: launch_fused<Tt, 1>(f, h, gu, down, expert, weight, T, K, I, C, act, y, accumulate, sync, s); break;
  }
}

}  // namespace

bool moe_pair_fused_supported(int64_t K, int64_t I, int64_t C) {
  return K >= 1 && K <= kMoeMaxTopK && I > 0 && C > 0 && fused_shape(K, I, C).R > 0 && gpu_info().bulk;
}

void moe_pair_fused(const void* h, const void* gate_up, const void* down, const int32_t* expert, const float* weight,
                    DType dt, int64_t T, int64_t K, int64_t I, int64_t C, void* act, float* y, bool accumulate,
                    uint32_t* sync, cudaStream_t s) {
  if (T < 0 || K < 1 || K > kMoeMaxTopK || T * K > 65535 || I < 1 || I > (1 << 20) || C > (1 << 20) ||
      !moe_decode_supported(C, I, dt) || !moe_pair_fused_supported(K, I, C) || sync == nullptr)
    precondition_failed(
        "moe_pair_fused: T x K <= 65535, 1 <= K <= 32, 16-bit dt, C and I multiples of 8, an sm_90 GPU, the shapes "
        "of moe_pair_fused_supported, a sync buffer");
  if ((reinterpret_cast<uintptr_t>(h) | reinterpret_cast<uintptr_t>(gate_up) | reinterpret_cast<uintptr_t>(down) |
       reinterpret_cast<uintptr_t>(act)) %
          16 !=
      0)
    precondition_failed("moe_pair_fused: h, gate_up, down and act 16-byte aligned");
  if (T * K * I >= (int64_t{1} << 31) || T * C >= (int64_t{1} << 31))
    precondition_failed("moe_pair_fused: T x K x I and T x C below 2^31 (32-bit chunk and item indices)");
  if (T == 0) return;
  const FusedShape f = fused_shape(K, I, C);
  if (dt == DType::BF16) launch_rows<__nv_bfloat16>(f, h, gate_up, down, expert, weight, T, K, I, C, act, y, accumulate, sync, s);
  else launch_rows<__half>(f, h, gate_up, down, expert, weight, T, K, I, C, act, y, accumulate, sync, s);
  VLM_CUDA_CHECK_LAUNCH();
}

}  // namespace vlm::cuda
