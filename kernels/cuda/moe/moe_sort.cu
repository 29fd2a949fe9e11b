// The multi-block counting sort of the token-expert pairs (moe_cuda.h, step 2) for many pairs
// (prefill), and moe_sort, which picks it or the block-per-expert form (moe_route.cu).
//
// Why: the block-per-expert form has each of E blocks read all P choices twice, chunk by chunk
// with two block barriers per 256 pairs: 115 us at P = 65,536, E = 128 (H200, session 17), a
// latency-bound loop. Here the P pairs are cut into n = P / kSortChunk chunks (the last one takes
// the remainder: kSortChunk .. 2 kSortChunk - 1 pairs), and three launches each read them once:
//  1. chunk_count_kernel, a block per chunk: its per-expert counts (shared-memory atomics),
//     written into the first E entries of the chunk's own range of slot_of_pair (E <= kSortChunk:
//     no scratch memory, and only this chunk's block ever writes there).
//  2. chunk_scan_kernel, one block: per expert, the exclusive prefix of its counts over the
//     chunks (in place), its total; then a block scan of the totals gives offsets, tile starts
//     and the active list as the other forms write them.
//  3. chunk_scatter_kernel, a block per chunk: its 8 warps take contiguous parts of the chunk;
//     a warp's per-expert counts (one __match_any_sync per 32 pairs, the group's first lane
//     adding) become per-(warp, expert) first slots = offsets[e] + the chunk's prefix + the
//     earlier warps' counts; a second walk gives each pair slot = its warp's next slot for the
//     expert + its rank among the 32 lanes' equal choices. So the slots come out in pair order
//     within an expert, bit for bit the block-per-expert form's (the test compares them).
#include <climits>

#include "kernels/cuda/core/cuda_check.h"
#include "kernels/cuda/moe/moe_block_scan.cuh"
#include "kernels/cuda/moe/moe_cuda.h"

