// LOOK-M's similarity search with Hopper warpgroup MMA (sm_90a, D = 128; contract in
// look_m_search_mma.cuh, look_m_search_wgmma). CTA: 2 warpgroups x 64 evicted rows (rows listed in
// `rows`, one SW128 shared tile of 128 x D, the A operand of every product), the gathered kept keys
// (look_m_gather_kept) streamed through two SW128 stages of 128 keys by cp.async, the next
// tile's copy in flight during the current one. Per tile and warpgroup: S[64 x 128] by 8 wgmma
// m64n128k16 (both operands from shared memory), then each thread folds its 2 rows x 32 columns,
// scaled by ic, into its running first maximum (columns in increasing order, strict >); the quad
// merges at the end, the lower kept index on equal values; w = max * ie. The same decisions as the
// mma.sync kernel (look_m_search_mma.cu) but for the tensor cores' summation order.
#include <cuda_runtime.h>

#include "kernels/cuda/attention/cuda_attention_common.cuh"
#include "kernels/cuda/attention/wgmma_tile.cuh"
#include "kernels/cuda/core/cuda_check.h"
#include "kernels/cuda/kv_compression/look_m_search_mma.cuh"

namespace vlm::cuda {
namespace {

constexpr int kD = 128, kRows = 128, kKeys = 128, kThreads = 256, kChunks = kD / 8;
constexpr int kTile = kKeys * kD;  // elements of one stage
constexpr int kSmem = (kRows * kD + 2 * kTile) * 2 + 2 * kKeys * 4 + 1024;

__device__ __forceinline__ void cp_async4(void* dst, const void* src, int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(tile::smem_addr(dst)), "l"(src), "r"(src_bytes));
}

// Kept keys [c0, c0 + kKeys) of the gathered copy (kk_h [C, D], contiguous) into an SW128 stage,
// their inverse norms into sic; zero past C.
template <class T>
__device__ __forceinline__ void load_kept(const T* kk_h, const float* kic_h, int C, int c0, T* sk, float* sic, int tid) {
#pragma unroll
  for (int i = 0; i < kKeys * kChunks / kThreads; ++i) {
    const int e = tid + kThreads * i, t = e / kChunks, ch = e % kChunks, c = c0 + t;
    tile::cp_async16(sk + wg::sw128<kKeys>(t, ch), kk_h + (c < C ? int64_t(c) * kD + ch * 8 : 0), c < C ? 16 : 0);
  }
  if (tid < kKeys) cp_async4(sic + tid, kic_h + (c0 + tid < C ? c0 + tid : 0), c0 + tid < C ? 4 : 0);
}

template <class T>
__global__ void __launch_bounds__(kThreads, 2)
search_wgmma_kernel(KVView kv, const int32_t* __restrict__ table, int L, const int32_t* __restrict__ rows, int E,
                    int C, const T* __restrict__ kk, const float* __restrict__ kic, const float* __restrict__ inv,
                    int32_t* __restrict__ out_arg, float* __restrict__ out_w) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  // 1024-byte aligned base (the 128-byte swizzle's pattern repeats every 1024 bytes).
  unsigned char* smem = smem_raw + ((1024 - (tile::smem_addr(smem_raw) & 1023)) & 1023);
  T* sr = reinterpret_cast<T*>(smem);                   // [kRows][kD] SW128
  T* sk = sr + kRows * kD;                              // [2][kKeys][kD] SW128
  float* sic = reinterpret_cast<float*>(sk + 2 * kTile);  // [2][kKeys]
  const int h = blockIdx.y, tid = threadIdx.x, wgi = tid / 128, warp = (tid % 128) / 32, lane = tid % 32;
  const int i0 = blockIdx.x * kRows;
  const int32_t* rows_h = rows + int64_t(h) * E;
  const float* inv_h = inv + int64_t(h) * L;
  const T* kk_h = kk + int64_t(h) * C * kD;
  const float* kic_h = kic + int64_t(h) * C;
  {  // the CTA's rows: positions, then cache offsets (independent loads), then the copies
    constexpr int kStep = kThreads / kChunks, kPer = kRows / kStep;
    const int ch = tid % kChunks;
    int64_t off[kPer];
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int idx = i0 + tid / kChunks + kStep * i;
      off[i] = idx < E ? rows_h[idx] : -1;
    }
#pragma unroll
    for (int i = 0; i < kPer; ++i)
      if (off[i] >= 0) off[i] = kv.offset(table[off[i] / kv.block_size], h, int(off[i] % kv.block_size)) + ch * 8;
    const T* kb = static_cast<const T*>(kv.k);
#pragma unroll
    for (int i = 0; i < kPer; ++i)
      tile::cp_async16(sr + wg::sw128<kRows>(tid / kChunks + kStep * i, ch), kb + (off[i] >= 0 ? off[i] : 0),
                       off[i] >= 0 ? 16 : 0);
  }
  load_kept<T>(kk_h, kic_h, C, 0, sk, sic, tid);
  tile::cp_async_commit();
  // This thread's rows: r_j = 64 wgi + 16 warp + lane / 4 + 8 j.
  float ie[2], best[2] = {-INFINITY, -INFINITY};
  int arg[2] = {0, 0};
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const int idx = i0 + 64 * wgi + 16 * warp + lane / 4 + 8 * j;
    ie[j] = idx < E ? inv_h[rows_h[idx]] : 0.f;
  }
  const int tiles = (C + kKeys - 1) / kKeys;
  for (int t = 0; t < tiles; ++t) {
    const int buf = t & 1;
    if (t + 1 < tiles) {  // stage buf ^ 1 was last read in tile t - 1, behind its closing barrier
      load_kept<T>(kk_h, kic_h, C, (t + 1) * kKeys, sk + (buf ^ 1) * kTile, sic + (buf ^ 1) * kKeys, tid);
      tile::cp_async_commit();
      tile::cp_async_wait<1>();
    } else {
      tile::cp_async_wait<0>();
    }
    wg::fence_proxy_async();
    __syncthreads();
    const T* k = sk + buf * kTile;
    float s[16][4];
    wg::fence();
#pragma unroll
    for (int q = 0; q < kD / 16; ++q)
      wg::mma_ss<T>(s, wg::desc_k_major<kRows>(sr, 64 * wgi, q), wg::desc_k_major<kKeys>(k, 0, q), q > 0);
    wg::commit();
    wg::wait<0>();
    wg::fence_regs(s);
    const int c0 = t * kKeys;
    const bool full = c0 + kKeys <= C;
#pragma unroll
    for (int n = 0; n < 16; ++n)
#pragma unroll
      for (int q = 0; q < 2; ++q) {  // columns in increasing order: strict > keeps the first maximum
        const int col = n * 8 + 2 * (lane % 4) + q, c = c0 + col;
        const float ic = sic[buf * kKeys + col];
        const bool on = full || c < C;
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const float v = s[n][2 * j + q] * ic;
          if (on && v > best[j]) {
            best[j] = v;
            arg[j] = c;
          }
        }
      }
    __syncthreads();
  }
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    float bv = best[j];
    int bc = arg[j];
    for (int o = 1; o < 4; o *= 2) {
      const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
      const int oc = __shfl_xor_sync(0xffffffffu, bc, o);
      if (ov > bv || (ov == bv && oc < bc)) {
        bv = ov;
        bc = oc;
      }
    }
    const int idx = i0 + 64 * wgi + 16 * warp + lane / 4 + 8 * j;
    if (lane % 4 == 0 && idx < E) {
      const int e = rows_h[idx];
      out_arg[int64_t(h) * L + e] = bc;
      out_w[int64_t(h) * L + e] = bv * ie[j];
    }
  }
