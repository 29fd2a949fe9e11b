// LOOK-M's GPU kernels (contract in cuda_look_m.h). Straightforward f32 kernels: the score pass
// costs R * L * H * D per layer (the window's 64 rows at the end of a prompt; the full mode's every
// row is an attention pass over again), the merge E * C * D per kv head.
#include "kernels/cuda/kv_compression/cuda_look_m.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "kernels/cuda/attention/cuda_attention_common.cuh"

namespace vlm::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kMergeNone = 0, kMergePivot = 2, kMergeWeighted = 3;  // KVMerge's values

// Cache element of kv head h at token position pos (any block size).
__device__ __forceinline__ int64_t cache_offset(const KVView& kv, const int32_t* table, int h, int pos) {
  return kv.offset(table[pos / kv.block_size], h, pos % kv.block_size);
}

__device__ float block_max_sum(float x, bool is_max, float* red) {
  for (int o = 16; o > 0; o /= 2) {
    const float y = __shfl_xor_sync(0xffffffffu, x, o);
    x = is_max ? fmaxf(x, y) : x + y;
  }
  __syncthreads();
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = x;
  __syncthreads();
  x = red[0];
  for (int w = 1; w < int(blockDim.x / 32); ++w) x = is_max ? fmaxf(x, red[w]) : x + red[w];
  return x;
}

// grid (R, H): row r of head h: max and sum of exp over keys [0, first_pos + r].
template <class TQ>
__global__ void row_stats_kernel(const TQ* __restrict__ q, int H, KVView kv, DType dt, const int32_t* __restrict__ table,
                                 int first_pos, float scale, float2* __restrict__ stats) {
  __shared__ float sq[256];
  __shared__ float red[32];
  const int r = blockIdx.x, h = blockIdx.y, D = kv.head_dim, hk = h / (H / kv.num_kv_heads);
  for (int d = threadIdx.x; d < D; d += blockDim.x) sq[d] = to_f32(q[(int64_t(r) * H + h) * D + d]);
  __syncthreads();
  const int n = first_pos + r + 1;
  float m = -INFINITY, l = 0.f;
  for (int j = threadIdx.x; j < n; j += blockDim.x) {
    const int64_t off = cache_offset(kv, table, hk, j);
    float s = 0.f;
    for (int d = 0; d < D; ++d) s += sq[d] * load_f32(kv.k, dt, off + d);
    s *= scale;
    const float m2 = fmaxf(m, s);
    l = l * expf(m - m2) + expf(s - m2);
    m = m2;
  }
  const float mx = block_max_sum(m, true, red);
  const float sum = block_max_sum(m == -INFINITY ? 0.f : l * expf(m - mx), false, red);
  if (threadIdx.x == 0) stats[int64_t(r) * H + h] = make_float2(mx, sum);
}

// grid (ceil(n_keys / kThreads), Hkv): key j of kv head hk adds Σ over rows and the group's heads.
template <class TQ>
__global__ void column_sum_kernel(const TQ* __restrict__ q, int R, int H, KVView kv, DType dt,
                                  const int32_t* __restrict__ table, int first_pos, float scale,
                                  const float2* __restrict__ stats, float* __restrict__ scores, int64_t stride) {
  extern __shared__ float sq[];  // [G, D] of the current row
  const int hk = blockIdx.y, G = H / kv.num_kv_heads, D = kv.head_dim;
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  const int n_keys = first_pos + R;
  float kreg[256];
  const bool on = j < n_keys;
  if (on) {
    const int64_t off = cache_offset(kv, table, hk, j);
    for (int d = 0; d < D; ++d) kreg[d] = load_f32(kv.k, dt, off + d);
  }
  float col = 0.f;
  const int r_first = max(0, j - first_pos);  // rows that see key j
  const int r0 = min(R, max(0, int(blockIdx.x * blockDim.x) - first_pos));  // rows that see any key of the block
  for (int r = r0; r < R; ++r) {
    __syncthreads();
    for (int i = threadIdx.x; i < G * D; i += blockDim.x) sq[i] = to_f32(q[(int64_t(r) * H + hk * G) * D + i]);
    __syncthreads();
    if (!on || r < r_first) continue;
    for (int g = 0; g < G; ++g) {
      float s = 0.f;
      for (int d = 0; d < D; ++d) s += sq[g * D + d] * kreg[d];
      const float2 st = stats[int64_t(r) * H + hk * G + g];
      col += expf(s * scale - st.x) / st.y;
    }
  }
  if (on) scores[hk * stride + j] += col;
}

