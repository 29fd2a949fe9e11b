// LOOK-M's GPU kernels (contract in cuda_look_m.h). Straightforward f32 kernels: the score pass
// costs R * L * H * D per layer (the window's 64 rows at the end of a prompt; the full mode's every
// row is an attention pass over again), the merge E * C * D per kv head: on tensor cores for 16-bit
// caches (look_m_search_mma.cu), here the f32 search kernels (f32 caches, D > 128, and the
// reference the tests compare with), then one fold of every evicted entry into its target.
#include "kernels/cuda/kv_compression/cuda_look_m.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "kernels/cuda/attention/cuda_attention_common.cuh"
#include "kernels/cuda/kv_compression/look_m_scores_mma.cuh"
#include "kernels/cuda/kv_compression/look_m_search_mma.cuh"

namespace vlm::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kMergeNone = 0, kMergePivot = 2, kMergeWeighted = 3;  // KVMerge's values

// Cache element of kv head h at token position pos (any block size).
__device__ __forceinline__ int64_t cache_offset(const KVView& kv, const int32_t* table, int h, int pos) {
  return kv.offset(table[pos / kv.block_size], h, pos % kv.block_size);
}

// Entry i of head h's K (value: V) written as the value x: store_f32 for 16-bit / f32 caches; an
// F8_E4M3 cache stores e4m3(x * (1 / scale[h])) with the head's static scale (paged_kv_write's
// rounding), so an entry read by load_kv_f32 and written back unchanged keeps its byte.
__device__ __forceinline__ void store_kv(const KVView& kv, DType dt, bool value, int h, int64_t i, float x) {
  if (dt == DType::F8_E4M3)
    static_cast<uint8_t*>(value ? kv.v : kv.k)[i] = fp8_kv_store(x, 1.f / (value ? kv.v_scale : kv.k_scale)[h]);
  else
    store_f32(value ? kv.v : kv.k, dt, i, x);
}

// Key j of kv head hk into registers, zero past D (DM: D rounded up to 64 / 128 / 256).
template <int DM>
__device__ __forceinline__ void load_key(const KVView& kv, DType dt, const int32_t* table, int hk, int j, bool on,
                                         float (&k)[DM]) {
  const int64_t off = on ? cache_offset(kv, table, hk, j) : 0;
#pragma unroll
  for (int d = 0; d < DM; ++d) k[d] = on && d < kv.head_dim ? load_kv_f32(kv, dt, false, hk, off + d) : 0.f;
}

template <int DM>
__device__ __forceinline__ float dot_row(const float* qs, const float (&k)[DM]) {
  float s = 0.f;
#pragma unroll
  for (int d = 0; d < DM; ++d) s += qs[d] * k[d];
  return s;
}

// Query row r's G heads of kv group hk into shared memory [G][DM] (zero past D).
template <class TQ, int DM>
__device__ __forceinline__ void load_rows(const TQ* q, int H, int hk, int G, int D, int r, float* sq) {
  for (int i = threadIdx.x; i < G * DM; i += blockDim.x) {
    const int g = i / DM, d = i % DM;
    sq[i] = d < D ? to_f32(q[(int64_t(r) * H + hk * G + g) * D + d]) : 0.f;
  }
}

