// moe_pair_gate_up_ring (moe_decode.h 2b.): the one-token gate|up product streamed through a ring
// of shared-memory stages filled by the copy engine, one persistent block per SM.
//
// Work: chunks of G consecutive columns n0..n0+G of one pair p (q = p x ceil(I / G) + n0 / G);
// block b takes chunks b, b + grid, b + 2 grid, ... A producer warp (its lane 0) fills stage
// k % S with chunk k's G gate rows and G up rows (each G x C contiguous in gate_up [E, 2I, C]: two
// bulk copies, completing on full[s]) as soon as the 8 consumer warps have released the stage
// (empty[s]); consumer warp w sums column n0 + w of the chunk from shared memory exactly as
// moe_pair_gate_up (2.) sums it (lane l: 16-byte vectors l, l + 32, ... in order, gate and up
// apart, h[t] through L1, the xor butterfly, silu(round(g)) * round(u)): 2.'s bits.
// G = 8 and S = 3 at C = 2048 (64 KB stages, 192 KB of the 227 KB a block may hold): each SM
// keeps 128-192 KB of gate|up in flight for the whole launch, with no second wave and no block
// waiting on its slowest load before the next one is asked for.
// Why (not measured yet; bench_cuda_moe "kernel gate_up form=ring" against "form=pair"): 2. read
// the 50 MB of a 30B-A3B layer's 8 gate|up slices at 3.1-3.3 TB/s (15.4-16.3 us) in ~2.3 waves of
// 6,144 warps each holding 8 KB in registers; 2'. (cp.async, 2 blocks per SM, ~1.9 waves) was
// slower (17.6 us).
// sm_90 only (cp.async.bulk, mbarrier tx counts): moe_pair_gate_up_ring_supported says false on an
// older GPU.
#include <algorithm>
#include <atomic>
#include <cstdint>

#include "kernels/cuda/attention/cuda_attention_common.cuh"  // once_per_device
#include "kernels/cuda/core/cuda_check.h"
#include "kernels/cuda/core/element.cuh"
#include "kernels/cuda/gemm/gemv_warp.cuh"
#include "kernels/cuda/moe/moe_bulk_copy.cuh"
#include "kernels/cuda/moe/moe_decode.h"

