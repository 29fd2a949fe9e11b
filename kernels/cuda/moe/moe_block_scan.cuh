// A block-wide exclusive prefix sum of three counts at once (the MoE sorts' offsets, row tiles
// and active experts), shared by moe_route.cu and moe_sort.cu.
#pragma once

namespace vlm::cuda {

// Exclusive prefix sums over the block (kThreads, a multiple of 32) of three counts at once;
// `total` gets the block's sums. Every thread calls it (it synchronizes the block once).
template <int kThreads>
__device__ __forceinline__ int3 block_exclusive_scan3(int3 v, int3* total) {
  __shared__ int3 warp_sums[kThreads / 32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  int3 inc = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int a = __shfl_up_sync(0xffffffffu, inc.x, o), b = __shfl_up_sync(0xffffffffu, inc.y, o),
              c = __shfl_up_sync(0xffffffffu, inc.z, o);
    if (lane >= o) inc.x += a, inc.y += b, inc.z += c;
  }
  if (lane == 31) warp_sums[warp] = inc;
  __syncthreads();
  int3 before = make_int3(0, 0, 0), all = make_int3(0, 0, 0);
  for (int w = 0; w < kThreads / 32; ++w) {
    const int3 ws = warp_sums[w];
    if (w < warp) before.x += ws.x, before.y += ws.y, before.z += ws.z;
    all.x += ws.x, all.y += ws.y, all.z += ws.z;
  }
  *total = all;
  return make_int3(before.x + inc.x - v.x, before.y + inc.y - v.y, before.z + inc.z - v.z);
}

}  // namespace vlm::cuda