// Merge: grid (ceil(L / 4), Hkv), 4 warps: warp w takes position e; an evicted e finds its most
// similar kept key (first maximum over c) and folds its K/V into that entry's sums (atomics).
// slot[h, pos] = kept index or -1; inv_norm[h, pos] = 1 / |k_pos| (0 for a zero key).
__global__ void kept_slots_kernel(const int32_t* __restrict__ kept, int C, int L, int32_t* __restrict__ slot) {
  const int h = blockIdx.y;
  for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < C; c += gridDim.x * blockDim.x)
    slot[int64_t(h) * L + kept[int64_t(h) * C + c]] = c;
}

__global__ void inv_norm_kernel(KVView kv, DType dt, const int32_t* __restrict__ table, int L, float* __restrict__ inv) {
  const int h = blockIdx.y, pos = blockIdx.x * blockDim.x + threadIdx.x;
  if (pos >= L) return;
  const int64_t off = cache_offset(kv, table, h, pos);
  float n2 = 0.f;
  for (int d = 0; d < kv.head_dim; ++d) {
    const float x = load_f32(kv.k, dt, off + d);
    n2 += x * x;
  }
  inv[int64_t(h) * L + pos] = n2 > 0.f ? 1.f / sqrtf(n2) : 0.f;
}

__global__ void merge_kernel(KVView kv, DType dt, const int32_t* __restrict__ table, int L, int C,
                             const int32_t* __restrict__ kept, const int32_t* __restrict__ slot,
                             const float* __restrict__ inv, int merge, float* __restrict__ ksum, float* __restrict__ vsum,
                             int32_t* __restrict__ count) {
  const int h = blockIdx.y, lane = threadIdx.x % 32;
  const int e = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (e >= L || slot[int64_t(h) * L + e] >= 0) return;
  const int D = kv.head_dim;
  const int64_t eoff = cache_offset(kv, table, h, e);
  float ke[8];  // D <= 256: lane holds d = lane + 32 i
  for (int i = 0; i < 8; ++i) ke[i] = lane + 32 * i < D ? load_f32(kv.k, dt, eoff + lane + 32 * i) : 0.f;
  const float ie = inv[int64_t(h) * L + e];
  float best = -INFINITY;
  int arg = 0;
  for (int c = 0; c < C; ++c) {
    const int p = kept[int64_t(h) * C + c];
    const int64_t off = cache_offset(kv, table, h, p);
    float s = 0.f;
    for (int i = 0; i < 8; ++i)
      if (lane + 32 * i < D) s += ke[i] * load_f32(kv.k, dt, off + lane + 32 * i);
    for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
    s *= ie * inv[int64_t(h) * L + p];
    if (s > best) {
      best = s;
      arg = c;
    }
  }
  const int64_t acc = (int64_t(h) * C + arg) * D;
  for (int d = lane; d < D; d += 32) {
    const float kx = load_f32(kv.k, dt, eoff + d), vx = load_f32(kv.v, dt, eoff + d);
    const float w = merge == kMergeWeighted ? best : 1.f;  // Average/Pivot: the plain sum
    atomicAdd(ksum + acc + d, w * kx);
    atomicAdd(vsum + acc + d, w * vx);
  }
  if (lane == 0) atomicAdd(count + int64_t(h) * C + arg, 1);
}

