// Device helpers of the decode split kernel's v2 and v3 plans (decode_attention.cu; the plans:
// cuda::DecodeKernel in cuda_attention.h): the last CTA's merge staged through shared memory
// (v2), the merge across a thread-block cluster through distributed shared memory (v3), and the
// L1 prefetch of a split's block-table lines. NT: the split kernel's threads (a multiple of 32);
// ROWS: its rows per group (the mma tile's 16).
#pragma once

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/attention/cuda_attention_common.cuh"
#include "kernels/cuda/attention/mma_tile.cuh"

namespace vlm::cuda::decode {

// Prefetches into L1 the block-table lines of keys [k_begin, k_begin + partition) of a sequence
// (table [max_blocks] entries; 32 entries a 128-byte line), so the tile loader's table reads,
// which wait for the context length, hit L1 instead of waiting a second L2 round trip. Threads
// 0.. each take one line; the others return at once.
__device__ __forceinline__ void prefetch_table(const int32_t* table, int max_blocks, int k_begin, int partition,
                                               int block_shift, int tid) {
  const int e0 = k_begin >> block_shift;
  const int e1 = min(max_blocks - 1, (k_begin + partition - 1) >> block_shift);
  if (e0 > e1 || tid > (e1 - e0) / 32 + 1) return;
  const int32_t* p = table + min(e0 + 32 * tid, e1);
  asm volatile("prefetch.global.L1 [%0];\n" ::"l"(p));
}

// v2's merge by the last CTA of a group (what decode_attention.cu's reduce_group does, the same
// arithmetic in the same order). ws: the partial O [S*H][ws_stride][D] (f32, unnormalized), ml:
// (m, l) [S*H][ws_stride][2]; the group's heads are qh0 .. qh0 + G - 1 (G <= ROWS), `splits` of
// them written. The (m, l) pairs are loaded in one pass of independent loads while cp.async
// copies the first chunk of the partial O rows [G][chunk][D] into shared memory (smem,
// smem_floats floats, 16-byte aligned); per head a warp turns the maxima into the weights
// exp2(m_i - M) and their sum; then each thread sums its float4 columns over the chunk's splits
// in order, the next chunk copied after. One L2 round trip for the partials while G x splits x D
// floats fit (G 7, D 128, 69,632 bytes: 18 splits a chunk), where reduce_group waits on a load
// per row pass and per column pass. Needs (2 G splits + G + 3) / 4 * 4 + G D <= smem_floats.
template <int D, int NT, int ROWS, class TQ>
__device__ void reduce_group_staged(const float* ws, const float* ml, int ws_stride, int splits, int64_t qh0, int G,
                                    float* smem, int smem_floats, TQ* __restrict__ out) {
  constexpr int D4 = D / 4, kItems = (ROWS * D4 + NT - 1) / NT;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  float* wgt = smem;                // [G][splits]: the maxima m_i, then the weights
  float* lval = wgt + G * splits;   // [G][splits]: the sums l_i
  float* lsum = lval + G * splits;  // [G]
  float* stage = smem + (2 * G * splits + G + 3) / 4 * 4;  // [G][chunk][D], 16-byte aligned
  const int chunk = min(splits, (smem_floats - int(stage - smem)) / (G * D));
  // Splits [i0, i0 + n) of the G heads' partial O rows (contiguous per head in ws) into stage.
  auto copy_chunk = [&](int i0, int n) {
    for (int t = tid; t < G * n * D4; t += NT) {
      const int row = t / (n * D4), rem = t % (n * D4);
      tile::cp_async16(stage + row * n * D + rem * 4, ws + ((qh0 + row) * ws_stride + i0) * D + rem * 4, 16);
    }
    tile::cp_async_commit();
  };
  copy_chunk(0, chunk);
  // (m, l) pairs [G][splits]: four independent loads a thread before their stores.
  const float2* ml2 = reinterpret_cast<const float2*>(ml);
  for (int base = 0; base < G * splits; base += 4 * NT) {
    float2 v[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int p = base + j * NT + tid;
      if (p < G * splits) v[j] = __ldcg(ml2 + (qh0 + p / splits) * ws_stride + p % splits);
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int p = base + j * NT + tid;
      if (p < G * splits) {
        wgt[p] = v[j].x;
        lval[p] = v[j].y;
      }
    }
  }
  __syncthreads();
  for (int row = warp; row < G; row += NT / 32) {
    float* w = wgt + row * splits;
    const float* lv = lval + row * splits;
    float mx = -INFINITY;
    for (int i = lane; i < splits; i += 32) mx = fmaxf(mx, w[i]);
#pragma unroll
    for (int o = 16; o > 0; o /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    float l = 0.f;
    for (int i = lane; i < splits; i += 32) {
      const float f = exp2f(w[i] - mx);
      w[i] = f;
      l += f * lv[i];
    }
#pragma unroll
    for (int o = 16; o > 0; o /= 2) l += __shfl_xor_sync(0xffffffffu, l, o);
    if (lane == 0) lsum[row] = l;
  }
  float4 acc[kItems];
#pragma unroll
  for (int j = 0; j < kItems; ++j) acc[j] = make_float4(0.f, 0.f, 0.f, 0.f);
  for (int i0 = 0; i0 < splits; i0 += chunk) {
    const int n = min(chunk, splits - i0);
    if (i0 > 0) {  // every thread is done with the previous chunk
      __syncthreads();
      copy_chunk(i0, n);
    }
    tile::cp_async_wait<0>();
    __syncthreads();  // the chunk, and (first pass) the weights, visible to all
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      const int t = tid + j * NT;
      if (t >= G * D4) break;
      const int row = t / D4, c4 = t % D4;
      const float4* col = reinterpret_cast<const float4*>(stage + row * n * D) + c4;
      const float* w = wgt + row * splits + i0;
      for (int i = 0; i < n; ++i) {
        const float4 v = col[i * D4];
        const float f = w[i];
        acc[j].x += f * v.x;
        acc[j].y += f * v.y;
        acc[j].z += f * v.z;
        acc[j].w += f * v.w;
      }
    }
  }
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    const int t = tid + j * NT;
    if (t >= G * D4) break;
    const int row = t / D4, c4 = t % D4;
    const float l = lsum[row];
    TQ* o = out + (qh0 + row) * D + 4 * c4;
    o[0] = from_f32<TQ>(acc[j].x / l);
    o[1] = from_f32<TQ>(acc[j].y / l);
    o[2] = from_f32<TQ>(acc[j].z / l);
    o[3] = from_f32<TQ>(acc[j].w / l);
  }
}

