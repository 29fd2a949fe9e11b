// XAttention (ALGORITHMS.md §5, OpenVINO GenAI semantics §6.3): antidiagonal strided scoring,
// then per query block the key blocks whose estimated mass reaches a cumulative threshold.
//
// Scoring (per query head): reshaped query row a covers chunk rows [a*S, a*S + S), reshaped key
// b covers keys [b*S, b*S + S) (zero rows past the ends);
//   score[a][b] = scale / S * sum_{s<S} q[a*S + S-1-s] . k[b*S + s],
// causal in reshaped coordinates: b allowed iff b*S <= off + a*S (off = num_keys - q_len);
// fp32 softmax over the allowed b of each row; padded query rows count zero. Block sums
// blk[I][J] over the (B/S) x (B/S) tiles (query block I = chunk rows [I*B, I*B + B), key block
// J = keys [J*B, J*B + B)).
// Selection per query block I: required = threshold * sum_J blk[I][J]; block 0 (sink) and the
// diagonal blocks (those holding the block's own positions) are always kept and counted first;
// then the other causal blocks in decreasing blk (ties: lower J first), each kept iff the
// cumulative sum before it is < required. threshold >= 1 means dense (every causal block).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/attention/block_sparse_plan.h"

namespace vlm {

struct XAttentionParams {
  int stride = 8;          // S (OpenVINO xattention_stride)
  float threshold = 0.8f;  // tau (OpenVINO xattention_threshold)
  int n_last = 100;        // dense prompt tail (OpenVINO num_last_dense_tokens_in_prefill)
};

// q_chunk[q_len, H, D] (head `head`), keys[num_keys, D] of its kv head. Returns blk[nqb, nkb]
// (block = B, B % S == 0).
std::vector<float> xattention_block_scores(const float* q_chunk, int num_heads, int head, int q_len,
                                           const float* keys, int num_keys, int D, float scale,
                                           int block, int stride);

// The selection above over blk[nqb, nkb] -> a plan of aligned blocks (no permutation).
// dense_from: query blocks holding a row at position >= dense_from attend every causal block
// (OpenVINO's dense prompt tail, num_last_dense_tokens_in_prefill: the planner passes
// prompt_len - n_last; INT_MAX: none). The tail rows are dense in whichever chunk they fall (the
// docs' intent; OpenVINO's scheduler decides per chunk from the remaining prompt tokens and
// leaves the final chunk sparse, ALGORITHMS.md §6.3).
HeadPlan xattention_select(const std::vector<float>& blk, int q_len, int num_keys, int block,
                           float threshold, int dense_from = 2147483647);

}  // namespace vlm