// Pass 1, grid (key chunks of kThreads, Hkv): per chunk, row and head the max and sum of exp of
// the chunk's visible logits (one thread per key, the key in registers): parts[chunk][r][h].
template <class TQ, int DM>
__global__ void __launch_bounds__(kThreads)
chunk_stats_kernel(const TQ* __restrict__ q, int R, int H, KVView kv, DType dt, const int32_t* __restrict__ table,
                   int first_pos, float scale, float2* __restrict__ parts) {
  extern __shared__ float sq[];  // [G][DM]
  __shared__ float2 red[kThreads / 32][16];
  const int hk = blockIdx.y, G = H / kv.num_kv_heads, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int j = blockIdx.x * kThreads + threadIdx.x;
  float k[DM];
  load_key<DM>(kv, dt, table, hk, j, j < first_pos + R, k);
  for (int r = 0; r < R; ++r) {
    __syncthreads();
    load_rows<TQ, DM>(q, H, hk, G, kv.head_dim, r, sq);
    __syncthreads();
    const bool sees = j <= first_pos + r;
    for (int g = 0; g < G; ++g) {
      const float s = sees ? scale * dot_row<DM>(sq + g * DM, k) : -INFINITY;
      float m = s;
      for (int o = 16; o > 0; o /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
      float l = m == -INFINITY ? 0.f : expf(s - m);
      for (int o = 16; o > 0; o /= 2) l += __shfl_xor_sync(0xffffffffu, l, o);
      if (lane == 0) red[warp][g] = make_float2(m, l);
    }
    __syncthreads();
    if (threadIdx.x < G) {
      float m = -INFINITY, l = 0.f;
      for (int w = 0; w < kThreads / 32; ++w) m = fmaxf(m, red[w][threadIdx.x].x);
      for (int w = 0; w < kThreads / 32; ++w)
        if (red[w][threadIdx.x].x != -INFINITY) l += red[w][threadIdx.x].y * expf(red[w][threadIdx.x].x - m);
      parts[(int64_t(blockIdx.x) * R + r) * H + hk * G + threadIdx.x] = make_float2(m, l);
    }
  }
}

// Pass 2, grid (R, H), 32 threads: row r's max and sum over the chunks.
__global__ void merge_stats_kernel(const float2* __restrict__ parts, int chunks, int R, int H, float2* __restrict__ stats) {
  const int r = blockIdx.x, h = blockIdx.y;
  float m = -INFINITY;
  for (int c = threadIdx.x; c < chunks; c += 32) m = fmaxf(m, parts[(int64_t(c) * R + r) * H + h].x);
  for (int o = 16; o > 0; o /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  float l = 0.f;
  for (int c = threadIdx.x; c < chunks; c += 32) {
    const float2 p = parts[(int64_t(c) * R + r) * H + h];
    if (p.x != -INFINITY) l += p.y * expf(p.x - m);
  }
  for (int o = 16; o > 0; o /= 2) l += __shfl_xor_sync(0xffffffffu, l, o);
  if (threadIdx.x == 0) stats[int64_t(r) * H + h] = make_float2(m, l);
}

// Pass 3, grid (key chunks, Hkv): key j of kv head hk adds Σ over the rows that see it and the
// group's heads of exp(s - max) / sum.
template <class TQ, int DM>
__global__ void __launch_bounds__(kThreads)
column_sum_kernel(const TQ* __restrict__ q, int R, int H, KVView kv, DType dt, const int32_t* __restrict__ table,
                  int first_pos, float scale, const float2* __restrict__ stats, float* __restrict__ scores,
                  int64_t stride) {
  extern __shared__ float sq[];  // [G][DM] of the current row
  const int hk = blockIdx.y, G = H / kv.num_kv_heads;
  const int j = blockIdx.x * kThreads + threadIdx.x;
  const bool on = j < first_pos + R;
  float k[DM];
  load_key<DM>(kv, dt, table, hk, j, on, k);
  float col = 0.f;
  const int r0 = min(R, max(0, int(blockIdx.x * kThreads) - first_pos));  // rows that see any key of the block
  for (int r = r0; r < R; ++r) {
    __syncthreads();
    load_rows<TQ, DM>(q, H, hk, G, kv.head_dim, r, sq);
    __syncthreads();
    if (!on || j > first_pos + r) continue;
    for (int g = 0; g < G; ++g) {
      const float2 st = stats[int64_t(r) * H + hk * G + g];
      col += expf(scale * dot_row<DM>(sq + g * DM, k) - st.x) / st.y;
    }
  }
  if (on) scores[hk * stride + j] += col;
}

// Rows per pass-1 launch (bounds the partials: chunks * kRowBlock * H float2).
constexpr int kRowBlock = 64;

// Folds evicted position e (its most similar kept entry arg, cosine w) into that entry's sums:
// the warp's lanes share the D elements.
__device__ __forceinline__ void fold_evicted(const KVView& kv, DType dt, const int32_t* table, int h, int e, int C,
                                             int arg, float w, int merge, float* ksum, float* vsum, int32_t* count) {
  const int D = kv.head_dim, lane = threadIdx.x % 32;
  const int64_t eoff = cache_offset(kv, table, h, e), acc = (int64_t(h) * C + arg) * D;
  const float scale = merge == kMergeWeighted ? w : 1.f;  // Average/Pivot: the plain sum
  for (int d = lane; d < D; d += 32) {
    atomicAdd(ksum + acc + d, scale * load_kv_f32(kv, dt, false, h, eoff + d));
    atomicAdd(vsum + acc + d, scale * load_kv_f32(kv, dt, true, h, eoff + d));
  }
  if (lane == 0) atomicAdd(count + int64_t(h) * C + arg, 1);
}

// grid (ceil(L / 4), Hkv), 4 warps: evicted position e (slot -1) folds into arg[h, e] with w[h, e].
__global__ void fold_kernel(KVView kv, DType dt, const int32_t* __restrict__ table, int L, int C,
                            const int32_t* __restrict__ slot, const int32_t* __restrict__ arg, const float* __restrict__ w,
                            int merge, float* __restrict__ ksum, float* __restrict__ vsum, int32_t* __restrict__ count) {
  const int h = blockIdx.y, e = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (e >= L || slot[int64_t(h) * L + e] >= 0) return;
  fold_evicted(kv, dt, table, h, e, C, arg[int64_t(h) * L + e], w[int64_t(h) * L + e], merge, ksum, vsum, count);
}

// Search for D > 128: grid (ceil(L / 4), Hkv), 4 warps: warp w takes position e; an evicted e finds
// its most similar kept key (first maximum over c) and folds its K/V into that entry's sums (atomics).
// slot[h, pos] = kept index or -1; inv_norm[h, pos] = 1 / |k_pos| (0 for a zero key).
__global__ void kept_slots_kernel(const int32_t* __restrict__ kept, int C, int L, int32_t* __restrict__ slot) {
  const int h = blockIdx.y;
  for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < C; c += gridDim.x * blockDim.x)
    slot[int64_t(h) * L + kept[int64_t(h) * C + c]] = c;
}

// grid (ceil(L / 256), Hkv): the evicted positions of head h in ascending order, rows[h * (L - C) + i]
// (an evicted e is the (e - #kept below e)-th; kept[h] ascending).
__global__ void evicted_rows_kernel(const int32_t* __restrict__ kept, int C, int L, const int32_t* __restrict__ slot,
                                    int32_t* __restrict__ rows) {
  const int h = blockIdx.y, e = blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= L || slot[int64_t(h) * L + e] >= 0) return;
  const int32_t* k = kept + int64_t(h) * C;
  int lo = 0, hi = C;  // first kept index with position > e
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (k[mid] < e) lo = mid + 1;
    else hi = mid;
  }
  rows[int64_t(h) * (L - C) + (e - lo)] = e;
}

