// Routing and sorting of the mixture-of-experts block (moe_cuda.h, steps 1 and 2), each beside
// its naive reference.
#include <cfloat>
#include <climits>

#include "kernels/cuda/core/cuda_check.h"
#include "kernels/cuda/moe/moe_block_scan.cuh"
#include "kernels/cuda/moe/moe_cuda.h"

namespace vlm::cuda {
namespace {

constexpr int kRouteWarps = 4;
constexpr int kSortThreads = 256;
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
__device__ __forceinline__ int route_token(const float* __restrict__ logits, float* p, int t, int E, int K, bool norm,
                                           int lane, int32_t* expert, float* weight) {
  const float* l = logits + static_cast<int64_t>(t) * E;
  float mx = -FLT_MAX;
  for (int e = lane; e < E; e += 32) {
    p[e] = l[e];
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

__global__ void __launch_bounds__(32 * kRouteWarps)
    route_kernel(const float* __restrict__ logits, int T, int E, int K, bool norm, int32_t* expert, float* weight) {
  extern __shared__ float route_smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int t = blockIdx.x * kRouteWarps + warp;
  if (t >= T) return;
  route_token(logits, route_smem + warp * E, t, E, K, norm, lane, expert, weight);
}

// moe_route then moe_sort in one block for T <= kMoeRouteSortMaxTokens: the warps route the
// tokens (route_token: the same results as route_kernel) and mark each choice in its expert's
// token mask (bit t); the masks give the counts, one block scan the offsets, tile starts and
// active list, and a pair's rank among its expert's pairs is the number of earlier tokens in the
// mask (a token chooses an expert at most once), so the slots come out in pair order as
// sort_kernel gives them. Shared memory: [E] masks, then [kRouteSortThreads / 32][E] floats (the
// warps' probabilities; the experts' offsets after routing).
__global__ void __launch_bounds__(kRouteSortThreads)
    route_sort_kernel(const float* __restrict__ logits, int T, int E, int K, bool norm, int32_t* expert,
                      float* weight, MoeSorted out) {
  extern __shared__ unsigned long long rs_smem[];
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

// One thread per token, every loop in index order (probabilities in the caller's copy: p is
// scratch [T, E] the kernel writes).
__global__ void route_naive_kernel(const float* __restrict__ logits, float* p_all, int T, int E, int K, bool norm,
                                   int32_t* expert, float* weight) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= T) return;
  const float* l = logits + static_cast<int64_t>(t) * E;
  float* p = p_all + static_cast<int64_t>(t) * E;
  float mx = -FLT_MAX, sum = 0.f;
  for (int e = 0; e < E; ++e) mx = fmaxf(mx, l[e]);
  for (int e = 0; e < E; ++e) sum += (p[e] = expf(l[e] - mx));
  for (int e = 0; e < E; ++e) p[e] = sanitized(p[e] / sum);
  int32_t* ex = expert + static_cast<int64_t>(t) * K;
  float* wt = weight + static_cast<int64_t>(t) * K;
  float wsum = 0.f;
  for (int j = 0; j < K; ++j) {  // the largest left, the lower expert on a tie
    int best = -1;
    for (int e = 0; e < E; ++e)
      if (p[e] > kTaken && (best < 0 || p[e] > p[best])) best = e;
    ex[j] = best;
    wt[j] = p[best];
    wsum += p[best];
    p[best] = kTaken;
  }
  for (int j = 1; j < K; ++j)  // insertion sort by expert
    for (int i = j; i > 0 && ex[i - 1] > ex[i]; --i) {
      const int te = ex[i];
      ex[i] = ex[i - 1];
      ex[i - 1] = te;
      const float tw = wt[i];
      wt[i] = wt[i - 1];
      wt[i - 1] = tw;
    }
  if (norm)
    for (int j = 0; j < K; ++j) wt[j] = wt[j] / wsum;
}

// Block e (of E): counts every expert's pairs in shared memory, writes its own offset and first
// tile (block E-1 also the totals), then gives its pairs their slots in pair order (a ballot per
// warp, a prefix over the block's warps, chunk by chunk).
__global__ void __launch_bounds__(kSortThreads)
    sort_kernel(const int32_t* __restrict__ expert, int P, int E, MoeSorted out) {
  extern __shared__ int sort_smem[];  // [E] counts, then [kSortThreads / 32] warp totals
  int* count = sort_smem;
  int* warp_total = sort_smem + E;
  const int e = blockIdx.x, tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  for (int i = tid; i < E; i += kSortThreads) count[i] = 0;
  __syncthreads();
  for (int i = tid; i < P; i += kSortThreads) atomicAdd(&count[expert[i]], 1);
  __syncthreads();
  __shared__ int base_slot;
  if (tid == 0) {
    int off = 0, tiles = 0, busy = 0;
    for (int i = 0; i < e; ++i)
      off += count[i], tiles += (count[i] + kMoeTileRows - 1) / kMoeTileRows, busy += count[i] > 0;
    out.offsets[e] = off;
    out.tile_starts[e] = tiles;
    if (count[e] > 0) out.active[busy] = e;
    if (e == E - 1) {
      out.offsets[E] = off + count[e];
      out.tile_starts[E] = tiles + (count[e] + kMoeTileRows - 1) / kMoeTileRows;
      out.active[E] = busy + (count[e] > 0);
    }
    base_slot = off;
  }
  __syncthreads();
  int running = base_slot;
  for (int c0 = 0; c0 < P; c0 += kSortThreads) {
    const int i = c0 + tid;
    const bool mine = i < P && expert[i] == e;
    const unsigned ballot = __ballot_sync(0xffffffffu, mine);
    if (lane == 0) warp_total[warp] = __popc(ballot);
    __syncthreads();
    int before = 0, total = 0;
    for (int w = 0; w < kSortThreads / 32; ++w) {
      if (w < warp) before += warp_total[w];
      total += warp_total[w];
    }
    if (mine) {
      const int slot = running + before + __popc(ballot & ((1u << lane) - 1u));
      out.pair_of_slot[slot] = i;
      out.slot_of_pair[i] = slot;
    }
    running += total;
    __syncthreads();  // warp_total is rewritten by the next chunk
  }
}

__global__ void sort_naive_kernel(const int32_t* __restrict__ expert, int P, int E, MoeSorted out) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  for (int e = 0; e <= E; ++e) out.offsets[e] = 0;
  for (int i = 0; i < P; ++i) ++out.offsets[expert[i] + 1];
  out.tile_starts[0] = 0;
  int busy = 0;
  for (int e = 0; e < E; ++e) {
    if (out.offsets[e + 1] > 0) out.active[busy++] = e;
    out.tile_starts[e + 1] = out.tile_starts[e] + (out.offsets[e + 1] + kMoeTileRows - 1) / kMoeTileRows;
    out.offsets[e + 1] += out.offsets[e];
  }
  out.active[E] = busy;
  for (int e = 0; e < E; ++e) {  // pairs of expert e in pair order
    int slot = out.offsets[e];
    for (int i = 0; i < P; ++i)
      if (expert[i] == e) out.pair_of_slot[slot] = i, out.slot_of_pair[i] = slot, ++slot;
  }
}

void check_route(int64_t T, int64_t E, int64_t K) {
  if (T < 0 || E < 1 || E > kMoeMaxExperts || K < 1 || K > E || K > kMoeMaxTopK)
    precondition_failed("moe_route: 1 <= K <= min(E, 32), E <= 1024");
}

}  // namespace

void moe_route(const float* logits, int64_t T, int64_t E, int64_t K, bool norm_topk, int32_t* expert, float* weight,
               cudaStream_t s) {
  check_route(T, E, K);
  if (T == 0) return;
  const auto blocks = static_cast<unsigned>((T + kRouteWarps - 1) / kRouteWarps);
  const size_t smem = static_cast<size_t>(kRouteWarps * E) * sizeof(float);
  route_kernel<<<blocks, 32 * kRouteWarps, smem, s>>>(logits, static_cast<int>(T), static_cast<int>(E),
                                                      static_cast<int>(K), norm_topk, expert, weight);
  VLM_CUDA_CHECK_LAUNCH();
}

void moe_route_naive(const float* logits, int64_t T, int64_t E, int64_t K, bool norm_topk, int32_t* expert,
                     float* weight, cudaStream_t s) {
  check_route(T, E, K);
  if (T == 0) return;
  float* p = nullptr;  // the reference may allocate (tests only)
  VLM_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&p), static_cast<size_t>(T * E) * sizeof(float), s));
  route_naive_kernel<<<static_cast<unsigned>((T + 127) / 128), 128, 0, s>>>(
      logits, p, static_cast<int>(T), static_cast<int>(E), static_cast<int>(K), norm_topk, expert, weight);
  VLM_CUDA_CHECK_LAUNCH();
  VLM_CUDA_CHECK(cudaFreeAsync(p, s));
}

