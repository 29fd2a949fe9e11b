// LOOK-M's tensor-core similarity search (look_m_search_mma.cuh). The kept keys are first gathered
// into one contiguous [Hkv, C, D] copy (a tile's addresses then need no dependent loads of kept
// positions and block tables in the loop). CTA: 4 warps x 64 rows (the evicted positions of
// `rows`, four 16-row slabs of A fragments held in registers), kept keys streamed from the copy
// through double-buffered swizzled shared tiles of 64 (cp.async). Each warp computes one 8-key
// column block at a time (S[64 x 8] by mma.sync m16n8k16, every B fragment read once from shared
// memory for the warp's 64 rows: half the shared-memory traffic per product of 32-row warps) and
// folds it, scaled by ic, into each thread's running first maximum (the row's ie > 0 does not
// change the order: w = max * ie at the end); the 4 threads of a row (quad) merge at the end, the
// lower kept index on equal values. Work: E * C * D multiply-adds per kv head on tensor cores.
#include "kernels/cuda/kv_compression/look_m_search_mma.cuh"

#include <cuda_runtime.h>

#include "kernels/cuda/attention/cuda_attention_common.cuh"
#include "kernels/cuda/attention/mma_tile.cuh"
#include "kernels/cuda/core/cuda_check.h"

namespace vlm::cuda {
namespace {

constexpr int kWarps = 4, kMT = 4, kRows = 16 * kMT * kWarps, kKeys = 64, kNK = kKeys / 8;

// 4-byte async copy global -> shared (src_bytes 0: zero).
__device__ __forceinline__ void cp_async4(void* dst, const void* src, int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(tile::smem_addr(dst)), "l"(src), "r"(src_bytes));
}

// Kept keys [c0, c0 + kKeys) of head h from the gathered copy kk[h, C, D] (contiguous: the
// addresses need no loads) into a swizzled tile, their inverse norms into sic; zero past C.
template <int D, class T>
__device__ __forceinline__ void load_kept_tile(const T* kk_h, const float* kic_h, int C, int c0, T* sk, float* sic,
                                               int tid) {
  constexpr int kChunks = D / 8;
#pragma unroll 4
  for (int i = tid; i < kKeys * kChunks; i += 32 * kWarps) {
    const int t = i / kChunks, ch = i % kChunks, c = c0 + t;
    tile::cp_async16(sk + tile::swz<D>(t, ch * 8), kk_h + (c < C ? int64_t(c) * D + ch * 8 : 0), c < C ? 16 : 0);
  }
  if (tid < kKeys) cp_async4(sic + tid, kic_h + (c0 + tid < C ? c0 + tid : 0), c0 + tid < C ? 4 : 0);
}

// grid (ceil(C * D / 8 / 256), Hkv): kk[h, c, :] = K of kept[h, c] (16-byte chunks), kic[h, c] = its
// inverse norm.
template <int D>
__global__ void gather_kept_kernel(KVView kv, const int32_t* __restrict__ table, int L, int C,
                                   const int32_t* __restrict__ kept, const float* __restrict__ inv, uint4* __restrict__ kk,
                                   float* __restrict__ kic) {
  constexpr int kChunks = D / 8;
  const int h = blockIdx.y, i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= C * kChunks) return;
  const int c = i / kChunks, ch = i % kChunks, p = kept[int64_t(h) * C + c];
  const uint16_t* kb = static_cast<const uint16_t*>(kv.k);
  kk[(int64_t(h) * C + c) * kChunks + ch] =
      *reinterpret_cast<const uint4*>(kb + kv.offset(table[p / kv.block_size], h, p % kv.block_size) + ch * 8);
  if (ch == 0) kic[int64_t(h) * C + c] = inv[int64_t(h) * L + p];
}

