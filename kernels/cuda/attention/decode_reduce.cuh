// The decode attention's merges of the splits' partials through the workspace: the split kernel's
// last CTA of a group (reduce_group, v1's merged reduce) and the reduce kernel (decode_reduce_kernel,
// one CTA per (sequence, head); SinkRouter's routed launches always). Part of decode_attention.cu
// (included by it alone), split from it by phase; v2's and the clusters' merges: decode_merge.cuh.
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/attention/cuda_attention_common.cuh"
#include "kernels/cuda/attention/decode_plan.cuh"
#include "kernels/cuda/core/pdl.cuh"

namespace vlm::cuda {
namespace {

// The last CTA of group hk of sequence s to finish merges the splits' partials of the group's G
// heads (what decode_reduce_kernel does for them): per head a warp computes the splits' weights
// exp2(m_i - M) into shared memory (smem, [G][splits] floats, then [G] sums), then each thread
// sums float4 columns over the splits in order. Partials of other CTAs are read through L2
// (__ldcg: L1 is not coherent across SMs).
template <class TQ>
__device__ void reduce_group(const float* ws, const float* ml, int ws_stride, int splits, int64_t qh0, int G, int D,
                             float* smem, TQ* __restrict__ out) {
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  float* wgt = smem;                 // [G][splits]
  float* lsum = smem + G * splits;   // [G]
  for (int row = warp; row < G; row += kWarps) {
    const float* mlr = ml + (qh0 + row) * ws_stride * 2;
    float mx = -INFINITY;
    for (int i = lane; i < splits; i += 32) mx = fmaxf(mx, __ldcg(mlr + 2 * i));
#pragma unroll
    for (int o = 16; o > 0; o /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    float l = 0.f;
    for (int i = lane; i < splits; i += 32) {
      const float w = exp2f(__ldcg(mlr + 2 * i) - mx);
      wgt[row * splits + i] = w;
      l += w * __ldcg(mlr + 2 * i + 1);
    }
#pragma unroll
    for (int o = 16; o > 0; o /= 2) l += __shfl_xor_sync(0xffffffffu, l, o);
    if (lane == 0) lsum[row] = l;
  }
  __syncthreads();
  const int D4 = D / 4;
  for (int t = tid; t < G * D4; t += kThreads) {
    const int row = t / D4, c4 = t % D4;
    const int64_t qh = qh0 + row;
    const float4* col = reinterpret_cast<const float4*>(ws + qh * ws_stride * D) + c4;
    const float* w = wgt + row * splits;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 16
    for (int i = 0; i < splits; ++i) {
      const float4 v = __ldcg(col + int64_t(i) * D4);
      const float f = w[i];
      acc.x += f * v.x;
      acc.y += f * v.y;
      acc.z += f * v.z;
      acc.w += f * v.w;
    }
    const float l = lsum[row];
    TQ* o = out + qh * D + 4 * c4;
    o[0] = from_f32<TQ>(acc.x / l);
    o[1] = from_f32<TQ>(acc.y / l);
    o[2] = from_f32<TQ>(acc.z / l);
    o[3] = from_f32<TQ>(acc.w / l);
  }
}

// Max (is_max) or sum of x over the block (blockDim.x a multiple of 32, at most 1024 threads).
__device__ float block_reduce(float x, bool is_max, float* red) {
  for (int o = 16; o > 0; o /= 2) {
    const float y = __shfl_xor_sync(0xffffffffu, x, o);
    x = is_max ? fmaxf(x, y) : x + y;
  }
  __syncthreads();  // red may still be read from a previous call
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = x;
  __syncthreads();
  x = red[0];
  for (int w = 1; w < int(blockDim.x / 32); ++w) x = is_max ? fmaxf(x, red[w]) : x + red[w];
  return x;
}

// grid (num_seqs, H, D / cols), block cols x lanes threads, dynamic shared memory max_splits +
// lanes x cols floats: merges sequence s's splits of head h, columns [z cols, (z + 1) cols)
// (routed: max_splits is the workspace stride Hkv x the grid's splits, and the sequence's
// partition is routed_plan's). The splits' weights exp2(m_i - M) are computed once, in parallel,
// into shared memory; then lane r of column d sums the splits i = r (mod lanes) (independent
// loads), and lane 0 adds the lanes' sums in order. Dense launches: cols = D, lanes = 1 (one CTA
// per head, the plain column sum); routed ones: cols = 32, lanes = 8 (a routed sequence's active
// groups have up to Hkv times the splits, and 8x the CTAs and loads in flight merge them).
constexpr int kRoutedReduceCols = 32, kRoutedReduceLanes = 8;
template <class TQ>
__global__ void decode_reduce_kernel(const float* __restrict__ ws, int H, int D, int max_splits, int partition,
                                     int num_seqs, const int32_t* __restrict__ context_lens, TQ* __restrict__ out,
                                     const uint8_t* __restrict__ group_skip, int G, int cols) {
  extern __shared__ float weight[];  // [max_splits], then the lanes' sums [lanes][cols]
  __shared__ float red[32];
  pdl_wait();  // PDL (pdl.cuh)
  pdl_trigger();
  const int s = blockIdx.x, h = blockIdx.y, tid = threadIdx.x;
  const int lanes = blockDim.x / cols, r = tid / cols, d = blockIdx.z * cols + tid % cols;
  if (group_skip != nullptr) {
    const uint8_t* skip = group_skip + int64_t(s) * (H / G);
    if (skip[h / G]) return;  // written by the split kernel
    partition = routed_plan(skip, H / G, max_splits, context_lens[s]).partition;
  }
  const int splits = (context_lens[s] + partition - 1) / partition;
  const int64_t qh = int64_t(s) * H + h;
  const float* ml = ws + int64_t(num_seqs) * H * max_splits * D + qh * max_splits * 2;
  float mx = -INFINITY;
  for (int i = tid; i < splits; i += blockDim.x) mx = fmaxf(mx, ml[2 * i]);
  mx = block_reduce(mx, true, red);
  float lsum = 0.f;
  for (int i = tid; i < splits; i += blockDim.x) {
    weight[i] = exp2f(ml[2 * i] - mx);
    lsum += weight[i] * ml[2 * i + 1];
  }
  lsum = block_reduce(lsum, false, red);  // its barriers also publish weight[]
  const float* col = ws + qh * max_splits * D + d;
  float acc = 0.f;
#pragma unroll 8
  for (int i = r; i < splits; i += lanes) acc += weight[i] * col[int64_t(i) * D];
  if (lanes > 1) {
    float* sums = weight + max_splits;
    sums[tid] = acc;
    __syncthreads();
    if (r != 0) return;
    for (int j = 1; j < lanes; ++j) acc += sums[j * cols + tid];
  }
  out[qh * D + d] = from_f32<TQ>(acc / lsum);
}

}  // namespace
}  // namespace vlm::cuda