__global__ void inv_norm_kernel(KVView kv, DType dt, const int32_t* __restrict__ table, int L, float* __restrict__ inv) {
  const int h = blockIdx.y, pos = blockIdx.x * blockDim.x + threadIdx.x;
  if (pos >= L) return;
  const int64_t off = cache_offset(kv, table, h, pos);
  float n2 = 0.f;
  for (int d = 0; d < kv.head_dim; ++d) {
    const float x = load_kv_f32(kv, dt, false, h, off + d);
    n2 += x * x;
  }
  inv[int64_t(h) * L + pos] = n2 > 0.f ? 1.f / sqrtf(n2) : 0.f;
}

__global__ void merge_kernel(KVView kv, DType dt, const int32_t* __restrict__ table, int L, int C,
                             const int32_t* __restrict__ kept, const int32_t* __restrict__ slot,
                             const float* __restrict__ inv, int32_t* __restrict__ out_arg, float* __restrict__ out_w) {
  const int h = blockIdx.y, lane = threadIdx.x % 32;
  const int e = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (e >= L || slot[int64_t(h) * L + e] >= 0) return;
  const int D = kv.head_dim;
  const int64_t eoff = cache_offset(kv, table, h, e);
  float ke[8];  // D <= 256: lane holds d = lane + 32 i
  for (int i = 0; i < 8; ++i) ke[i] = lane + 32 * i < D ? load_kv_f32(kv, dt, false, h, eoff + lane + 32 * i) : 0.f;
  const float ie = inv[int64_t(h) * L + e];
  float best = -INFINITY;
  int arg = 0;
  for (int c = 0; c < C; ++c) {
    const int p = kept[int64_t(h) * C + c];
    const int64_t off = cache_offset(kv, table, h, p);
    float s = 0.f;
    for (int i = 0; i < 8; ++i)
      if (lane + 32 * i < D) s += ke[i] * load_kv_f32(kv, dt, false, h, off + lane + 32 * i);
    for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
    s *= ie * inv[int64_t(h) * L + p];
    if (s > best) {
      best = s;
      arg = c;
    }
  }
  if (lane == 0) {
    out_arg[int64_t(h) * L + e] = arg;
    out_w[int64_t(h) * L + e] = best;
  }
}

