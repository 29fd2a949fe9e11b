// Routing and sorting of the mixture-of-experts block (moe_cuda.h, steps 1 and 2), each beside
// its naive reference.
#include <cfloat>
#include <climits>

#include "kernels/cuda/core/cuda_check.h"
#include "kernels/cuda/moe/moe_cuda.h"
#include "kernels/cuda/moe/moe_route_block.cuh"

namespace vlm::cuda {
namespace {

using namespace route_detail;

constexpr int kRouteWarps = 4;
constexpr int kSortThreads = 256;

__global__ void __launch_bounds__(32 * kRouteWarps)
    route_kernel(const float* __restrict__ logits, int T, int E, int K, bool norm, int32_t* expert, float* weight) {
  extern __shared__ float route_smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int t = blockIdx.x * kRouteWarps + warp;
  if (t >= T) return;
  route_token(logits, route_smem + warp * E, t, E, K, norm, lane, expert, weight);
}

// moe_route then moe_sort in one block (route_sort_block).
__global__ void __launch_bounds__(kRouteSortThreads)
    route_sort_kernel(const float* __restrict__ logits, int T, int E, int K, bool norm, int32_t* expert,
                      float* weight, MoeSorted out) {
  extern __shared__ unsigned long long rs_smem[];
  route_sort_block(logits, T, E, K, norm, expert, weight, out, rs_smem);
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
  const size_t smem = route_sort_smem(E);
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
