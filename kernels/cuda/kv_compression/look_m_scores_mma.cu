// LOOK-M's score passes on tensor cores (look_m_scores_mma.cuh). CTA: 4 warps x 32 keys (a chunk
// of 128, the f32 kernels' chunk, so the partials' layout is theirs), the keys' A fragments in
// registers; the kv group's query rows (R x G, row n = r * G + g) streamed through
// double-buffered swizzled shared tiles of 64 (cp.async). Each warp computes S^T[32 keys x 64 rows]
// by mma.sync m16n8k16 per tile. Stats pass: per row, the max over the warp's keys (quad lanes and
// shuffles), the sum of exp against it, merged over the 4 warps in shared memory. Column pass:
// each thread sums exp(s - max) * (1 / sum) over its rows per key (the reciprocal once per row: an
// ulp from the f32 kernels' division), the quad merges at the end.
#include "kernels/cuda/kv_compression/look_m_scores_mma.cuh"

#include <cuda_runtime.h>

#include "kernels/cuda/attention/cuda_attention_common.cuh"
#include "kernels/cuda/attention/mma_tile.cuh"
#include "kernels/cuda/core/cuda_check.h"

namespace vlm::cuda {
namespace {

constexpr int kWarps = 4, kMT = 2, kChunk = 16 * kMT * kWarps, kCols = 64, kNC = kCols / 8;
static_assert(kChunk == 128, "the partials' chunk is the f32 kernels' 128 keys");

// 8-byte async copy global -> shared.
__device__ __forceinline__ void cp_async8(void* dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(tile::smem_addr(dst)), "l"(src));
}

// Query rows [n0, n0 + kCols) of kv group hk into a swizzled tile; per column its last visible
// key (first_pos + r; -1 past the rows) and, for the column pass, its (max, sum).
template <int D, class T, bool kColumns>
__device__ __forceinline__ void load_rows(const T* q, int H, int hk, int G, int NQ, int n0, int first_pos,
                                          const float2* stats, T* sq, int* slim, float2* sst, int tid) {
  constexpr int kChunks = D / 8;
  for (int i = tid; i < kCols * kChunks; i += 32 * kWarps) {
    const int t = i / kChunks, ch = i % kChunks, n = n0 + t;
    const int64_t off = n < NQ ? (int64_t(n / G) * H + hk * G + n % G) * D + ch * 8 : 0;
    tile::cp_async16(sq + tile::swz<D>(t, ch * 8), q + off, n < NQ ? 16 : 0);
  }
  if (tid < kCols) {
    const int n = n0 + tid;
    slim[tid] = n < NQ ? first_pos + n / G : -1;
    if constexpr (kColumns) {  // past NQ: any row's (never read: slim -1)
      const int m = n < NQ ? n : 0;
      cp_async8(sst + tid, stats + int64_t(m / G) * H + hk * G + m % G);
    }
  }
}

template <int D, class T, bool kColumns>
__global__ void __launch_bounds__(32 * kWarps, 3)
scores_mma_kernel(const T* __restrict__ q, int R, int H, KVView kv, const int32_t* __restrict__ table, int first_pos,
                  float scale, const float2* __restrict__ stats, float2* __restrict__ parts, float* __restrict__ scores,
                  int64_t stride) {
  extern __shared__ __align__(128) unsigned char smem[];
  T* sk = reinterpret_cast<T*>(smem);                             // [kChunk][D] swizzled
  T* sq = sk + kChunk * D;                                        // [2][kCols][D] swizzled
  int* slim = reinterpret_cast<int*>(sq + 2 * kCols * D);         // [2][kCols]
  float2* sst = reinterpret_cast<float2*>(slim + 2 * kCols);      // [2][kCols]
  __shared__ float2 red[kWarps][kCols];
  const int hk = blockIdx.y, tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int G = H / kv.num_kv_heads, NQ = R * G, n_keys = first_pos + R;
  const int j0 = blockIdx.x * kChunk;
  // Rows that see any key of the chunk: r >= j0 - first_pos.
  const int r_lo = j0 > first_pos ? j0 - first_pos : 0, n_lo = r_lo * G;
  const T* kb = static_cast<const T*>(kv.k);
  constexpr int kChunks = D / 8;
  {  // thread tid copies chunk tid % kChunks of keys tid / kChunks + kStep * i: the block-table
     // lookups first (independent loads), then the copies
    constexpr int kStep = 32 * kWarps / kChunks, kPer = kChunk / kStep;
    const int ch = tid % kChunks;
    int64_t off[kPer];
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int j = j0 + tid / kChunks + kStep * i;
      off[i] = j < n_keys ? kv.offset(table[j / kv.block_size], hk, j % kv.block_size) + ch * 8 : -1;
    }
#pragma unroll
    for (int i = 0; i < kPer; ++i)
      tile::cp_async16(sk + tile::swz<D>(tid / kChunks + kStep * i, ch * 8), kb + (off[i] >= 0 ? off[i] : 0),
                       off[i] >= 0 ? 16 : 0);
  }
  const int tiles = n_lo < NQ ? (NQ - n_lo + kCols - 1) / kCols : 0;
  if (tiles > 0) load_rows<D, T, kColumns>(q, H, hk, G, NQ, n_lo, first_pos, stats, sq, slim, sst, tid);
  tile::cp_async_commit();
  tile::cp_async_wait<0>();
  if (kColumns && tid < kCols) sst[tid].y = 1.f / sst[tid].y;  // the thread's own copy: visible to it
  __syncthreads();
  uint32_t kf[kMT][D / 16][4];  // A fragments: the warp's 32 keys
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
      tile::ldmatrix_x4(kf[mt][kk], sk + tile::swz<D>(warp * 32 + mt * 16 + (lane & 7) + ((lane >> 3) & 1) * 8,
                                                     kk * 16 + (lane >> 4) * 8));
  int key[kMT][2];  // this thread's keys: slab mt, half j
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int j = 0; j < 2; ++j) key[mt][j] = j0 + warp * 32 + mt * 16 + lane / 4 + 8 * j;
  float col[kMT][2] = {};
  for (int t = 0; t < tiles; ++t) {
    const int buf = t & 1, n0 = n_lo + t * kCols;
    if (t + 1 < tiles)
      load_rows<D, T, kColumns>(q, H, hk, G, NQ, n0 + kCols, first_pos, stats, sq + (buf ^ 1) * kCols * D,
                                slim + (buf ^ 1) * kCols, sst + (buf ^ 1) * kCols, tid);
    tile::cp_async_commit();
    const T* qt = sq + buf * kCols * D;
#pragma unroll 2
    for (int n = 0; n < kNC; ++n) {  // one 8-row column block at a time (registers: 3 CTAs per SM)
      float s[kMT][4] = {};
#pragma unroll
      for (int kk = 0; kk < D / 16; kk += 2) {
        uint32_t b[4];
        tile::ldmatrix_x4(b, qt + tile::swz<D>(n * 8 + (lane & 7), kk * 16 + (lane >> 3) * 8));
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          tile::mma<T>(s[mt], kf[mt][kk], b[0], b[1]);
          tile::mma<T>(s[mt], kf[mt][kk + 1], b[2], b[3]);
        }
      }
#pragma unroll
      for (int qq = 0; qq < 2; ++qq) {
        const int c = n * 8 + 2 * (lane % 4) + qq;
        const int lim = slim[buf * kCols + c];
        if constexpr (kColumns) {
          const float2 st = sst[buf * kCols + c];  // (max, 1 / sum)
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
            for (int j = 0; j < 2; ++j)
              if (key[mt][j] <= lim) col[mt][j] += expf(scale * s[mt][2 * j + qq] - st.x) * st.y;
        } else {
          float x[kMT][2], m = -INFINITY;
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
            for (int j = 0; j < 2; ++j) {
              x[mt][j] = key[mt][j] <= lim ? scale * s[mt][2 * j + qq] : -INFINITY;
              m = fmaxf(m, x[mt][j]);
            }
          for (int o = 4; o < 32; o *= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
          float l = 0.f;
          if (m != -INFINITY)
#pragma unroll
            for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
              for (int j = 0; j < 2; ++j) l += expf(x[mt][j] - m);
          for (int o = 4; o < 32; o *= 2) l += __shfl_xor_sync(0xffffffffu, l, o);
          if (lane < 4) red[warp][c] = make_float2(m, l);
        }
      }
    }
    if constexpr (!kColumns) {
      __syncthreads();
      if (tid < kCols && n0 + tid < NQ) {
        float m = -INFINITY, l = 0.f;
        for (int w = 0; w < kWarps; ++w) m = fmaxf(m, red[w][tid].x);
        for (int w = 0; w < kWarps; ++w)
          if (red[w][tid].x != -INFINITY) l += red[w][tid].y * expf(red[w][tid].x - m);
        const int n = n0 + tid;
        parts[(int64_t(blockIdx.x) * R + n / G) * H + hk * G + n % G] = make_float2(m, l);
      }
    }
    tile::cp_async_wait<0>();
    if (kColumns && tid < kCols) sst[(buf ^ 1) * kCols + tid].y = 1.f / sst[(buf ^ 1) * kCols + tid].y;
    __syncthreads();
  }
  if constexpr (!kColumns) {
    // Rows that see no key of the chunk: (-inf, 0), as the f32 pass writes them.
    for (int n = tid; n < n_lo && n < NQ; n += 32 * kWarps)
      parts[(int64_t(blockIdx.x) * R + n / G) * H + hk * G + n % G] = make_float2(-INFINITY, 0.f);
  } else {
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        float v = col[mt][j];
        v += __shfl_xor_sync(0xffffffffu, v, 1);
        v += __shfl_xor_sync(0xffffffffu, v, 2);
        if (lane % 4 == 0 && key[mt][j] < n_keys) scores[hk * stride + key[mt][j]] += v;
      }
  }
}

