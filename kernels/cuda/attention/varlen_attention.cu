// Bidirectional varlen attention (see varlen_attention.h): the tensor-core kernel and its naive
// reference. The tensor-core kernel follows prefill_attention.cu's tiling (4 warps x 32 query
// rows, 64-key tiles in two cp.async stages) without the causal mask and the paged cache: keys
// past the segment are zero-filled and masked in its last tile only.
#include <cuda_runtime.h>

#include <cmath>

#include "kernels/cuda/attention/cuda_attention_common.cuh"
#include "kernels/cuda/attention/mma_tile.cuh"
#include "kernels/cuda/attention/varlen_attention.h"

namespace vlm::cuda {
namespace {

using namespace tile::fa2;  // the CTA shape: kWarps, kMT, kWarpRows, kBM, kThreads
constexpr int kBN = 64;     // keys per tile

// Shared-memory tile layouts [rows][Dp]: the XOR swizzle of mma_tile.cuh (tile::SwizzledRows, Dp 64
// or 128), or rows padded to Dp + 8 elements (Dp 96: 208-byte rows, so the 8 rows of an ldmatrix fall in distinct
// banks without a swizzle; Qwen2-VL's head dim 80 then pads to 96, not 128).
template <int Dp>
struct Padded {
  static constexpr int kLD = Dp + 8;
  __device__ static int at(int r, int c) { return r * kLD + c; }
};

template <class Lay, class T>
constexpr int smem_bytes() {
  return (kBM + 2 * 2 * kBN) * Lay::kLD * int(sizeof(T));
}

// Rows [row0, row0 + ROWS) of one head (columns [0, D) of the row, zeros in [D, Dp) and for rows
// at or past row_end) into the tile dst [ROWS][Dp] with cp.async.
template <int ROWS, int Dp, class Lay, class T>
__device__ __forceinline__ void load_rows(const T* base, int64_t row_stride, int D, int row0, int row_end, T* dst,
                                          int tid) {
  constexpr int kChunks = Dp / 8;
  for (int i = tid; i < ROWS * kChunks; i += kThreads) {
    const int r = i / kChunks, c = i % kChunks;
    const bool in = row0 + r < row_end && c * 8 < D;
    const T* src = in ? base + int64_t(row0 + r) * row_stride + c * 8 : base;
    tile::cp_async16(dst + Lay::at(r, c * 8), src, in ? 16 : 0);
  }
}

// Grid: (query tiles, H, segments).
template <int Dp, class Lay, class T>
__global__ void __launch_bounds__(kThreads, 2)
varlen_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, int64_t row_stride, int H,
              int D, const int32_t* __restrict__ cu, float scale_log2, T* __restrict__ out) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  constexpr int kLD = Lay::kLD;
  T* sq = reinterpret_cast<T*>(smem_raw);
  T* const kv_smem = sq + kBM * kLD;
  auto sk = [&](int i) { return kv_smem + i * 2 * kBN * kLD; };
  auto sv = [&](int i) { return kv_smem + i * 2 * kBN * kLD + kBN * kLD; };

  const int s = blockIdx.z, h = blockIdx.y;
  const int t0 = cu[s], len = cu[s + 1] - t0;
  const int m0 = blockIdx.x * kBM;
  if (m0 >= len) return;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int rows = min(kBM, len - m0);
  const int num_tiles = (len + kBN - 1) / kBN;
  const T* qb = q + int64_t(t0) * row_stride + h * D;
  const T* kb = k + int64_t(t0) * row_stride + h * D;
  const T* vb = v + int64_t(t0) * row_stride + h * D;

  load_rows<kBM, Dp, Lay>(qb, row_stride, D, m0, len, sq, tid);
  load_rows<kBN, Dp, Lay>(kb, row_stride, D, 0, len, sk(0), tid);
  load_rows<kBN, Dp, Lay>(vb, row_stride, D, 0, len, sv(0), tid);
  tile::cp_async_commit();

  float o[kMT][Dp / 8][4] = {};
  float m[kMT][2], l[kMT][2];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) m[mt][0] = m[mt][1] = -INFINITY, l[mt][0] = l[mt][1] = 0.f;
  const int t4 = lane % 4;

  for (int n = 0; n < num_tiles; ++n) {
    const int key0 = n * kBN;
    if (n + 1 < num_tiles) {
      load_rows<kBN, Dp, Lay>(kb, row_stride, D, key0 + kBN, len, sk((n + 1) & 1), tid);
      load_rows<kBN, Dp, Lay>(vb, row_stride, D, key0 + kBN, len, sv((n + 1) & 1), tid);
    }
    tile::cp_async_commit();
    tile::cp_async_wait<1>();
    __syncthreads();
    float sc[kMT][kBN / 8][4] = {};
    tile::qk_tile_smem<Dp, kBN / 8, kMT, T, Lay>(sc, sq, warp * kWarpRows, sk(n & 1), 0, lane);
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
      if (key0 + kBN > len) {  // the segment ends inside this tile
#pragma unroll
        for (int j = 0; j < kBN / 8; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            if (key0 + j * 8 + 2 * t4 + (e & 1) >= len) sc[mt][j][e] = -INFINITY;
      }
      tile::online_softmax<Dp, kBN / 8>(sc[mt], m[mt], l[mt], o[mt], scale_log2);
    }
    tile::pv_tile<Dp, kBN / 8, kMT, T, Lay>(o, sc, sv(n & 1), 0, lane);
    __syncthreads();
  }

  tile::store_slabs<Dp>(out + (int64_t(t0 + m0) * H + h) * D, int64_t(H) * D, D, o, l, warp * kWarpRows, rows, lane);
}

