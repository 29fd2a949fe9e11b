// Device pieces shared by the block-sparse attention kernels (block_sparse_attention.cu: mma.sync,
// any GPU; block_sparse_sm90.cu: wgmma, sm_90a): a work item's key tiles as the plan names them,
// the (item, piece) of a piece index, and the store of a warp's 16 finished rows (normalized to
// the output, or a split piece's partial to its workspace slot). Internal to
// kernels/cuda/sparse_prefill.
#pragma once

#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "kernels/cuda/attention/cuda_attention_common.cuh"
#include "kernels/cuda/attention/mma_tile.cuh"
#include "kernels/cuda/sparse_prefill/sparse_plan_view.h"

namespace vlm::cuda::sparse {

constexpr int kBM = 64;          // query rows per work item (the plan's block_m)
constexpr int kBN = 64;          // keys per tile (the plan's block_n)
constexpr int kNoKey = INT_MAX;  // position of an empty tile slot: masked for every row

// The key tiles of one work item: its listed key blocks, then its gathered columns 64 at a time.
// An item listing every aligned key block (a horizontal line's query block: every key; blocks
// are disjoint) takes its tiles in position order instead (`every`: tile t = keys [64 t, 64 t +
// 64)): the same keys, so the same attention up to the summation order, but read in the order
// every such item of the KV head reads them whatever its head's key permutation -- the heads
// sharing a KV head, whose items run side by side (equal cost, adjacent in the schedule), then
// share the tiles in L2 -- and contiguous in the cache.
struct TileList {
  const int32_t* blocks;  // key block starts k0 (in k_order order)
  const int32_t* korder;  // nullptr: identity
  const int32_t* cols;    // gathered key positions
  int nb, nc, num_keys, maxpos;
  bool every;
  __device__ int count() const { return nb + (nc + kBN - 1) / kBN; }
  // Position of slot r of tile t, or -1 (past the keys, or invisible to every row of the item).
  __device__ int position(int t, int r) const {
    int p;
    if (every) {
      p = t * kBN + r;
      if (p >= num_keys) return -1;
    } else if (t < nb) {
      const int i = blocks[t] + r;
      if (i >= num_keys) return -1;
      p = korder ? korder[i] : i;
    } else {
      const int c = (t - nb) * kBN + r;
      if (c >= nc) return -1;
      p = cols[c];
    }
    return p <= maxpos ? p : -1;
  }
};

// The tile list of query block qb of head descriptor hd; maxpos: the largest original position
// of the item's rows.
__device__ __forceinline__ TileList tile_list(const int32_t* data, const SparseHeadDesc& hd, int qb, int maxpos) {
  const int32_t* bptr = data + hd.block_ptr;
  const int32_t* cptr = data + hd.col_ptr;
  TileList tl;
  tl.blocks = data + hd.blocks + bptr[qb];
  tl.korder = hd.k_order >= 0 ? data + hd.k_order : nullptr;
  tl.cols = data + hd.cols + cptr[qb];
  tl.nb = bptr[qb + 1] - bptr[qb];
  tl.nc = cptr[qb + 1] - cptr[qb];
  tl.num_keys = hd.num_keys;
  tl.maxpos = maxpos;
  tl.every = (hd.flags & kHeadAlignedBlocks) && tl.nc == 0 && tl.nb == (hd.num_keys + kBN - 1) / kBN;
  return tl;
}

// Row i0 + r of a query block through q_order (-1: past q_len).
__device__ __forceinline__ int item_row(const int32_t* data, const SparseHeadDesc& hd, int i) {
  return i < hd.q_len ? (hd.q_order >= 0 ? data[hd.q_order + i] : i) : -1;
}

// Piece p of the launch (pieces numbered in cost order; piece_off: the exclusive sums of the
// items' piece counts, nullptr: one piece per item): its work item and which piece of it.
struct PieceRef {
  int it, piece, npieces;
};
__device__ __forceinline__ PieceRef find_piece(const SparsePlanView& plan, int p) {
  PieceRef r{p, 0, 1};
  if (plan.piece_off) {
    int lo = 0, hi = plan.num_items - 1;  // the last item whose pieces start at or before p
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (plan.piece_off[mid] <= p) lo = mid;
      else hi = mid - 1;
    }
    r.it = lo, r.piece = p - plan.piece_off[lo], r.npieces = plan.piece_off[lo + 1] - plan.piece_off[lo];
  }
  return r;
}

// The pieces of a launch: piece_off's total, or one per item.
__device__ __forceinline__ int total_pieces(const SparsePlanView& plan) {
  return plan.piece_off ? plan.piece_off[plan.num_items] : plan.num_items;
}

