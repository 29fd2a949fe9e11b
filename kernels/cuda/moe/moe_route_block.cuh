// The routing pieces shared by moe_route.cu (moe_route, moe_route_sort) and
// moe_router_fused.cu (moe_router_route_sort): one warp routes one token (route_token) and one
// block routes up to 64 tokens and groups their pairs by expert (route_sort_block). Device code
// only; every function inline.
#pragma once

#include <cfloat>
#include <climits>
#include <cstdint>

#include "kernels/cuda/moe/moe_block_scan.cuh"
#include "kernels/cuda/moe/moe_cuda.h"

namespace vlm::cuda::route_detail {

constexpr int kRouteSortThreads = 256;

constexpr float kTaken = -3.f, kNan = -2.f;  // below every probability

__device__ __forceinline__ float sanitized(float p) { return p == p ? p : kNan; }

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// One warp per token: its probabilities in shared memory [kRouteWarps][E]; K rounds of a warp
// argmax (ties: the lower expert), the chosen probability marked kTaken after each; lane j keeps
// choice j, then writes it at its rank among the choices by expert index. A NaN probability (a
// row of NaN or all -inf logits) counts as kNan, below every real one and above kTaken, so every
// choice is a valid expert whatever the row holds (the sort indexes by it).
// Token t's routing by one warp (p: the warp's [E] floats of shared memory); returns the lane's
// choice (lanes < K; INT_MAX on the others).
__device__ __forceinline__ int route_token(const float* logits, float* p, int t, int E, int K, bool norm,
                                           int lane, int32_t* expert, float* weight) {
  const float* l = logits + static_cast<int64_t>(t) * E;
  float mx = -FLT_MAX;
  for (int e = lane; e < E; e += 32) {
    p[e] = __ldcg(l + e);  // through L2: the fused router writes the logits in the same launch
    mx = fmaxf(mx, p[e]);
  }
  mx = warp_max(mx);
  float sum = 0.f;
  for (int e = lane; e < E; e += 32) sum += (p[e] = expf(p[e] - mx));
  sum = warp_sum(sum);
  for (int e = lane; e < E; e += 32) p[e] = sanitized(p[e] / sum);
  __syncwarp();
  int my_e = INT_MAX;
  float my_p = 0.f, wsum = 0.f;
  for (int j = 0; j < K; ++j) {
    float bv = kTaken;
    int bi = INT_MAX;
    for (int e = lane; e < E; e += 32)
      if (p[e] > bv) bv = p[e], bi = e;  // e ascending in a lane: a tie keeps the lower
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
      const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
      if (ov > bv || (ov == bv && oi < bi)) bv = ov, bi = oi;
    }
    wsum += bv;  // in the order chosen (largest first), as the CPU sums
    if (lane == j) my_e = bi, my_p = bv;
    __syncwarp();
    if (lane == 0) p[bi] = kTaken;
    __syncwarp();
  }
  int rank = 0;
  for (int i = 0; i < K; ++i) {
    const int other = __shfl_sync(0xffffffffu, my_e, i);
    if (other < my_e) ++rank;
  }
  if (lane < K) {
    expert[static_cast<int64_t>(t) * K + rank] = my_e;
    weight[static_cast<int64_t>(t) * K + rank] = norm ? my_p / wsum : my_p;
  }
  return my_e;
}

// moe_route then moe_sort in one block for T <= kMoeRouteSortMaxTokens: the warps route the
// tokens (route_token: the same results as route_kernel) and mark each choice in its expert's
// token mask (bit t); the masks give the counts, one block scan the offsets, tile starts and
// active list, and a pair's rank among its expert's pairs is the number of earlier tokens in the
// mask (a token chooses an expert at most once), so the slots come out in pair order as
// sort_kernel gives them. Shared memory: [E] masks, then [kRouteSortThreads / 32][E] floats (the
// warps' probabilities; the experts' offsets after routing).
// Called by every thread of a block of kRouteSortThreads; rs_smem: route_sort_smem(E) bytes of
// dynamic shared memory.
__device__ __forceinline__ void route_sort_block(const float* logits, int T, int E, int K, bool norm, int32_t* expert,
                                                 float* weight, const MoeSorted& out, unsigned long long* rs_smem) {
  unsigned long long* mask = rs_smem;                  // [E] tokens that chose expert e
  float* prob = reinterpret_cast<float*>(rs_smem + E);  // [warps][E]
  int* offset = reinterpret_cast<int*>(prob);           // [E] after routing
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  for (int e = tid; e < E; e += kRouteSortThreads) mask[e] = 0;
  __syncthreads();
  for (int t = warp; t < T; t += kRouteSortThreads / 32) {
    const int my_e = route_token(logits, prob + warp * E, t, E, K, norm, lane, expert, weight);
    if (lane < K) atomicOr(&mask[my_e], 1ull << t);
    __syncwarp();  // the warp's probabilities are rewritten by its next token
  }
  __syncthreads();
  const int per = (E + kRouteSortThreads - 1) / kRouteSortThreads, e0 = min(E, tid * per), e1 = min(E, e0 + per);
  int3 mine = make_int3(0, 0, 0);  // pairs, row tiles, experts with pairs over [e0, e1)
  for (int e = e0; e < e1; ++e) {
    const int c = __popcll(mask[e]);
    mine.x += c, mine.y += (c + kMoeTileRows - 1) / kMoeTileRows, mine.z += c > 0;
  }
  int3 total;
  int3 at = block_exclusive_scan3<kRouteSortThreads>(mine, &total);
  for (int e = e0; e < e1; ++e) {
    const int c = __popcll(mask[e]);
    out.offsets[e] = offset[e] = at.x;
    out.tile_starts[e] = at.y;
    if (c > 0) out.active[at.z] = e;
    at.x += c, at.y += (c + kMoeTileRows - 1) / kMoeTileRows, at.z += c > 0;
  }
  if (tid == 0) {
    out.offsets[E] = total.x;
    out.tile_starts[E] = total.y;
    out.active[E] = total.z;
  }
  __syncthreads();
  const int P = T * K;
  for (int i = tid; i < P; i += kRouteSortThreads) {
    const int t = i / K, e = expert[i];
    const int slot = offset[e] + __popcll(mask[e] & ((1ull << t) - 1ull));
    out.pair_of_slot[slot] = i;
    out.slot_of_pair[i] = slot;
  }
}

// Bytes of dynamic shared memory route_sort_block takes for E experts.
inline size_t route_sort_smem(int64_t E) {
  return static_cast<size_t>(E) * 8 + static_cast<size_t>(kRouteSortThreads / 32 * E) * sizeof(float);
}

}  // namespace vlm::cuda::route_detail
