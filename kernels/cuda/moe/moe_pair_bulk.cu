// moe_pair_down_combine_bulk (moe_decode.h 3b.): the staged down+combine (3'., moe_pair_staged.cu)
// with its shared-memory fill done by the copy engine: per pair j, ONE bulk copy of its R
// contiguous down rows (R x I x 2 bytes: 12 KB at the 30B-A3B shape) and one of its act row
// (I x 2 bytes), both completing on mbarrier j; warp w waits only on its own pairs' barriers and
// sums each as soon as it has landed (staged_detail::sum_pair: 3'.'s code, so the same bits), then
// the block's barrier and the combine in increasing j (staged_detail::combine).
//
// Why (not measured yet; bench_cuda_moe "kernel down_combine form=bulk" against "form=staged"):
// 3'. issues 6,912 16-byte cp.async per block (27 per thread, all threads, the whole fill behind
// one wait_group + block barrier), so its bytes in flight per SM are bounded by the SM's
// outstanding-request slots and no pair is summed before the last byte of all 8 has landed
// (session 19: 12.4 us for 25 MB, 2.0 TB/s of ~4.4). Here 16 bulk copies per block leave the SM's
// load path idle and the copy engine keeps the whole 96 KB in flight; the sums of the first pairs
// overlap the arrival of the last.
// Same grid, block and shared memory as 3'. (R from staged_rows: the same columns per block),
// plus K mbarriers (8 bytes each) in static shared memory. sm_90 only (cp.async.bulk):
// moe_pair_down_bulk_supported says false on an older GPU.
#include <atomic>
#include <cstdint>

#include "kernels/cuda/attention/cuda_attention_common.cuh"  // once_per_device
#include "kernels/cuda/core/cuda_check.h"
#include "kernels/cuda/core/element.cuh"
#include "kernels/cuda/moe/moe_bulk_copy.cuh"
#include "kernels/cuda/moe/moe_decode.h"
#include "kernels/cuda/moe/moe_pair_staged.cuh"

namespace vlm::cuda {
namespace {

using staged_detail::kThreads;
using staged_detail::kWarps;
constexpr int kMaxK = static_cast<int>(kMoeMaxTopK);
constexpr int64_t kBulkSmemBytes = 110592;  // moe_pair_staged.cu's kStagedSmemBytes: the same R per shape

int64_t bulk_smem(int64_t K, int64_t I, int R) { return K * (R + 1) * I * 2; }
int bulk_rows(int64_t K, int64_t I) {  // moe_pair_staged.cu's staged_rows
  for (int R = 8; R >= 1; R /= 2)
    if (bulk_smem(K, I, R) <= kBulkSmemBytes) return R;
  return 0;
}

// Block (blockIdx.x: columns [c0, c0 + R), blockIdx.y: token t). Shared: sw [K][R][I] (the
// pairs' down rows), sx [K][I] (the token's act rows): 3'.'s layout.
template <class T, int R>
__global__ void __launch_bounds__(kThreads)
    pair_down_bulk_kernel(const T* __restrict__ act, const T* __restrict__ w, const int32_t* __restrict__ expert,
                          const float* __restrict__ weight, int Kt, int C, int I, float* y, bool accumulate) {
  extern __shared__ __align__(128) unsigned char bk_smem[];
  __shared__ __align__(8) uint64_t bar[kMaxK];  // pair j's rows and act row landed
  __shared__ float wt[kMaxK];
  __shared__ float red[kMaxK][R];
  const int t = blockIdx.y, c0 = blockIdx.x * R, rows = min(R, C - c0), I8 = I / 8;
  const int64_t pair0 = static_cast<int64_t>(t) * Kt;
  uint4* sw = reinterpret_cast<uint4*>(bk_smem);       // [Kt][R][I8]
  uint4* sx = sw + static_cast<int64_t>(Kt) * R * I8;  // [Kt][I8]
  const int j = threadIdx.x;  // threads j < Kt (warp 0) own pair j's copies
  int64_t e = 0;
  if (j < Kt) {
    e = expert[pair0 + j];
    wt[j] = weight[pair0 + j];
    bulk::bar_init(&bar[j], 1);
  }
  __syncthreads();  // every barrier initialized before any thread waits on one
  if (j < Kt) {
    const uint32_t row_bytes = static_cast<uint32_t>(rows) * static_cast<uint32_t>(I) * 2u;
    const uint32_t act_bytes = static_cast<uint32_t>(I) * 2u;
    bulk::bar_expect(&bar[j], row_bytes + act_bytes);
    bulk::copy(sw + static_cast<int64_t>(j) * R * I8, w + (e * C + c0) * I, row_bytes, &bar[j]);
    bulk::copy(sx + static_cast<int64_t>(j) * I8, act + (pair0 + j) * I, act_bytes, &bar[j]);
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int p = warp; p < Kt; p += kWarps) {
    bulk::bar_wait(&bar[p], 0);
    staged_detail::sum_pair<T, R>(sw + static_cast<int64_t>(p) * R * I8, sx + static_cast<int64_t>(p) * I8, rows, I8,
                                  lane, red[p]);
  }
  __syncthreads();
  staged_detail::combine<R>(red, wt, Kt, rows, y + static_cast<int64_t>(t) * C + c0, accumulate);
}

template <class Kernel>
void opt_in(Kernel* kernel) {
  once_per_device(reinterpret_cast<const void*>(kernel), [&] {
    VLM_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kBulkSmemBytes)));
    VLM_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared));
  });
}