// Stores one warp's 16 rows (row0 + g, row0 + g + 8 of the item; lane = 4 g + t4) from the online
// softmax's state (o in the mma C layout, m, l per thread): a split piece (pr.npieces > 1) its
// unnormalized O and the rows' (m, l) to its workspace slot, else the normalized rows (a row with
// no key: zeros) to out through row_idx (the item's rows, -1: none).
template <int D, class TQ>
__device__ __forceinline__ void store_item_rows(const SparsePlanView& plan, const PieceRef& pr, const float (&o)[D / 8][4],
                                                const float (&m)[2], const float (&l)[2], int row0, const int* row_idx,
                                                int t0, int H, int h, TQ* __restrict__ out, int lane) {
  const int g = lane / 4, t4 = lane % 4;
  if (pr.npieces > 1) {
    float* slot = plan.partial + (int64_t(plan.slot_off[pr.it]) + pr.piece) * kSplitSlotFloats;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float sum = tile::quad_sum(l[r]);
      const int row = row0 + g + 8 * r;
      float* dst = slot + row * 128;
#pragma unroll
      for (int c = 0; c < D / 8; ++c)
        *reinterpret_cast<float2*>(dst + c * 8 + 2 * t4) = make_float2(o[c][2 * r], o[c][2 * r + 1]);
      if (t4 == 0) *reinterpret_cast<float2*>(slot + 64 * 128 + 2 * row) = make_float2(m[r], sum);
    }
    return;
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float sum = tile::quad_sum(l[r]);
    const float inv = sum > 0.f ? 1.f / sum : 0.f;
    const int ri = row_idx[row0 + g + 8 * r];
    if (ri < 0) continue;
    TQ* dst = out + (int64_t(t0 + ri) * H + h) * D;
#pragma unroll
    for (int c = 0; c < D / 8; ++c) {
      dst[c * 8 + 2 * t4] = from_f32<TQ>(o[c][2 * r] * inv);
      dst[c * 8 + 2 * t4 + 1] = from_f32<TQ>(o[c][2 * r + 1] * inv);
    }
  }
}

// The combine of split items: each item of more than one piece merges its pieces' partials
// (log-sum-exp over the rows' maxima m, in the log2 domain of online_softmax) into the output
// rows. A small grid (combine_ctas: a few CTAs per SM, not one per item: most items are not
// split) over units of kCombineRows rows of a split item: unit u = item * kCombineParts + part,
// CTA b takes units b, b + G, b + 2G, ... (G = gridDim.x); warp 0 reads the piece counts of 32 of
// its units' items at once and lists the split ones, then the CTA merges them one by one, each
// thread a float4 of a row per pass with its pieces' loads independent. (The first version: one
// CTA of 128 threads per item, every element's pieces read in a dependent chain: ~0.2 ms a layer
// late in a 128K prompt, latency-bound.) The arithmetic is the first version's, term by term in
// piece order (the same sums in the same order).
constexpr int kCombineThreads = 256;
constexpr int kCombineParts = 4, kCombineRows = kBM / kCombineParts;

template <int D, class TQ>
__device__ __forceinline__ void combine_rows(int H, const SparsePlanView& plan, int it, int part, TQ* __restrict__ out,
                                             float* row_max, float* row_inv, int* row_idx) {
  const int np = plan.piece_off[it + 1] - plan.piece_off[it];
  const float* slots = plan.partial + int64_t(plan.slot_off[it]) * kSplitSlotFloats;
  const int32_t* item = plan.items + 4 * int64_t(it);
  const int h = item[1], qb = item[2];
  const SparseHeadDesc hd = plan.descs[item[3]];
  const int tid = threadIdx.x, row0 = part * kCombineRows;
  if (tid < kCombineRows) {
    const int row = row0 + tid;
    row_idx[tid] = sparse::item_row(plan.data, hd, qb * kBM + row);
    float mx = -INFINITY;
#pragma unroll 8
    for (int k = 0; k < np; ++k) mx = fmaxf(mx, slots[k * kSplitSlotFloats + 64 * 128 + 2 * row]);
    float sum = 0.f;
    if (mx != -INFINITY) {
#pragma unroll 8
      for (int k = 0; k < np; ++k) {
        const float2 ml = *reinterpret_cast<const float2*>(slots + k * kSplitSlotFloats + 64 * 128 + 2 * row);
        if (ml.x != -INFINITY) sum += ml.y * exp2f(ml.x - mx);
      }
    }
    row_max[tid] = mx;
    row_inv[tid] = sum > 0.f ? 1.f / sum : 0.f;
  }
  __syncthreads();
  constexpr int kQuads = D / 4;  // float4s per row
  constexpr int kRowsPerPass = kCombineThreads / kQuads;
  const int c = (tid % kQuads) * 4;
  for (int r = tid / kQuads; r < kCombineRows; r += kRowsPerPass) {
    const int ri = row_idx[r], row = row0 + r;
    if (ri < 0) continue;
    const float mx = row_max[r];
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    if (mx != -INFINITY) {
#pragma unroll 8
      for (int k = 0; k < np; ++k) {
        const float* sl = slots + k * kSplitSlotFloats;
        const float mk = sl[64 * 128 + 2 * row];
        const float4 v = *reinterpret_cast<const float4*>(sl + row * 128 + c);
        if (mk != -INFINITY) {
          const float w = exp2f(mk - mx);
          acc[0] += v.x * w;
          acc[1] += v.y * w;
          acc[2] += v.z * w;
          acc[3] += v.w * w;
        }
      }
    }
    TQ* dst = out + (int64_t(hd.t0 + ri) * H + h) * D + c;
#pragma unroll
    for (int e = 0; e < 4; ++e) dst[e] = from_f32<TQ>(acc[e] * row_inv[r]);
  }
  __syncthreads();  // the rows' shared values are read
}