// rows [Hkv, E]: the positions searched (null: every position, E = L).
template <int D, class T>
__global__ void __launch_bounds__(32 * kWarps, 2)
search_mma_kernel(KVView kv, const int32_t* __restrict__ table, int L, const int32_t* __restrict__ rows, int E, int C,
                  const T* __restrict__ kk, const float* __restrict__ kic, const float* __restrict__ inv,
                  int32_t* __restrict__ out_arg, float* __restrict__ out_w) {
  extern __shared__ __align__(128) unsigned char smem[];
  T* sr = reinterpret_cast<T*>(smem);                          // [kRows][D] swizzled
  T* sk = sr + kRows * D;                                      // [2][kKeys][D] swizzled
  float* sic = reinterpret_cast<float*>(sk + 2 * kKeys * D);  // [2][kKeys]
  const int h = blockIdx.y, tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int i0 = blockIdx.x * kRows;
  const T* kk_h = kk + int64_t(h) * C * D;
  const float* kic_h = kic + int64_t(h) * C;
  const int32_t* rows_h = rows ? rows + int64_t(h) * E : nullptr;
  const float* inv_h = inv + int64_t(h) * L;
  constexpr int kChunks = D / 8;
  const T* kb = static_cast<const T*>(kv.k);
  // The CTA's rows: thread tid copies chunk tid % kChunks of rows tid / kChunks + kStep * i; their
  // cache offsets first (independent loads), then the copies.
  constexpr int kStep = 32 * kWarps / kChunks, kPer = kRows / kStep;
  const int ch = tid % kChunks;
  int64_t off[kPer];
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int idx = i0 + tid / kChunks + kStep * i;
    off[i] = idx < E ? (rows_h ? rows_h[idx] : idx) : -1;
  }
#pragma unroll
  for (int i = 0; i < kPer; ++i)
    if (off[i] >= 0) off[i] = kv.offset(table[off[i] / kv.block_size], h, int(off[i] % kv.block_size)) + ch * 8;
#pragma unroll
  for (int i = 0; i < kPer; ++i)
    tile::cp_async16(sr + tile::swz<D>(tid / kChunks + kStep * i, ch * 8), kb + (off[i] >= 0 ? off[i] : 0),
                     off[i] >= 0 ? 16 : 0);
  load_kept_tile<D, T>(kk_h, kic_h, C, 0, sk, sic, tid);
  tile::cp_async_commit();
  tile::cp_async_wait<0>();
  __syncthreads();
  uint32_t qf[kMT][D / 16][4];  // A fragments of the warp's four 16-row slabs
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
      tile::ldmatrix_x4(qf[mt][kk], sr + tile::swz<D>(warp * 16 * kMT + mt * 16 + (lane & 7) + ((lane >> 3) & 1) * 8,
                                                     kk * 16 + (lane >> 4) * 8));
  // Rows of this thread: slab mt, half j: row index i0 + warp * 64 + mt * 16 + lane / 4 + 8 j.
  float ie[kMT][2], best[kMT][2];
  int arg[kMT][2];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int idx = i0 + warp * 16 * kMT + mt * 16 + lane / 4 + 8 * j;
      ie[mt][j] = idx < E ? inv_h[rows_h ? rows_h[idx] : idx] : 0.f;
      best[mt][j] = -INFINITY;
      arg[mt][j] = 0;
    }
  const int tiles = (C + kKeys - 1) / kKeys;
  for (int t = 0; t < tiles; ++t) {
    const int buf = t & 1;
    // The other buffer was last read in tile t - 1, behind that tile's closing barrier.
    if (t + 1 < tiles)
      load_kept_tile<D, T>(kk_h, kic_h, C, (t + 1) * kKeys, sk + (buf ^ 1) * kKeys * D, sic + (buf ^ 1) * kKeys, tid);
    tile::cp_async_commit();
    const T* k = sk + buf * kKeys * D;
    const int c0 = t * kKeys;
    const bool full = c0 + kKeys <= C;
#pragma unroll 2
    for (int n = 0; n < kNK; ++n) {
      float s[kMT][4] = {};
#pragma unroll
      for (int kk = 0; kk < D / 16; kk += 2) {
        uint32_t b[4];
        tile::ldmatrix_x4(b, k + tile::swz<D>(n * 8 + (lane & 7), kk * 16 + (lane >> 3) * 8));
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          tile::mma<T>(s[mt], qf[mt][kk], b[0], b[1]);
          tile::mma<T>(s[mt], qf[mt][kk + 1], b[2], b[3]);
        }
      }
#pragma unroll
      for (int q = 0; q < 2; ++q) {  // columns in increasing order: strict > keeps the first maximum
        const int col = n * 8 + 2 * (lane % 4) + q, c = c0 + col;
        const float ic = sic[buf * kKeys + col];
        const bool on = full || c < C;
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            const float v = s[mt][2 * j + q] * ic;  // the row's 1 / |k_e| > 0 applies at the end
            if (on && v > best[mt][j]) {
              best[mt][j] = v;
              arg[mt][j] = c;
            }
          }
      }
    }
    tile::cp_async_wait<0>();
    __syncthreads();
  }
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      float bv = best[mt][j];
      int bc = arg[mt][j];
      for (int o = 1; o < 4; o *= 2) {
        const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        const int oc = __shfl_xor_sync(0xffffffffu, bc, o);
        if (ov > bv || (ov == bv && oc < bc)) {
          bv = ov;
          bc = oc;
        }
      }
      const int idx = i0 + warp * 16 * kMT + mt * 16 + lane / 4 + 8 * j;
      if (lane % 4 == 0 && idx < E) {
        const int e = rows_h ? rows_h[idx] : idx;
        out_arg[int64_t(h) * L + e] = bc;
        out_w[int64_t(h) * L + e] = bv * ie[mt][j];
      }
    }
}

