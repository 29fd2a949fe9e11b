// Group-skipping split-K paged decode attention (SinkRouter's kernel, paper §4.3, ALGORITHMS.md
// §8.7). Every sequence of the batch has exactly one query row (its decode token). Work items
// are (sequence, kv group, key split): an item processes all G query heads of its group in one
// pass over its slice of the group's cache (K/V loaded once for the G heads), keeping f32
// (m, l, acc) partials that a second pass merges in f32. A group flagged in `skip` is decided
// before any of its cache is touched: its G output rows get the surrogate and none of its K/V
// blocks are read.
//
// group_skip_decode_ref: gathers K/V per sequence and runs a two-pass softmax in double;
// flagged groups get the same surrogate.
#pragma once

#include <cstdint>

#include "kernels/attention/paged_kv.h"

namespace vlm {

struct DecodeBatch {
  int num_seqs = 0;
  const int32_t* q_rows = nullptr;        // [S] row of q and out holding sequence s's token
  const int32_t* context_lens = nullptr;  // [S] cached tokens, this step's token included
  const int32_t* block_tables = nullptr;  // [S, max_blocks_per_seq]
  int max_blocks_per_seq = 0;
};

struct GroupSkipOptions {
  int num_splits = 0;  // key splits per active group; 0: chosen from the work and the threads
};

// q[T, H, D] post-RoPE, out[T, H, D] (only rows q_rows[s] are read and written).
// skip[S, Hkv]: 1 = sink group. surrogate[S, Hkv, D] f32: what a sink group's heads output, or
// nullptr for zeros. scale multiplies q·k.
// Preconditions: H % Hkv == 0; context_lens[s] >= 1; every block id in the first
// ceil(context_lens[s] / B) entries of an *active* group's row is in [0, num_blocks) (checked;
// InternalError otherwise).
void group_skip_decode_attention(const float* q /*[T,H,D]*/, int num_heads, const PagedKVLayer& kv,
                                 const DecodeBatch& batch, const uint8_t* skip /*[S,Hkv]*/,
                                 const float* surrogate /*[S,Hkv,D] or null*/, float scale,
                                 float* out /*[T,H,D]*/, const GroupSkipOptions& opt = {});

void group_skip_decode_ref(const float* q /*[T,H,D]*/, int num_heads, const PagedKVLayer& kv,
                           const DecodeBatch& batch, const uint8_t* skip /*[S,Hkv]*/,
                           const float* surrogate /*[S,Hkv,D] or null*/, float scale,
                           float* out /*[T,H,D]*/);

}  // namespace vlm
