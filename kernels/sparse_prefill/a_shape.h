// A-shape (sink + local window, ALGORITHMS.md §1) and tri-shape (A-shape plus dense last rows,
// §2) as block plans. Token definition for a query at position p: key j <= p is kept iff
// p - j < n_local or j < n_init; tri-shape also keeps every causal key for the rows at
// positions >= prompt_len - n_last. The plan is the block cover of that mask: a (query block,
// key block) pair is listed iff some causal pair inside it is kept (the kernel then computes the
// whole causal block, so the plan is a superset of the token mask by at most one block per
// side). Chunk-aware: rows are the tail [num_keys - q_len, num_keys) of the sequence.
#pragma once

#include "kernels/attention/block_sparse_plan.h"

namespace vlm {

HeadPlan a_shape_head_plan(int q_len, int num_keys, int block, int n_init, int n_local);

// prompt_len >= num_keys: the whole prompt's length (the dense tail is its last n_last rows,
// wherever chunking put them).
HeadPlan tri_shape_head_plan(int q_len, int num_keys, int block, int n_init, int n_local,
                             int n_last, int prompt_len);

// The token masks of the definitions (naive; tests): [q_len, num_keys].
std::vector<uint8_t> a_shape_token_mask(int q_len, int num_keys, int n_init, int n_local);
std::vector<uint8_t> tri_shape_token_mask(int q_len, int num_keys, int n_init, int n_local,
                                          int n_last, int prompt_len);

}  // namespace vlm
