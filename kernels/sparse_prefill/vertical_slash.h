// Vertical-slash (MInference, ALGORITHMS.md §3): per query head, estimate the top-k vertical
// lines (key columns) and slash lines (diagonals) from the last queries of the chunk, then turn
// them into per-query-block key ranges and gathered columns with the index->block conversion of
// §3.3 (vLLM's chunk-aware variant: causal offset off = num_keys - q_len).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/attention/block_sparse_plan.h"

namespace vlm {

struct VerticalSlashParams {
  int vertical_size = 1000;
  int slash_size = 6096;
  int last_q = 64;             // estimation queries (the chunk's last rows)
  int forced_verticals = 30;   // vert[0:30] = +inf: the first tokens are always kept
  int forced_slashes = 100;    // offsets 0..99 = +inf: the band next to the diagonal
};

struct VerticalSlashIndices {
  std::vector<int32_t> vertical;  // key columns, ascending
  std::vector<int32_t> slash;     // diagonal offsets o = position(query) - key, descending
};

// q_last[last_q, D]: the head's queries of the chunk's last last_q rows (positions
// num_keys - last_q .. num_keys - 1); keys[num_keys, D] post-RoPE f32 of its kv head. Sizes are
// clamped as in §3.2: v = min(N, max(vertical_size, 30)), s = min(N, max(slash_size, 50)).
// Softmax in f32 with the causal mask; ties in top-k go to the smaller index.
VerticalSlashIndices estimate_vertical_slash(const float* q_last /*[last_q,D]*/, int last_q,
                                             const float* keys /*[N,D]*/, int num_keys, int D,
                                             float scale, const VerticalSlashParams& params);

// §3.3: per query block m (rows [m*block, m*block + block), end_m unclipped), every slash o with
// o < end_m + off maps to the key range [e - block, e), e = max(end_m + off - o, block); ranges
// merge in order of e (extend by one block when e lies within one block of the current end,
// else start a new one); verticals not inside any range and below end_m + off become gathered
// columns. Ranges become block_n = block key blocks, clipped to the causal limit.
HeadPlan vertical_slash_head_plan(const VerticalSlashIndices& idx, int q_len, int num_keys,
                                  int block);

// The literal merge walk of §3.3 over both sorted lists at once (reference for the above):
// per query block, the ranges' block starts and the column list, before clipping.
void vertical_slash_blocks_ref(const VerticalSlashIndices& idx, int q_len, int num_keys,
                               int block, int m, std::vector<int32_t>& block_starts,
                               std::vector<int32_t>& columns);

}  // namespace vlm