namespace vlm::cuda {
namespace {

constexpr int kConsumers = 8, kThreads = 32 * (kConsumers + 1);  // + the producer warp
constexpr int kMaxStages = 4;
constexpr int64_t kStageBudget = 64 * 1024;  // bytes of one stage at most (G shrinks for a wide C)
constexpr int64_t kRingBudget = 200 * 1024;  // bytes of all stages at most (227 KB per block on sm_90)

struct RingShape {
  int G = 0, S = 0;  // columns per chunk, stages
  int64_t stage = 0;  // bytes per stage: 2 x G x C x 2
};
RingShape ring_shape(int64_t C) {
  RingShape r;
  for (int G = 8; G >= 1; G /= 2) {
    const int64_t stage = 2 * static_cast<int64_t>(G) * C * 2;
    if (stage <= kStageBudget || G == 1) {
      r.G = G;
      r.stage = stage;
      r.S = static_cast<int>(std::min<int64_t>(kMaxStages, kRingBudget / stage));
      break;
    }
  }
  if (r.S < 2) r = RingShape{};  // C too wide for two stages: unsupported
  return r;
}

// Shared: stage s = [G][C8] gate rows then [G][C8] up rows. h [T, C], gate_up [E, 2N, C], act [P, N].
template <class T>
__global__ void __launch_bounds__(kThreads)
    pair_gate_up_ring_kernel(const T* __restrict__ h, const T* __restrict__ w, const int32_t* __restrict__ expert,
                             int P, int Kt, int N, int C, int G, int S, T* __restrict__ act) {
  extern __shared__ __align__(128) unsigned char rg_smem[];
  __shared__ __align__(8) uint64_t full[kMaxStages], empty[kMaxStages];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, C8 = C / 8;
  const int per_pair = (N + G - 1) / G;
  const int Q = P * per_pair;
  const int64_t stage_vecs = 2 * static_cast<int64_t>(G) * C8;
  if (threadIdx.x < S) {
    bulk::bar_init(&full[threadIdx.x], 1);
    bulk::bar_init(&empty[threadIdx.x], kConsumers);
  }
  __syncthreads();
  uint4* ring = reinterpret_cast<uint4*>(rg_smem);
  if (warp == kConsumers) {  // the producer
    if (lane != 0) return;
    int k = 0;
    for (int q = blockIdx.x; q < Q; q += gridDim.x, ++k) {
      const int s = k % S;
      if (k >= S) bulk::bar_wait(&empty[s], static_cast<uint32_t>((k / S - 1) & 1));
      const int p = q / per_pair, n0 = (q - p * per_pair) * G, rows = min(G, N - n0);
      const int64_t e = expert[p];
      const uint32_t bytes = static_cast<uint32_t>(rows) * static_cast<uint32_t>(C) * 2u;
      const T* g0 = w + (e * 2 * N + n0) * C;
      uint4* sg = ring + s * stage_vecs;
      bulk::bar_expect(&full[s], 2u * bytes);
      bulk::copy(sg, g0, bytes, &full[s]);
      bulk::copy(sg + static_cast<int64_t>(G) * C8, g0 + static_cast<int64_t>(N) * C, bytes, &full[s]);
    }
    return;
  }
  int k = 0;
  for (int q = blockIdx.x; q < Q; q += gridDim.x, ++k) {
    const int s = k % S;
    const int p = q / per_pair, n0 = (q - p * per_pair) * G, rows = min(G, N - n0);
    bulk::bar_wait(&full[s], static_cast<uint32_t>((k / S) & 1));
    for (int r = warp; r < rows; r += kConsumers) {  // G <= 8: one column per warp at most
      const uint4* gr = ring + s * stage_vecs + static_cast<int64_t>(r) * C8;
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
    if (lane == 0) bulk::bar_arrive(&empty[s]);  // this warp is done with stage s
  }
}

// The current GPU's SM count and whether it has the bulk copies (9.0+); asked once per device.
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

template <class Tt>
void launch_ring(const void* h, const void* w, const int32_t* expert, int64_t T, int64_t K, int64_t I, int64_t C,
                 void* act, cudaStream_t s) {
  const RingShape r = ring_shape(C);
  const size_t smem = static_cast<size_t>(r.stage * r.S);
  once_per_device(reinterpret_cast<const void*>(pair_gate_up_ring_kernel<Tt>), [&] {
    VLM_CUDA_CHECK(cudaFuncSetAttribute(pair_gate_up_ring_kernel<Tt>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(kRingBudget)));
  });
  const int64_t P = T * K, Q = P * ((I + r.G - 1) / r.G);
  const auto grid = static_cast<unsigned>(std::min<int64_t>(Q, gpu_info().sms));
  pair_gate_up_ring_kernel<Tt><<<grid, kThreads, smem, s>>>(
      static_cast<const Tt*>(h), static_cast<const Tt*>(w), expert, static_cast<int>(P), static_cast<int>(K),
      static_cast<int>(I), static_cast<int>(C), r.G, r.S, static_cast<Tt*>(act));
}

}  // namespace

bool moe_pair_gate_up_ring_supported(int64_t C) { return C > 0 && ring_shape(C).S >= 2 && gpu_info().bulk; }

void moe_pair_gate_up_ring(const void* h, const void* gate_up, const int32_t* expert, DType dt, int64_t T, int64_t K,
                           int64_t I, int64_t C, void* act, cudaStream_t s) {
  if (T < 0 || K < 1 || K > kMoeMaxTopK || T * K > 65535 || I < 1 || I > (1 << 20) || C > (1 << 20) ||
      !moe_decode_supported(C, I, dt) || !moe_pair_gate_up_ring_supported(C))
    precondition_failed(
        "moe_pair_gate_up_ring: T x K <= 65535, 1 <= K <= 32, 16-bit dt, C and I multiples of 8, two 2 x C x 2-byte "
        "stages in 200 KB, an sm_90 GPU (moe_pair_gate_up_ring_supported)");
  if ((reinterpret_cast<uintptr_t>(h) | reinterpret_cast<uintptr_t>(gate_up)) % 16 != 0)
    precondition_failed("moe_pair_gate_up_ring: h and gate_up 16-byte aligned");
  if (T * K * I >= (int64_t{1} << 31) || T * C >= (int64_t{1} << 31))
    precondition_failed("moe_pair_gate_up_ring: T x K x I and T x C below 2^31 (32-bit chunk and item indices)");
  if (T == 0) return;
  if (dt == DType::BF16) launch_ring<__nv_bfloat16>(h, gate_up, expert, T, K, I, C, act, s);
  else launch_ring<__half>(h, gate_up, expert, T, K, I, C, act, s);
  VLM_CUDA_CHECK_LAUNCH();
}

}  // namespace vlm::cuda