// grid (C, Hkv), D threads: the merged kept entry c of head h (from its original slot) into out.
__global__ void finalize_kernel(KVView kv, DType dt, const int32_t* __restrict__ table, int C,
                                const int32_t* __restrict__ kept, int merge, const float* __restrict__ ksum,
                                const float* __restrict__ vsum, const int32_t* __restrict__ count,
                                float* __restrict__ kout, float* __restrict__ vout) {
  const int c = blockIdx.x, h = blockIdx.y, d = threadIdx.x, D = kv.head_dim;
  const int64_t off = cache_offset(kv, table, h, kept[int64_t(h) * C + c]) + d;
  const int64_t i = (int64_t(h) * C + c) * D + d;
  float k = load_f32(kv.k, dt, off), v = load_f32(kv.v, dt, off);
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
  store_f32(kv.k, dt, off, kout[i]);
  store_f32(kv.v, dt, off, vout[i]);
}

struct CompactWorkspace {  // carved from the caller's buffer
  int32_t *slot, *count;
  float *inv, *ksum, *vsum, *kout, *vout;
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
    count = reinterpret_cast<int32_t*>(take(size_t(Hkv * C) * 4));
    ksum = reinterpret_cast<float*>(take(size_t(Hkv * C * D) * 4));
    vsum = reinterpret_cast<float*>(take(size_t(Hkv * C * D) * 4));
    kout = reinterpret_cast<float*>(take(size_t(Hkv * C * D) * 4));
    vout = reinterpret_cast<float*>(take(size_t(Hkv * C * D) * 4));
    bytes = used;
  }
};

}  // namespace

size_t look_m_row_stats_bytes(int32_t R, int num_heads) { return size_t(std::max(R, 1)) * num_heads * sizeof(float2); }

void look_m_accumulate_scores(const void* q, DType act, int32_t R, int num_heads, const PagedKVLayer& kv,
                              const int32_t* block_table, int32_t first_pos, float scale, void* row_stats,
                              float* scores, int64_t stride, cudaStream_t stream) {
  if (R == 0) return;
  VLM_CHECK(num_heads % kv.num_kv_heads == 0 && kv.head_dim <= 256 && stride >= first_pos + R,
            "LOOK-M scores: H {} Hkv {} D {} stride {}", num_heads, kv.num_kv_heads, kv.head_dim, stride);
  const int G = num_heads / kv.num_kv_heads;
  auto* stats = static_cast<float2*>(row_stats);
  dispatch_float(act, [&](auto t) {
    using TQ = decltype(t);
    row_stats_kernel<TQ><<<dim3(R, num_heads), kThreads, 0, stream>>>(static_cast<const TQ*>(q), num_heads, kv_view(kv),
                                                                      kv.dtype, block_table, first_pos, scale, stats);
    VLM_CUDA_CHECK_LAUNCH();
    const int n_keys = first_pos + R;
    column_sum_kernel<TQ><<<dim3((n_keys + kThreads - 1) / kThreads, kv.num_kv_heads), kThreads,
                            G * kv.head_dim * sizeof(float), stream>>>(static_cast<const TQ*>(q), R, num_heads,
                                                                       kv_view(kv), kv.dtype, block_table, first_pos,
                                                                       scale, stats, scores, stride);
    VLM_CUDA_CHECK_LAUNCH();
  });
}

size_t look_m_compact_workspace_bytes(int32_t L, int32_t C, int num_kv_heads, int head_dim) {
  return CompactWorkspace(nullptr, L, C, num_kv_heads, head_dim).bytes;
}

void look_m_compact(const PagedKVLayer& kv, const int32_t* block_table, int32_t L, const int32_t* kept, int32_t C,
                    KVMerge merge, void* workspace, cudaStream_t stream) {
  VLM_CHECK(kv.head_dim <= 256 && C > 0 && C <= L, "LOOK-M compaction: D {} C {} L {}", kv.head_dim, C, L);
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
    inv_norm_kernel<<<dim3((L + 127) / 128, Hkv), 128, 0, stream>>>(v, kv.dtype, block_table, L, w.inv);
    VLM_CUDA_CHECK_LAUNCH();
    merge_kernel<<<dim3((L + 3) / 4, Hkv), 128, 0, stream>>>(v, kv.dtype, block_table, L, C, kept, w.slot, w.inv, m,
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