template <class Tt, int R>
void launch_bulk(const void* act, const void* down, const int32_t* expert, const float* weight, int64_t T, int64_t K,
                 int64_t C, int64_t I, float* y, bool accumulate, cudaStream_t s) {
  opt_in(pair_down_bulk_kernel<Tt, R>);
  const dim3 grid(static_cast<unsigned>((C + R - 1) / R), static_cast<unsigned>(T));
  pair_down_bulk_kernel<Tt, R><<<grid, kThreads, static_cast<size_t>(bulk_smem(K, I, R)), s>>>(
      static_cast<const Tt*>(act), static_cast<const Tt*>(down), expert, weight, static_cast<int>(K),
      static_cast<int>(C), static_cast<int>(I), y, accumulate);
}

template <class Tt>
void launch_rows(int R, const void* act, const void* down, const int32_t* expert, const float* weight, int64_t T,
                 int64_t K, int64_t C, int64_t I, float* y, bool accumulate, cudaStream_t s) {
  switch (R) {
    case 8: launch_bulk<Tt, 8>(act, down, expert, weight, T, K, C, I, y, accumulate, s); break;
    case 4: launch_bulk<Tt, 4>(act, down, expert, weight, T, K, C, I, y, accumulate, s); break;
    case 2: launch_bulk<Tt, 2>(act, down, expert, weight, T, K, C, I, y, accumulate, s); break;
    default: launch_bulk<Tt, 1>(act, down, expert, weight, T, K, C, I, y, accumulate, s); break;
  }
}

// Whether the current GPU has the bulk copies (compute capability 9.0+); asked once per device.
bool gpu_has_bulk_copy() {
  static std::atomic<int> cached[64] = {};  // 0 unknown, 1 yes, 2 no
  int dev = 0;
  VLM_CUDA_CHECK(cudaGetDevice(&dev));
  if (dev < 0 || dev >= 64) return false;
  if (cached[dev].load() == 0) {
    int major = 0;
    VLM_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    cached[dev].store(major >= 9 ? 1 : 2);
  }
  return cached[dev].load() == 1;
}

}  // namespace

bool moe_pair_down_bulk_supported(int64_t K, int64_t I) {
  return K >= 1 && K <= kMoeMaxTopK && I > 0 && bulk_rows(K, I) > 0 && gpu_has_bulk_copy();
}

void moe_pair_down_combine_bulk(const void* act, const void* down, const int32_t* expert, const float* weight,
                                DType dt, int64_t T, int64_t K, int64_t C, int64_t I, float* y, bool accumulate,
                                cudaStream_t s) {
  if (T < 0 || T > 65535 || K < 1 || K > kMoeMaxTopK || C < 1 || C > (1 << 20) || I > (1 << 20) ||
      !moe_decode_supported(C, I, dt) || !moe_pair_down_bulk_supported(K, I))
    precondition_failed(
        "moe_pair_down_combine_bulk: 0 <= T <= 65535, 1 <= K <= 32, 16-bit dt, C and I multiples of 8, "
        "K x I x 2 x 2 bytes <= 110,592, an sm_90 GPU (moe_pair_down_bulk_supported)");
  if ((reinterpret_cast<uintptr_t>(act) | reinterpret_cast<uintptr_t>(down)) % 16 != 0)
    precondition_failed("moe_pair_down_combine_bulk: act and down 16-byte aligned");
  if (T == 0) return;
  const int R = bulk_rows(K, I);
  if (dt == DType::BF16) launch_rows<__nv_bfloat16>(R, act, down, expert, weight, T, K, C, I, y, accumulate, s);
  else launch_rows<__half>(R, act, down, expert, weight, T, K, C, I, y, accumulate, s);
  VLM_CUDA_CHECK_LAUNCH();
}

}  // namespace vlm::cuda