template <int Dp, class Lay, class T>
void launch(const void* q, const void* k, const void* v, int64_t row_stride, int H, int D, const int32_t* cu,
            int num_seqs, int max_len, float scale, void* out, cudaStream_t stream) {
  constexpr int smem = smem_bytes<Lay, T>();
  const bool smem_ok = allow_dynamic_smem(varlen_kernel<Dp, Lay, T>, smem);
  (void)smem_ok;
  const dim3 grid((max_len + kBM - 1) / kBM, H, num_seqs);
  varlen_kernel<Dp, Lay, T><<<grid, kThreads, smem, stream>>>(static_cast<const T*>(q), static_cast<const T*>(k),
                                                             static_cast<const T*>(v), row_stride, H, D, cu,
                                                             scale * float(M_LOG2E), static_cast<T*>(out));
  VLM_CUDA_CHECK_LAUNCH();
}

// One block per (query row, segment-local index via the grid's x, head, segment); rows past the
// segment return at once.
__global__ void varlen_naive_kernel(const void* q, const void* k, const void* v, int64_t row_stride, DType dt, int H,
                                    int D, const int32_t* cu, float scale, void* out) {
  extern __shared__ float scores[];
  __shared__ float red[32];
  const int s = blockIdx.z, h = blockIdx.y, i = blockIdx.x;
  const int t0 = cu[s], len = cu[s + 1] - t0;
  if (i >= len) return;
  const int64_t qo = int64_t(t0 + i) * row_stride + h * D;
  float mx = -INFINITY;
  for (int j = threadIdx.x; j < len; j += blockDim.x) {
    const int64_t ko = int64_t(t0 + j) * row_stride + h * D;
    float dot = 0.f;
    for (int d = 0; d < D; ++d) dot = fmaf(load_f32(q, dt, qo + d), load_f32(k, dt, ko + d), dot);
    scores[j] = dot * scale;
    mx = fmaxf(mx, scores[j]);
  }
  for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = mx;
  __syncthreads();
  mx = -INFINITY;
  for (int w = 0; w < int(blockDim.x / 32); ++w) mx = fmaxf(mx, red[w]);
  __syncthreads();
  float sum = 0.f;
  for (int j = threadIdx.x; j < len; j += blockDim.x) {
    scores[j] = expf(scores[j] - mx);
    sum += scores[j];
  }
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = sum;
  __syncthreads();
  sum = 0.f;
  for (int w = 0; w < int(blockDim.x / 32); ++w) sum += red[w];
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float acc = 0.f;
    for (int j = 0; j < len; ++j) acc = fmaf(scores[j], load_f32(v, dt, int64_t(t0 + j) * row_stride + h * D + d), acc);
    store_f32(out, dt, (int64_t(t0 + i) * H + h) * D + d, acc / sum);
  }
}

}  // namespace

void varlen_attention_naive(const void* q, const void* k, const void* v, int64_t row_stride, DType dt, int num_heads,
                            int head_dim, const int32_t* cu_seqlens, int num_seqs, int max_len, float scale,
                            void* out, cudaStream_t stream) {
  if (num_seqs == 0 || max_len == 0) return;
  VLM_CHECK(max_len <= kMaxNaiveLen, "varlen attention: segment of {} rows > {} on the reference kernel", max_len,
            kMaxNaiveLen);
  const bool smem_ok = allow_dynamic_smem(varlen_naive_kernel, kMaxNaiveLen * 4);
  (void)smem_ok;
  const dim3 grid(max_len, num_heads, num_seqs);
  varlen_naive_kernel<<<grid, 128, max_len * 4, stream>>>(q, k, v, row_stride, dt, num_heads, head_dim, cu_seqlens,
                                                          scale, out);
  VLM_CUDA_CHECK_LAUNCH();
}

void varlen_attention(const void* q, const void* k, const void* v, int64_t row_stride, DType dt, int num_heads,
                      int head_dim, const int32_t* cu_seqlens, int num_seqs, int max_len, float scale, void* out,
                      cudaStream_t stream) {
  if (num_seqs == 0 || max_len == 0) return;
  const bool tc = (dt == DType::BF16 || dt == DType::F16) && head_dim % 8 == 0 && head_dim <= 128 &&
                  row_stride % 8 == 0;
  if (!tc) {
    varlen_attention_naive(q, k, v, row_stride, dt, num_heads, head_dim, cu_seqlens, num_seqs, max_len, scale, out,
                           stream);
    return;
  }
  auto run = [&](auto tag) {
    using T = decltype(tag);
    if (head_dim <= 64)
      launch<64, tile::SwizzledRows<64>, T>(q, k, v, row_stride, num_heads, head_dim, cu_seqlens, num_seqs, max_len, scale, out, stream);
    else if (head_dim <= 96)
      launch<96, Padded<96>, T>(q, k, v, row_stride, num_heads, head_dim, cu_seqlens, num_seqs, max_len, scale, out, stream);
    else
      launch<128, tile::SwizzledRows<128>, T>(q, k, v, row_stride, num_heads, head_dim, cu_seqlens, num_seqs, max_len, scale, out, stream);
  };
  if (dt == DType::BF16) run(__nv_bfloat16{});
  else run(__half{});
}

}  // namespace vlm::cuda