// Merge for D <= 128: grid (ceil(L / 32), Hkv), 4 warps x 8 positions; the block's 32 positions'
// keys in shared memory, the kept keys streamed through it 64 at a time (transposed [D][64], key t
// of row d at column t ^ (d % 32): the tile is read from the cache along d, coalesced, from offsets
// looked up once per key, and both the transposing stores and the lanes' reads are free of bank
// conflicts); lane l scores kept keys l
// and l + 32 of the tile against the warp's 8 rows (rows read 4 dimensions at a time, the sums
// still in d order), and each row keeps the first maximum (the lowest kept index among equal
// cosines, as the CPU's max_element).
constexpr int kMergeRows = 32, kMergeTile = 64, kRowsPerWarp = 8;
template <int DM>
__global__ void __launch_bounds__(128)
merge_tiled_kernel(KVView kv, DType dt, const int32_t* __restrict__ table, int L, int C,
                   const int32_t* __restrict__ kept, const int32_t* __restrict__ slot, const float* __restrict__ inv,
                   int32_t* __restrict__ out_arg, float* __restrict__ out_w) {
  static_assert(DM % 4 == 0, "rows are read as float4");
  __shared__ __align__(16) float rows[kMergeRows][DM];
  __shared__ float keys[DM][kMergeTile];
  __shared__ int64_t base[kMergeTile];  // the tile's kept keys' cache offsets (-1 past C)
  const int h = blockIdx.y, warp = threadIdx.x / 32, lane = threadIdx.x % 32, D = kv.head_dim;
  const int e0 = blockIdx.x * kMergeRows;
  for (int i = threadIdx.x; i < kMergeRows * DM; i += blockDim.x) {
    const int r = i / DM, d = i % DM, e = e0 + r;
    rows[r][d] = e < L && d < D ? load_kv_f32(kv, dt, false, h, cache_offset(kv, table, h, e) + d) : 0.f;
  }
  float best[kRowsPerWarp], ie[kRowsPerWarp];
  int arg[kRowsPerWarp];
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    const int e = e0 + warp * kRowsPerWarp + i;
    best[i] = -INFINITY;
    arg[i] = 0;
    ie[i] = e < L ? inv[int64_t(h) * L + e] : 0.f;
  }
  for (int c0 = 0; c0 < C; c0 += kMergeTile) {
    __syncthreads();
    if (threadIdx.x < kMergeTile) {
      const int c = c0 + threadIdx.x;
      base[threadIdx.x] = c < C ? cache_offset(kv, table, h, kept[int64_t(h) * C + c]) : -1;
    }
    __syncthreads();
#pragma unroll 4
    for (int i = threadIdx.x; i < kMergeTile * DM; i += blockDim.x) {  // independent loads
      const int d = i % DM, t = i / DM;
      const int64_t b = base[t];
      keys[d][t ^ (d & 31)] = b >= 0 && d < D ? load_kv_f32(kv, dt, false, h, b + d) : 0.f;
    }
    __syncthreads();
    float dot[2][kRowsPerWarp] = {};
#pragma unroll 2
    for (int d0 = 0; d0 < DM; d0 += 4) {
      float4 x[kRowsPerWarp];
#pragma unroll
      for (int i = 0; i < kRowsPerWarp; ++i) x[i] = *reinterpret_cast<const float4*>(&rows[warp * kRowsPerWarp + i][d0]);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int d = d0 + j;
        const float k0 = keys[d][lane ^ (d & 31)], k1 = keys[d][(lane + 32) ^ (d & 31)];
#pragma unroll
        for (int i = 0; i < kRowsPerWarp; ++i) {
          const float xi = j == 0 ? x[i].x : j == 1 ? x[i].y : j == 2 ? x[i].z : x[i].w;
          dot[0][i] += xi * k0;
          dot[1][i] += xi * k1;
        }
      }
    }
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int c = c0 + half * 32 + lane;
      const float ic = c < C ? inv[int64_t(h) * L + kept[int64_t(h) * C + c]] : 0.f;