// v3's merge: the CTAs of one thread-block cluster are the splits of one (sequence, group), each
// with its partial part [G][D + 2] (O unnormalized, then m and l; an empty split: m = -inf, l and
// O 0) in its own shared memory. After a cluster barrier, CTA r of the n merges the items
// (head, column) [r * per, (r + 1) * per) of the G x D, per = ceil(G D / n), reading the n
// partials through distributed shared memory (splits in order; the same weights exp2(m_i - M)
// as the other merges), and writes out [S, H, D] rows qh0 ..; a second barrier keeps every
// CTA's shared memory alive until the others have read it. Every CTA of the cluster calls it.
// Split 0 is never empty (context >= 1), so M is finite.
constexpr int kMaxCluster = 16;  // the most CTAs a cluster may have (non-portable size on H100/H200)
template <int D, int NT, class TQ>
__device__ void cluster_merge(const float* part, int G, int64_t qh0, TQ* __restrict__ out) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();  // release/acquire: every CTA's part visible to the cluster
  const int n = int(cluster.num_blocks()), r = int(cluster.block_rank());
  const int items = G * D, per = (items + n - 1) / n;
  const int end = min(items, (r + 1) * per);
  for (int t = r * per + int(threadIdx.x); t < end; t += NT) {
    const int row = t / D, d = t % D, at = row * (D + 2);
    // All n partials' (m, l, O[d]) loaded before any use: one distributed-shared-memory round trip.
    float m[kMaxCluster], lv[kMaxCluster], ov[kMaxCluster];
#pragma unroll
    for (int j = 0; j < kMaxCluster; ++j) {
      if (j >= n) break;
      const float* pj = cluster.map_shared_rank(part, j);
      m[j] = pj[at + D];
      lv[j] = pj[at + D + 1];
      ov[j] = pj[at + d];
    }
    float mx = -INFINITY;
#pragma unroll
    for (int j = 0; j < kMaxCluster; ++j)
      if (j < n) mx = fmaxf(mx, m[j]);
    float acc = 0.f, l = 0.f;
#pragma unroll
    for (int j = 0; j < kMaxCluster; ++j) {
      if (j >= n) break;
      const float f = exp2f(m[j] - mx);  // 0 for an empty split
      acc += f * ov[j];
      l += f * lv[j];
    }
    out[(qh0 + row) * D + d] = from_f32<TQ>(acc / l);
  }
  cluster.sync();
#else
  (void)part, (void)G, (void)qh0, (void)out;
  __trap();  // launched only on sm_90+ (decode_attention.cu checks the device)
#endif
}

}  // namespace vlm::cuda::decode