template <int D, class T>
void launch(const PagedKVLayer& kv, const int32_t* table, int32_t L, const int32_t* rows, int32_t E, int32_t C,
            const void* kk, const float* kic, const float* inv, int32_t* arg, float* w, cudaStream_t stream) {
  const size_t smem = size_t(kRows + 2 * kKeys) * D * sizeof(T) + 2 * kKeys * sizeof(float);
  const bool attr = allow_dynamic_smem(search_mma_kernel<D, T>, int(smem));  // once per kernel and device
  (void)attr;
  search_mma_kernel<D, T><<<dim3((E + kRows - 1) / kRows, kv.num_kv_heads), 32 * kWarps, smem, stream>>>(
      kv_view(kv), table, L, rows, E, C, static_cast<const T*>(kk), kic, inv, arg, w);
  VLM_CUDA_CHECK_LAUNCH();
}

}  // namespace

bool look_m_search_mma_supported(DType dt, int head_dim) {
  return (dt == DType::BF16 || dt == DType::F16) && (head_dim == 64 || head_dim == 128);
}

void look_m_gather_kept(const PagedKVLayer& kv, const int32_t* table, int32_t L, const int32_t* kept, int32_t C,
                        const float* inv, void* kept_keys, float* kept_inv, cudaStream_t stream) {
  VLM_CHECK(look_m_search_mma_supported(kv.dtype, kv.head_dim) && C > 0, "LOOK-M kept-key gather: {} D {} C {}",
            dtype_name(kv.dtype), kv.head_dim, C);
  const int chunks = C * (kv.head_dim / 8);
  const dim3 grid((chunks + 255) / 256, kv.num_kv_heads);
  if (kv.head_dim == 64)
    gather_kept_kernel<64><<<grid, 256, 0, stream>>>(kv_view(kv), table, L, C, kept, inv, static_cast<uint4*>(kept_keys),
                                                     kept_inv);
  else
    gather_kept_kernel<128><<<grid, 256, 0, stream>>>(kv_view(kv), table, L, C, kept, inv,
                                                      static_cast<uint4*>(kept_keys), kept_inv);
  VLM_CUDA_CHECK_LAUNCH();
}

void look_m_search_mma(const PagedKVLayer& kv, const int32_t* table, int32_t L, const int32_t* rows, int32_t E,
                       int32_t C, const void* kept_keys, const float* kept_inv, const float* inv, int32_t* arg,
                       float* w, cudaStream_t stream) {
  VLM_CHECK(look_m_search_mma_supported(kv.dtype, kv.head_dim) && C > 0 && E >= 0 && E <= L,
            "LOOK-M mma search: {} D {} C {} E {}", dtype_name(kv.dtype), kv.head_dim, C, E);
  if (E == 0) return;
  if (kv.dtype == DType::BF16) {
    if (kv.head_dim == 64) launch<64, __nv_bfloat16>(kv, table, L, rows, E, C, kept_keys, kept_inv, inv, arg, w, stream);
    else launch<128, __nv_bfloat16>(kv, table, L, rows, E, C, kept_keys, kept_inv, inv, arg, w, stream);
  } else {
    if (kv.head_dim == 64) launch<64, __half>(kv, table, L, rows, E, C, kept_keys, kept_inv, inv, arg, w, stream);
    else launch<128, __half>(kv, table, L, rows, E, C, kept_keys, kept_inv, inv, arg, w, stream);
  }
}

}  // namespace vlm::cuda