template <int D, class T, bool kColumns>
void launch(const void* q, int32_t R, int H, const PagedKVLayer& kv, const int32_t* table, int32_t first_pos,
            float scale, const float2* stats, float2* parts, float* scores, int64_t stride, cudaStream_t stream) {
  const size_t smem = size_t(kChunk + 2 * kCols) * D * sizeof(T) + 2 * kCols * (sizeof(int) + sizeof(float2));
  const bool attr = allow_dynamic_smem(scores_mma_kernel<D, T, kColumns>, int(smem));  // once per kernel and device
  (void)attr;
  const int chunks = (first_pos + R + kChunk - 1) / kChunk;
  scores_mma_kernel<D, T, kColumns><<<dim3(chunks, kv.num_kv_heads), 32 * kWarps, smem, stream>>>(
      static_cast<const T*>(q), R, H, kv_view(kv), table, first_pos, scale, stats, parts, scores, stride);
  VLM_CUDA_CHECK_LAUNCH();
}

template <bool kColumns>
void dispatch(const void* q, int32_t R, int H, const PagedKVLayer& kv, const int32_t* table, int32_t first_pos,
              float scale, const float2* stats, float2* parts, float* scores, int64_t stride, cudaStream_t stream) {
  VLM_CHECK(look_m_scores_mma_supported(kv.dtype, kv.dtype, kv.head_dim) && H % kv.num_kv_heads == 0,
            "LOOK-M mma scores: {} D {}", dtype_name(kv.dtype), kv.head_dim);
  if (R == 0) return;
  auto go = [&](auto t) {
    using T = decltype(t);
    if (kv.head_dim == 64) launch<64, T, kColumns>(q, R, H, kv, table, first_pos, scale, stats, parts, scores, stride, stream);
    else launch<128, T, kColumns>(q, R, H, kv, table, first_pos, scale, stats, parts, scores, stride, stream);
  };
  if (kv.dtype == DType::BF16) go(__nv_bfloat16{});
  else go(__half{});
}

}  // namespace

bool look_m_scores_mma_supported(DType act, DType cache, int head_dim) {
  return act == cache && (cache == DType::BF16 || cache == DType::F16) && (head_dim == 64 || head_dim == 128);
}

void look_m_scores_mma_stats(const void* q, int32_t R, int num_heads, const PagedKVLayer& kv, const int32_t* table,
                             int32_t first_pos, float scale, float2* parts, cudaStream_t stream) {
  dispatch<false>(q, R, num_heads, kv, table, first_pos, scale, nullptr, parts, nullptr, 0, stream);
}

void look_m_scores_mma_columns(const void* q, int32_t R, int num_heads, const PagedKVLayer& kv, const int32_t* table,
                               int32_t first_pos, float scale, const float2* stats, float* scores, int64_t stride,
                               cudaStream_t stream) {
  dispatch<true>(q, R, num_heads, kv, table, first_pos, scale, stats, nullptr, scores, stride, stream);
}

}  // namespace vlm::cuda