#pragma unroll
      for (int i = 0; i < kRowsPerWarp; ++i) {
        float bv = c < C ? dot[half][i] * (ie[i] * ic) : -INFINITY;
        int bc = c;
        for (int o = 16; o > 0; o /= 2) {
          const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
          const int oc = __shfl_xor_sync(0xffffffffu, bc, o);
          if (ov > bv || (ov == bv && oc < bc)) {
            bv = ov;
            bc = oc;
          }
        }
        if (bv > best[i]) {  // tiles in kept order: a later equal value does not replace
          best[i] = bv;
          arg[i] = bc;
        }
      }
    }
  }
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    const int e = e0 + warp * kRowsPerWarp + i;
    if (lane == 0 && e < L && slot[int64_t(h) * L + e] < 0) {
      out_arg[int64_t(h) * L + e] = arg[i];
      out_w[int64_t(h) * L + e] = best[i];
    }
  }
}

// grid (C, Hkv), D threads: the merged kept entry c of head h (from its original slot) into out.
__global__ void finalize_kernel(KVView kv, DType dt, const int32_t* __restrict__ table, int C,
                                const int32_t* __restrict__ kept, int merge, const float* __restrict__ ksum,
                                const float* __restrict__ vsum, const int32_t* __restrict__ count,
                                float* __restrict__ kout, float* __restrict__ vout) {
  const int c = blockIdx.x, h = blockIdx.y, d = threadIdx.x, D = kv.head_dim;
  const int64_t off = cache_offset(kv, table, h, kept[int64_t(h) * C + c]) + d;
  const int64_t i = (int64_t(h) * C + c) * D + d;
  float k = load_kv_f32(kv, dt, false, h, off), v = load_kv_f32(kv, dt, true, h, off);
  const int n = count[int64_t(h) * C + c];
  if (merge != kMergeNone && n > 0) {
    const float inv = 1.f / float(n + 1);
    if (merge == kMergePivot) {  // x_c + Σ (x_e + x_c) / 2
      k = (k + 0.5f * (ksum[i] + n * k)) * inv;
      v = (v + 0.5f * (vsum[i] + n * v)) * inv;
    } else {
      k = (k + ksum[i]) * inv;
      v = (v + vsum[i]) * inv;
    }
  }
  kout[i] = k;
  vout[i] = v;
}

// grid (C, Hkv), D threads: out entry c of head h to slot c (cache dtype).
__global__ void scatter_kernel(KVView kv, DType dt, const int32_t* __restrict__ table, int C,
                               const float* __restrict__ kout, const float* __restrict__ vout) {
  const int c = blockIdx.x, h = blockIdx.y, d = threadIdx.x, D = kv.head_dim;
  const int64_t off = cache_offset(kv, table, h, c) + d, i = (int64_t(h) * C + c) * D + d;
  store_kv(kv, dt, false, h, off, kout[i]);
  store_kv(kv, dt, true, h, off, vout[i]);
}

