// Warp-level routing and sorting for the norm-fused router (moe_norm_router.cu; moe_decode.h, 1n.):
// one warp routes one token with its E <= 32 * kPer probabilities in registers (lane l holds
// experts l, l + 32, ...), the top k by warp reductions (redux.sync: one max of the order-
// preserving keys, one min of the tied experts) in place of route_token's shuffle butterflies
// over shared memory; one warp groups the pairs by expert (a warp prefix sum over the experts'
// counts). The same results as route_token / route_sort_block (moe_route_block.cuh), bit for
// bit: the same softmax sums in the same order, the same choice rule (the largest probability,
// the lower expert on a tie, NaN as kNan), the same slots. Device code only (sm_80+).
#pragma once

#include <cfloat>
#include <climits>
#include <cstdint>

#include "kernels/cuda/moe/moe_route_block.cuh"

namespace vlm::cuda::route_warp {

using route_detail::kNan;
using route_detail::sanitized;

// An unsigned key with the order of the floats (no -0 among the probabilities: expf >= +0).
__device__ __forceinline__ unsigned float_key(float f) {
  const unsigned b = __float_as_uint(f);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
__device__ __forceinline__ float key_float(unsigned k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

// The lane's best untaken probability: its key (0: none) and slot i (expert lane + 32 i); i
// ascending with a strict > keeps the lower expert on a tie.
template <int kPer>
__device__ __forceinline__ unsigned lane_best(const float (&p)[kPer], unsigned avail, int* slot) {
  unsigned best = 0;
  int bi = 0;
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const unsigned k = (avail >> i) & 1u ? float_key(p[i]) : 0u;
    if (k > best) best = k, bi = i;
  }
  *slot = bi;
  return best;
}

// Token t's routing by one warp (route_token's contract and results): writes expert / weight
// [t, 0:K) in increasing expert index, and the same experts to pair_e [t, 0:K) (shared memory,
// for sort_pairs_warp: no round trip through global memory); returns the lane's choice (lanes <
// K; INT_MAX on the others). logits read through L2 (__ldcg: written by other blocks of the same
// launch).
template <int kPer>
__device__ __forceinline__ int route_token_regs(const float* logits, int t, int E, int K, bool norm, int lane,
                                                int32_t* expert, float* weight, int* pair_e) {
  const float* l = logits + static_cast<int64_t>(t) * E;
  float p[kPer];
  unsigned avail = 0;  // bit i: expert lane + 32 i exists and is not taken
  float mx = -FLT_MAX;
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int e = lane + 32 * i;
    p[i] = e < E ? __ldcg(l + e) : 0.f;
    if (e < E) mx = fmaxf(mx, p[i]), avail |= 1u << i;
  }
  mx = route_detail::warp_max(mx);
  float sum = 0.f;
#pragma unroll
  for (int i = 0; i < kPer; ++i)
    if (lane + 32 * i < E) sum += (p[i] = expf(p[i] - mx));
  sum = route_detail::warp_sum(sum);
#pragma unroll
  for (int i = 0; i < kPer; ++i) p[i] = sanitized(p[i] / sum);
  int slot = 0;
  unsigned mine = lane_best(p, avail, &slot);
  int my_e = INT_MAX;
  float my_p = 0.f, wsum = 0.f;
  for (int j = 0; j < K; ++j) {
    const unsigned top = __reduce_max_sync(0xffffffffu, mine);
    const int bi = __reduce_min_sync(0xffffffffu, mine == top ? lane + 32 * slot : INT_MAX);
    const float bv = key_float(top);
    wsum += bv;  // in the order chosen (largest first), as route_token sums
    if (lane == j) my_e = bi, my_p = bv;
    if (bi % 32 == lane) {  // the owner drops it and finds its next best
      avail &= ~(1u << (bi / 32));
      mine = lane_best(p, avail, &slot);
    }
  }
  int rank = 0;
  for (int i = 0; i < K; ++i) {
    const int other = __shfl_sync(0xffffffffu, my_e, i);
    if (other < my_e) ++rank;
  }
  if (lane < K) {
    pair_e[t * K + rank] = my_e;
    expert[static_cast<int64_t>(t) * K + rank] = my_e;
    weight[static_cast<int64_t>(t) * K + rank] = norm ? my_p / wsum : my_p;
  }
  return my_e;
}

// One warp sorts the T * K pairs (T <= 32) by expert from mask[e] (bit t: token t chose e; E <=
// 32 * kPer) into `out` (route_sort_block's outputs, the same values): lane l owns experts
// [l * per, (l + 1) * per), per = ceil(E / 32); its counts (pairs, row tiles, experts with pairs)
// packed 10 bits each into one int for a warp inclusive scan; offset: [E] shared scratch.
// pair_e: [T, K] shared memory as route_token_regs wrote it (the caller synchronizes the block).
__device__ __forceinline__ void sort_pairs_warp(const unsigned* mask, int* offset, const int* pair_e, int T,
                                                int E, int K, int lane, const MoeSorted& out) {
  const int per = (E + 31) / 32, e0 = min(E, lane * per), e1 = min(E, e0 + per);
  int mine = 0;
  for (int e = e0; e < e1; ++e) {
    const int c = __popc(mask[e]);
    mine += c + (((c + kMoeTileRows - 1) / kMoeTileRows) << 10) + ((c > 0) << 20);
  }
  int inc = mine;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int v = __shfl_up_sync(0xffffffffu, inc, o);
    if (lane >= o) inc += v;
  }
  const int total = __shfl_sync(0xffffffffu, inc, 31);
  const int at = inc - mine;
  int ax = at & 1023, ay = (at >> 10) & 1023, az = at >> 20;
  for (int e = e0; e < e1; ++e) {
    const int c = __popc(mask[e]);
    out.offsets[e] = offset[e] = ax;
    out.tile_starts[e] = ay;
    if (c > 0) out.active[az] = e;
    ax += c, ay += (c + kMoeTileRows - 1) / kMoeTileRows, az += c > 0;
  }
  if (lane == 0) {
    out.offsets[E] = total & 1023;
    out.tile_starts[E] = (total >> 10) & 1023;
    out.active[E] = total >> 20;
  }
  __syncwarp();
  const int P = T * K;
  for (int i = lane; i < P; i += 32) {
    const int t = i / K, e = pair_e[i];
    const int slot = offset[e] + __popc(mask[e] & ((1u << t) - 1u));
    out.pair_of_slot[slot] = i;
    out.slot_of_pair[i] = slot;
  }
}

}  // namespace vlm::cuda::route_warp