template <int D, class TQ>
__global__ void __launch_bounds__(kCombineThreads) combine_kernel(int H, SparsePlanView plan, TQ* __restrict__ out) {
  __shared__ float row_max[kCombineRows], row_inv[kCombineRows];
  __shared__ int row_idx[kCombineRows];
  __shared__ int split_units[32];
  __shared__ int num_split;
  const int tid = threadIdx.x, G = gridDim.x;
  const int64_t units = int64_t(plan.num_items) * kCombineParts;
  for (int64_t base = blockIdx.x; base < units; base += 32 * int64_t(G)) {
    if (tid < 32) {
      const int64_t u = base + int64_t(tid) * G;
      const int it = static_cast<int>(u / kCombineParts);
      const bool split = u < units && plan.piece_off[it + 1] - plan.piece_off[it] > 1;
      const unsigned ballot = __ballot_sync(0xffffffffu, split);
      if (split) split_units[__popc(ballot & ((1u << tid) - 1))] = static_cast<int>(u);
      if (tid == 0) num_split = __popc(ballot);
    }
    __syncthreads();
    const int n = num_split;
    for (int j = 0; j < n; ++j)
      combine_rows<D, TQ>(H, plan, split_units[j] / kCombineParts, split_units[j] % kCombineParts, out, row_max,
                          row_inv, row_idx);
    __syncthreads();  // split_units and num_split are rewritten next pass
  }
}

// The combine's grid: 4 CTAs per SM of the current device at most, one per unit at most.
inline int combine_ctas(int num_items) {
  static const int ctas = [] {
    int dev = 0, sms = 0;
    VLM_CUDA_CHECK(cudaGetDevice(&dev));
    VLM_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    return 4 * (sms > 0 ? sms : 1);
  }();
  const int64_t units = int64_t(num_items) * kCombineParts;
  return units < ctas ? static_cast<int>(units) : ctas;
}

// The combine after a launch over split pieces (plan.piece_off set; else nothing).
template <int D, class TQ>
void combine_pieces(int H, const SparsePlanView& plan, TQ* out, cudaStream_t stream) {
  if (!plan.piece_off || plan.num_items <= 0) return;
  combine_kernel<D, TQ><<<combine_ctas(plan.num_items), kCombineThreads, 0, stream>>>(H, plan, out);
  VLM_CUDA_CHECK_LAUNCH();
}

// The CTAs of a resident grid of `kernel` (threads and dynamic shared memory per CTA) on the
// current device: its occupancy times the SMs, at least 1.
template <class Kernel>
int resident_ctas(Kernel* kernel, int threads, int smem) {
  int dev = 0, sms = 0, per_sm = 0;
  VLM_CUDA_CHECK(cudaGetDevice(&dev));
  VLM_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  VLM_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
  return sms * per_sm > 0 ? sms * per_sm : 1;
}

// The grid of a launch over `plan`: a CTA per piece (per item when unsplit); with a queue, at most
// `resident` CTAs (resident_ctas of the kernel) taking pieces from the queue, reset on `stream`.
inline int launch_ctas(const SparsePlanView& plan, int resident, cudaStream_t stream) {
  int ctas = plan.piece_off ? plan.max_pieces : plan.num_items;
  if (plan.queue) {
    ctas = ctas < resident ? ctas : resident;
    VLM_CUDA_CHECK(cudaMemsetAsync(plan.queue, 0, sizeof(int32_t), stream));
  }
  return ctas;
}

}  // namespace vlm::cuda::sparse