namespace vlm::cuda {
namespace {

constexpr int kChunkThreads = 256, kChunkWarps = kChunkThreads / 32;
constexpr int kScanThreads = 256;
static_assert(kMoeSortChunk >= kMoeMaxExperts, "a chunk's range of slot_of_pair holds its E counts");

// Chunk c of n: pairs [b, e) (the last chunk to P).
__device__ __forceinline__ void chunk_range(int c, int n, int P, int* b, int* e) {
  *b = c * static_cast<int>(kMoeSortChunk);
  *e = c == n - 1 ? P : *b + static_cast<int>(kMoeSortChunk);
}

__global__ void __launch_bounds__(kChunkThreads)
    chunk_count_kernel(const int32_t* __restrict__ expert, int P, int E, int n, int32_t* slot_of_pair) {
  extern __shared__ int cc_smem[];  // [E]
  int b, end;
  chunk_range(blockIdx.x, n, P, &b, &end);
  for (int e = threadIdx.x; e < E; e += kChunkThreads) cc_smem[e] = 0;
  __syncthreads();
  for (int i = b + threadIdx.x; i < end; i += kChunkThreads) atomicAdd(&cc_smem[expert[i]], 1);
  __syncthreads();
  for (int e = threadIdx.x; e < E; e += kChunkThreads) slot_of_pair[b + e] = cc_smem[e];
}

// Thread tid owns experts [e0, e1) (contiguous, for the block scan).
__global__ void __launch_bounds__(kScanThreads) chunk_scan_kernel(int E, int n, MoeSorted out) {
  const int per = (E + kScanThreads - 1) / kScanThreads, e0 = min(E, threadIdx.x * per), e1 = min(E, e0 + per);
  int3 mine = make_int3(0, 0, 0);  // pairs, row tiles, experts with pairs over [e0, e1)
  for (int e = e0; e < e1; ++e) {
    int run = 0;
    int32_t* col = out.slot_of_pair + e;
#pragma unroll 8
    for (int c = 0; c < n; ++c) {
      const int v = col[static_cast<int64_t>(c) * kMoeSortChunk];
      col[static_cast<int64_t>(c) * kMoeSortChunk] = run;
      run += v;
    }
    mine.x += run, mine.y += (run + kMoeTileRows - 1) / kMoeTileRows, mine.z += run > 0;
    out.offsets[e] = run;  // the count for now; the offset below (this thread's own entries)
  }
  int3 total;
  int3 at = block_exclusive_scan3<kScanThreads>(mine, &total);
  for (int e = e0; e < e1; ++e) {
    const int c = out.offsets[e];
    out.offsets[e] = at.x;
    out.tile_starts[e] = at.y;
    if (c > 0) out.active[at.z] = e;
    at.x += c, at.y += (c + kMoeTileRows - 1) / kMoeTileRows, at.z += c > 0;
  }
  if (threadIdx.x == 0) {
    out.offsets[E] = total.x;
    out.tile_starts[E] = total.y;
    out.active[E] = total.z;
  }
}

__global__ void __launch_bounds__(kChunkThreads)
    chunk_scatter_kernel(const int32_t* __restrict__ expert, int P, int E, int n, MoeSorted out) {
  extern __shared__ int cs_smem[];  // [kChunkWarps][E]: a warp's counts, then its next slots
  int b, end;
  chunk_range(blockIdx.x, n, P, &b, &end);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const unsigned lower = (1u << lane) - 1u;
  // The warp's part: [wb, we), a multiple of 32 pairs long but the last.
  const int part = ((end - b + kChunkWarps - 1) / kChunkWarps + 31) / 32 * 32;
  const int wb = min(end, b + warp * part), we = min(end, wb + part);
  int* mine = cs_smem + warp * E;
  for (int e = threadIdx.x; e < kChunkWarps * E; e += kChunkThreads) cs_smem[e] = 0;
  __syncthreads();
  for (int i0 = wb; i0 < we; i0 += 32) {
    const int i = i0 + lane;
    const int e = i < we ? expert[i] : -1;
    const unsigned same = __match_any_sync(0xffffffffu, e);
    if (e >= 0 && (same & lower) == 0) mine[e] += __popc(same);
    __syncwarp();
  }
  __syncthreads();
  for (int e = threadIdx.x; e < E; e += kChunkThreads) {
    int run = out.offsets[e] + out.slot_of_pair[b + e];  // read before any slot_of_pair write below
    for (int w = 0; w < kChunkWarps; ++w) {
      const int c = cs_smem[w * E + e];
      cs_smem[w * E + e] = run;
      run += c;
    }
  }
  __syncthreads();
  for (int i0 = wb; i0 < we; i0 += 32) {
    const int i = i0 + lane;
    const int e = i < we ? expert[i] : -1;
    const unsigned same = __match_any_sync(0xffffffffu, e);
    int slot = 0;
    if (e >= 0) slot = mine[e] + __popc(same & lower);
    __syncwarp();
    if (e >= 0) {
      out.pair_of_slot[slot] = i;
      out.slot_of_pair[i] = slot;
      if ((same & lower) == 0) mine[e] += __popc(same);
    }
    __syncwarp();
  }
}

}  // namespace

void moe_sort_chunked(const int32_t* expert, int64_t P, int64_t E, const MoeSorted& out, cudaStream_t s) {
  if (P < kMoeSortChunk || E < 1 || E > kMoeMaxExperts || P > INT_MAX / 2)
    precondition_failed("moe_sort_chunked: P >= kMoeSortChunk, 1 <= E <= 1024");
  const int n = static_cast<int>(P / kMoeSortChunk), p = static_cast<int>(P), e = static_cast<int>(E);
  chunk_count_kernel<<<static_cast<unsigned>(n), kChunkThreads, static_cast<size_t>(E) * sizeof(int), s>>>(
      expert, p, e, n, out.slot_of_pair);
  VLM_CUDA_CHECK_LAUNCH();
  chunk_scan_kernel<<<1, kScanThreads, 0, s>>>(e, n, out);
  VLM_CUDA_CHECK_LAUNCH();
  chunk_scatter_kernel<<<static_cast<unsigned>(n), kChunkThreads, static_cast<size_t>(kChunkWarps * E) * sizeof(int),
                         s>>>(expert, p, e, n, out);
  VLM_CUDA_CHECK_LAUNCH();
}

void moe_sort(const int32_t* expert, int64_t P, int64_t E, const MoeSorted& out, cudaStream_t s) {
  if (P >= kMoeSortChunk) moe_sort_chunked(expert, P, E, out, s);
  else moe_sort_per_expert(expert, P, E, out, s);
}

}  // namespace vlm::cuda
