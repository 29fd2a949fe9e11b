// The device view of flattened block-sparse plans (CudaBlockSparsePlan, cuda_block_sparse.h)
// and the kernel launcher that reads it. Plain C++17 (the .cu files compile as C++17; the public
// header uses std::span).
#pragma once

#include <cstdint>

#include "kernels/cuda/attention/cuda_attention.h"

namespace vlm::cuda {

// One (sequence, head) of the flattened plans: offsets (in int32 elements) into the plan buffer;
// q_order / k_order < 0: identity. flags: kHeadAlignedBlocks when every listed key block starts
// at a multiple of 64 (then a query block listing ceil(num_keys / 64) blocks lists every key).
constexpr int32_t kHeadAlignedBlocks = 1;
struct SparseHeadDesc {
  int64_t q_order, k_order, block_ptr, blocks, col_ptr, cols;
  int32_t t0, q_len, num_keys, flags;
};

// Splitting long work items along the keys: an item of more than `threshold` key tiles runs as
// pieces(tiles) CTAs, each over an equal share of its tile list (piece k of np: tiles
// [k * tiles / np, (k + 1) * tiles / np)), writing an unnormalized partial (O, row max, row sum)
// to a workspace slot; a combine kernel then merges them (log-sum-exp) into the output. An
// item's tiles: its key blocks plus ceil(cols / 64). piece = 0: no splitting.
struct SplitPolicy {
  int piece = 0;      // the target piece length in tiles
  int threshold = 0;  // items longer than this are split
#ifdef __CUDACC__
  __host__ __device__
#endif
  int pieces(int tiles) const { return piece > 0 && tiles > threshold ? (tiles + piece - 1) / piece : 1; }
};
constexpr int kMinSplitPiece = 16;     // the automatic policy's shortest piece
constexpr int64_t kMaxSplitSlots = 4096;  // the automatic policy's workspace bound (slots; 136 MB)
// The workspace of a split piece (one slot): O [64, 128] then (m, l) [64, 2], f32.
constexpr int64_t kSplitSlotFloats = 64 * 128 + 64 * 2;

// The automatic policy for num_items work items holding `blocks` key blocks and `cols` gathered
// columns in all, run by `resident` CTAs at a time: pieces of half a CTA's share of the tiles
// (work / (2 resident), at least kMinSplitPiece), items of more than two pieces split, the piece
// lengthened until the bound on the slots is at most kMaxSplitSlots (+ 1). So an item is split
// only when it is longer than the balanced time of the whole launch, and a longest-first
// schedule ends within about one piece of it; a chunk of short items (an early chunk) splits
// nothing but its few long items, into a few pieces. Host and device (CudaGridPlan computes it
// from the totals on the device) compute the same policy.
#ifdef __CUDACC__
__host__ __device__
#endif
inline SplitPolicy auto_split_policy(int64_t blocks, int64_t cols, int num_items, int resident) {
  SplitPolicy p;
  if (num_items <= 0) return p;
  const int64_t work = blocks + (cols + 63) / 64, share = 2 * static_cast<int64_t>(resident > 0 ? resident : 1);
  int64_t piece = (work + share - 1) / share;
  if (piece < kMinSplitPiece) piece = kMinSplitPiece;
  // Slots <= tiles / piece + tiles / (2 piece + 1) + 1 <= 1.5 tiles / piece + 1 (bounds below).
  const int64_t tiles = work + num_items;
  const int64_t slot_piece = (3 * tiles + 2 * kMaxSplitSlots - 1) / (2 * kMaxSplitSlots);
  if (piece < slot_piece) piece = slot_piece;
  p.piece = static_cast<int>(piece);
  p.threshold = 2 * p.piece;
  return p;
}

// The CTAs the automatic policy plans for (`resident` above): 2 per SM of the current device
// (the D = 128 kernel's occupancy).
int block_sparse_policy_ctas();

// The policy for num_items work items holding `blocks` key blocks and `cols` gathered columns in
// all: the knob's (set_block_sparse_split), or auto_split_policy(..., block_sparse_policy_ctas()).
SplitPolicy block_sparse_split_policy(int64_t blocks, int64_t cols, int num_items);
// Whether the knob fixes the policy (set_block_sparse_split != 0; then block_sparse_split_policy
// does not depend on the totals).
bool block_sparse_split_fixed();
// Bounds under p for such items: pieces (the launch size) and workspace slots (pieces of split
// items).
struct SplitBounds {
  int64_t pieces = 0, slots = 0;
};
SplitBounds block_sparse_split_bounds(const SplitPolicy& p, int64_t blocks, int64_t cols, int num_items);

// The device view the kernels read.
struct SparsePlanView {
  const int32_t* data = nullptr;         // the int32 arrays
  const SparseHeadDesc* descs = nullptr;  // [num_seqs * H]
  const int32_t* items = nullptr;         // [num_items, 4]: seq, head, qblock, desc index
  int num_items = 0;
  // Split work (piece_off nullptr: one CTA per item). piece_off[num_items + 1], slot_off[num_items
  // + 1] (device): exclusive sums of the items' piece counts and of their slots (the piece count
  // of a split item, 0 otherwise); entry num_items: the totals. At most max_pieces pieces (the
  // launch size; CTAs past the total exit). partial: the slots' workspace (kSplitSlotFloats each).
  const int32_t* piece_off = nullptr;
  const int32_t* slot_off = nullptr;
  int max_pieces = 0;
  float* partial = nullptr;
  // Persistent schedule (nullptr: one CTA per piece, max_pieces CTAs): a device counter the
  // launch zeroes; at most a resident grid of CTAs each take the next piece from it (in cost
  // order, longest first) until the pieces (piece_off[num_items], or num_items) run out.
  int32_t* queue = nullptr;
};

// The kernel launch of paged_block_sparse_attention (checks done by the caller).
void launch_block_sparse_attention(const void* q /*[T,H,D]*/, DType act, int num_heads, const PagedKVLayer& kv,
                                   const CudaAttentionBatch& batch, const SparsePlanView& plan, float scale,
                                   void* out /*[T,H,D]*/, cudaStream_t stream);

// Bench knob (bench_cuda_sparse_prefill's side-by-side, not for serving): true (the default) looks
// each key row of a tile up once and shares it through shared memory; false repeats the lookup
// per 16-byte chunk (the first version). Not thread-safe; set before launching.
void set_block_sparse_row_offsets(bool on);

// Test and bench knob for the plans made after it (CudaBlockSparsePlan::upload, CudaGridPlan::
// build): 0 (the default) the automatic split policy, < 0 no splitting, > 0 pieces of that many
// tiles for every item longer than it. Not thread-safe.
void set_block_sparse_split(int piece_tiles);

}  // namespace vlm::cuda