struct CompactWorkspace {  // carved from the caller's buffer
  int32_t *slot, *count, *arg, *rows;
  float *inv, *w, *ksum, *vsum, *kout, *vout, *kic;
  void* kk;  // [Hkv, C, D] 16-bit: the mma search's gathered kept keys
  size_t bytes;
  CompactWorkspace(void* base, int64_t L, int64_t C, int64_t Hkv, int64_t D) {
    size_t used = 0;
    auto take = [&](size_t n) {  // 256-byte aligned pieces (base null: sizes only)
      char* q = base ? static_cast<char*>(base) + used : nullptr;
      used += (n + 255) / 256 * 256;
      return q;
    };
    slot = reinterpret_cast<int32_t*>(take(size_t(Hkv * L) * 4));
    inv = reinterpret_cast<float*>(take(size_t(Hkv * L) * 4));
    arg = reinterpret_cast<int32_t*>(take(size_t(Hkv * L) * 4));
    w = reinterpret_cast<float*>(take(size_t(Hkv * L) * 4));
    rows = reinterpret_cast<int32_t*>(take(size_t(Hkv * L) * 4));
    kk = take(size_t(Hkv * C * D) * 2);
    kic = reinterpret_cast<float*>(take(size_t(Hkv * C) * 4));
    count = reinterpret_cast<int32_t*>(take(size_t(Hkv * C) * 4));
    ksum = reinterpret_cast<float*>(take(size_t(Hkv * C * D) * 4));
    vsum = reinterpret_cast<float*>(take(size_t(Hkv * C * D) * 4));
    kout = reinterpret_cast<float*>(take(size_t(Hkv * C * D) * 4));
    vout = reinterpret_cast<float*>(take(size_t(Hkv * C * D) * 4));
    bytes = used;
  }
};

// inv, then arg / w of every evicted position (slot -1); the mma path searches the evicted rows
// only (listed in `rows`, a scratch [Hkv, L - C]).
void search(const PagedKVLayer& kv, const int32_t* table, int32_t L, const int32_t* kept, int32_t C,
            const CompactWorkspace& ws, int32_t* arg, float* w, LookMSearch how, cudaStream_t stream) {
  const int32_t* slot = ws.slot;
  float* inv = ws.inv;
  const KVView v = kv_view(kv);
  const int Hkv = kv.num_kv_heads, D = kv.head_dim;
  inv_norm_kernel<<<dim3((L + 127) / 128, Hkv), 128, 0, stream>>>(v, kv.dtype, table, L, inv);
  VLM_CUDA_CHECK_LAUNCH();
  if (how != LookMSearch::F32 && look_m_search_mma_supported(kv.dtype, D)) {
    if (C == L) return;
    evicted_rows_kernel<<<dim3((L + 255) / 256, Hkv), 256, 0, stream>>>(kept, C, L, slot, ws.rows);
    VLM_CUDA_CHECK_LAUNCH();
    look_m_gather_kept(kv, table, L, kept, C, inv, ws.kk, ws.kic, stream);
    if (how == LookMSearch::Auto && look_m_search_wgmma_supported(kv.dtype, D))
      look_m_search_wgmma(kv, table, L, ws.rows, L - C, C, ws.kk, ws.kic, inv, arg, w, stream);
    else
      look_m_search_mma(kv, table, L, ws.rows, L - C, C, ws.kk, ws.kic, inv, arg, w, stream);
    return;
  }
  if (D <= 64)
    merge_tiled_kernel<64><<<dim3((L + kMergeRows - 1) / kMergeRows, Hkv), 128, 0, stream>>>(
        v, kv.dtype, table, L, C, kept, slot, inv, arg, w);
  else if (D <= 128)
    merge_tiled_kernel<128><<<dim3((L + kMergeRows - 1) / kMergeRows, Hkv), 128, 0, stream>>>(
        v, kv.dtype, table, L, C, kept, slot, inv, arg, w);
  else
    merge_kernel<<<dim3((L + 3) / 4, Hkv), 128, 0, stream>>>(v, kv.dtype, table, L, C, kept, slot, inv, arg, w);
  VLM_CUDA_CHECK_LAUNCH();
}

}  // namespace