#endif
}

template <class T>
void launch(const PagedKVLayer& kv, const int32_t* table, int32_t L, const int32_t* rows, int32_t E, int32_t C,
            const void* kk, const float* kic, const float* inv, int32_t* arg, float* w, cudaStream_t stream) {
  const bool smem_ok = allow_dynamic_smem(search_wgmma_kernel<T>, kSmem);
  (void)smem_ok;
  search_wgmma_kernel<T><<<dim3((E + kRows - 1) / kRows, kv.num_kv_heads), kThreads, kSmem, stream>>>(
      kv_view(kv), table, L, rows, E, C, static_cast<const T*>(kk), kic, inv, arg, w);
  VLM_CUDA_CHECK_LAUNCH();
}

}  // namespace

bool look_m_search_wgmma_supported(DType dt, int head_dim) {
  static const int major = [] {
    int dev = 0, m = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return 0;
    if (cudaDeviceGetAttribute(&m, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) return 0;
    return m;
  }();
  return major == 9 && head_dim == kD && (dt == DType::BF16 || dt == DType::F16);
}

void look_m_search_wgmma(const PagedKVLayer& kv, const int32_t* table, int32_t L, const int32_t* rows, int32_t E,
                         int32_t C, const void* kept_keys, const float* kept_inv, const float* inv, int32_t* arg,
                         float* w, cudaStream_t stream) {
  VLM_CHECK(look_m_search_wgmma_supported(kv.dtype, kv.head_dim) && C > 0 && E >= 0 && E <= L && rows != nullptr,
            "LOOK-M wgmma search: {} D {} C {} E {}", dtype_name(kv.dtype), kv.head_dim, C, E);
  if (E == 0) return;
  if (kv.dtype == DType::BF16) launch<__nv_bfloat16>(kv, table, L, rows, E, C, kept_keys, kept_inv, inv, arg, w, stream);
  else launch<__half>(kv, table, L, rows, E, C, kept_keys, kept_inv, inv, arg, w, stream);
}

}  // namespace vlm::cuda