void moe_sort_per_expert(const int32_t* expert, int64_t P, int64_t E, const MoeSorted& out, cudaStream_t s) {
  if (P < 0 || E < 1 || E > kMoeMaxExperts || P > INT_MAX / 2)
    precondition_failed("moe_sort_per_expert: 1 <= E <= 1024");
  const size_t smem = static_cast<size_t>(E + kSortThreads / 32) * sizeof(int);
  sort_kernel<<<static_cast<unsigned>(E), kSortThreads, smem, s>>>(expert, static_cast<int>(P), static_cast<int>(E),
                                                                    out);
  VLM_CUDA_CHECK_LAUNCH();
}

void moe_route_sort(const float* logits, int64_t T, int64_t E, int64_t K, bool norm_topk, int32_t* expert,
                    float* weight, const MoeSorted& sorted, cudaStream_t s) {
  check_route(T, E, K);
  if (T > kMoeRouteSortMaxTokens) {
    moe_route(logits, T, E, K, norm_topk, expert, weight, s);
    moe_sort(expert, T * K, E, sorted, s);
    return;
  }
  const size_t smem = static_cast<size_t>(E) * 8 + static_cast<size_t>(kRouteSortThreads / 32 * E) * sizeof(float);
  route_sort_kernel<<<1, kRouteSortThreads, smem, s>>>(logits, static_cast<int>(T), static_cast<int>(E),
                                                       static_cast<int>(K), norm_topk, expert, weight, sorted);
  VLM_CUDA_CHECK_LAUNCH();
}

void moe_sort_naive(const int32_t* expert, int64_t P, int64_t E, const MoeSorted& out, cudaStream_t s) {
  if (P < 0 || E < 1 || P > INT_MAX / 2) precondition_failed("moe_sort_naive: E >= 1");
  sort_naive_kernel<<<1, 1, 0, s>>>(expert, static_cast<int>(P), static_cast<int>(E), out);
  VLM_CUDA_CHECK_LAUNCH();
}

}  // namespace vlm::cuda