void look_m_nearest_kept(const PagedKVLayer& kv, const int32_t* block_table, int32_t L, const int32_t* kept, int32_t C,
                         LookMSearch how, void* workspace, int32_t* arg, float* w, cudaStream_t stream) {
  VLM_CHECK(kv.head_dim <= 256 && C > 0 && C <= L, "LOOK-M search: D {} C {} L {}", kv.head_dim, C, L);
  const CompactWorkspace ws(workspace, L, C, kv.num_kv_heads, kv.head_dim);
  VLM_CUDA_CHECK(cudaMemsetAsync(ws.slot, 0xff, size_t(kv.num_kv_heads) * L * 4, stream));
  kept_slots_kernel<<<dim3((C + 255) / 256, kv.num_kv_heads), 256, 0, stream>>>(kept, C, L, ws.slot);
  VLM_CUDA_CHECK_LAUNCH();
  search(kv, block_table, L, kept, C, ws, arg, w, how, stream);
}

size_t look_m_row_stats_bytes(int32_t R, int num_heads, int32_t num_keys) {
  const int64_t chunks = (int64_t(num_keys) + kThreads - 1) / kThreads;
  return size_t(std::min(std::max(R, 1), kRowBlock)) * num_heads * sizeof(float2) * size_t(chunks + 1);
}

void look_m_accumulate_scores(const void* q, DType act, int32_t R, int num_heads, const PagedKVLayer& kv,
                              const int32_t* block_table, int32_t first_pos, float scale, void* row_stats,
                              float* scores, int64_t stride, cudaStream_t stream, LookMSearch how) {
  if (R == 0) return;
  VLM_CHECK(num_heads % kv.num_kv_heads == 0 && num_heads / kv.num_kv_heads <= 16 && kv.head_dim <= 256 &&
                stride >= first_pos + R,
            "LOOK-M scores: H {} Hkv {} D {} stride {}", num_heads, kv.num_kv_heads, kv.head_dim, stride);
  if (kv.dtype == DType::F8_E4M3) check_fp8_cache(kv, "LOOK-M scores");
  const int G = num_heads / kv.num_kv_heads, Hkv = kv.num_kv_heads;
  const size_t esz = dtype_size(act);
  const bool mma = how != LookMSearch::F32 && look_m_scores_mma_supported(act, kv.dtype, kv.head_dim);
  auto run = [&](auto t, auto dm) {
    using TQ = decltype(t);
    constexpr int DM = decltype(dm)::value;
    const size_t smem = size_t(G) * DM * sizeof(float);
    // Row blocks of kRowBlock rows: stats (pass 1 + 2), then their column sums (pass 3).
    for (int32_t r0 = 0; r0 < R; r0 += kRowBlock) {
      const int32_t rows = std::min<int32_t>(kRowBlock, R - r0);
      const int32_t first = first_pos + r0, n_keys = first + rows;
      const int chunks = (n_keys + kThreads - 1) / kThreads;
      auto* parts = static_cast<float2*>(row_stats);
      float2* stats = parts + int64_t(chunks) * rows * num_heads;
      const TQ* qb = reinterpret_cast<const TQ*>(static_cast<const char*>(q) + int64_t(r0) * num_heads * kv.head_dim * esz);
      if (mma) {  // the same passes on tensor cores (look_m_scores_mma.cuh)
        look_m_scores_mma_stats(qb, rows, num_heads, kv, block_table, first, scale, parts, stream);
        merge_stats_kernel<<<dim3(rows, num_heads), 32, 0, stream>>>(parts, chunks, rows, num_heads, stats);
        VLM_CUDA_CHECK_LAUNCH();
        look_m_scores_mma_columns(qb, rows, num_heads, kv, block_table, first, scale, stats, scores, stride, stream);
        continue;
      }
      chunk_stats_kernel<TQ, DM><<<dim3(chunks, Hkv), kThreads, smem, stream>>>(qb, rows, num_heads, kv_view(kv),
                                                                               kv.dtype, block_table, first, scale, parts);
      VLM_CUDA_CHECK_LAUNCH();
      merge_stats_kernel<<<dim3(rows, num_heads), 32, 0, stream>>>(parts, chunks, rows, num_heads, stats);
      VLM_CUDA_CHECK_LAUNCH();
      column_sum_kernel<TQ, DM><<<dim3(chunks, Hkv), kThreads, smem, stream>>>(
          qb, rows, num_heads, kv_view(kv), kv.dtype, block_table, first, scale, stats, scores, stride);
      VLM_CUDA_CHECK_LAUNCH();
    }
  };
  dispatch_float(act, [&](auto t) {
    if (kv.head_dim <= 64) run(t, std::integral_constant<int, 64>{});
    else if (kv.head_dim <= 128) run(t, std::integral_constant<int, 128>{});
    else run(t, std::integral_constant<int, 256>{});
  });
}

size_t look_m_compact_workspace_bytes(int32_t L, int32_t C, int num_kv_heads, int head_dim) {
  return CompactWorkspace(nullptr, L, C, num_kv_heads, head_dim).bytes;
}

void look_m_compact(const PagedKVLayer& kv, const int32_t* block_table, int32_t L, const int32_t* kept, int32_t C,
                    KVMerge merge, void* workspace, cudaStream_t stream) {
  VLM_CHECK(kv.head_dim <= 256 && C > 0 && C <= L, "LOOK-M compaction: D {} C {} L {}", kv.head_dim, C, L);
  if (kv.dtype == DType::F8_E4M3) check_fp8_cache(kv, "LOOK-M compaction");
  const int Hkv = kv.num_kv_heads, D = kv.head_dim;
  const CompactWorkspace w(workspace, L, C, Hkv, D);
  const KVView v = kv_view(kv);
  const int m = static_cast<int>(merge);
  VLM_CUDA_CHECK(cudaMemsetAsync(w.slot, 0xff, size_t(Hkv) * L * 4, stream));  // -1: evicted
  VLM_CUDA_CHECK(cudaMemsetAsync(w.count, 0, size_t(Hkv) * C * 4, stream));
  VLM_CUDA_CHECK(cudaMemsetAsync(w.ksum, 0, size_t(Hkv) * C * D * 4, stream));
  VLM_CUDA_CHECK(cudaMemsetAsync(w.vsum, 0, size_t(Hkv) * C * D * 4, stream));
  kept_slots_kernel<<<dim3((C + 255) / 256, Hkv), 256, 0, stream>>>(kept, C, L, w.slot);
  VLM_CUDA_CHECK_LAUNCH();
  if (m != kMergeNone && C < L) {
    search(kv, block_table, L, kept, C, w, w.arg, w.w, LookMSearch::Auto, stream);
    fold_kernel<<<dim3((L + 3) / 4, Hkv), 128, 0, stream>>>(v, kv.dtype, block_table, L, C, w.slot, w.arg, w.w, m,
                                                            w.ksum, w.vsum, w.count);
    VLM_CUDA_CHECK_LAUNCH();
  }
  finalize_kernel<<<dim3(C, Hkv), D, 0, stream>>>(v, kv.dtype, block_table, C, kept, m, w.ksum, w.vsum, w.count,
                                                  w.kout, w.vout);
  VLM_CUDA_CHECK_LAUNCH();
  scatter_kernel<<<dim3(C, Hkv), D, 0, stream>>>(v, kv.dtype, block_table, C, w.kout, w.vout);
  VLM_CUDA_CHECK_LAUNCH();
}

}  // namespace vlm::cuda
