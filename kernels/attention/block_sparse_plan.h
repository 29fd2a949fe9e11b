// BlockSparsePlan: which keys each query of one sequence's prefill chunk attends, per query head,
// as lists of (query block, key block) work plus gathered key columns — the input of
// block_sparse_attention (the mechanism) and the output of the pattern builders in
// kernels/sparse_prefill/ (the policy).
//
// Coordinates. The chunk has q_len query rows, the tail of a sequence with num_keys cached keys
// (this chunk's included): chunk row r sits at original position off + r, off = num_keys - q_len.
// A head may reorder rows and keys before blocking them (MMInference's permutations):
//   - q_order[q_len] (empty = identity) lists chunk rows in the order query blocks take them;
//     query block m holds q_order[m * block_m .. (m + 1) * block_m).
//   - k_order[num_keys] (empty = identity) lists key positions in the order key blocks take
//     them; a key block is named by its start index k0 in that order and holds
//     k_order[k0 .. k0 + block_n) (clipped to num_keys). Aligned plans use k0 = b * block_n;
//     vertical-slash ranges start anywhere.
// Query block m attends the keys of the key blocks starting at blocks[block_ptr[m] ..
// block_ptr[m + 1]) (no key twice) and the single key positions cols[col_ptr[m] ..
// col_ptr[m + 1]) (ascending, none inside one of the block's listed key blocks), always under the causal mask by ORIGINAL positions: row r sees key
// j only if j <= off + r. A permutation therefore never breaks causality. A row that attends no
// key gets a zero output.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace vlm {

struct HeadPlan {
  std::vector<int32_t> q_order;    // [q_len] or empty: chunk rows in query-block order
  std::vector<int32_t> k_order;    // [num_keys] or empty: key positions in key-block order
  std::vector<int32_t> block_ptr;  // [num_qblocks + 1] CSR offsets into blocks
  std::vector<int32_t> blocks;     // key block starts k0 in [0, num_keys), disjoint per row
  std::vector<int32_t> col_ptr;    // [num_qblocks + 1] CSR offsets into cols
  std::vector<int32_t> cols;       // key positions, ascending per query block

  bool permuted() const { return !q_order.empty() || !k_order.empty(); }
};

struct BlockSparsePlan {
  int q_len = 0;      // query rows of the chunk
  int num_keys = 0;   // keys of the sequence, chunk included (the context length)
  int block_m = 64;   // query rows per query block
  int block_n = 64;   // keys per key block
  std::vector<HeadPlan> heads;  // [H], one per query head

  int offset() const { return num_keys - q_len; }
  int num_qblocks() const { return (q_len + block_m - 1) / block_m; }
  int num_kblocks() const { return (num_keys + block_n - 1) / block_n; }
};

// Throws InternalError unless the plan is well formed (sizes, permutations, indices in range,
// ascending columns disjoint from their row's blocks).
void validate_plan(const BlockSparsePlan& plan);

// An empty HeadPlan for num_qblocks query blocks (CSR pointers all zero); builders push work.
HeadPlan empty_head_plan(int num_qblocks);

// Every causal (query block, aligned key block) pair, no permutation: the dense plan.
HeadPlan dense_head_plan(int q_len, int num_keys, int block_m, int block_n);
BlockSparsePlan dense_plan(int q_len, int num_keys, int num_heads, int block_m = 64,
                           int block_n = 64);

// The token mask a head plan stands for: mask[r * num_keys + j] = 1 iff chunk row r attends key
// j (listed in a block or column of r's query block, and causal). Naive; tests and references.
std::vector<uint8_t> head_plan_mask(const BlockSparsePlan& plan, int head);

// Attended (row, key) pairs / causal (row, key) pairs of one head, from the mask (naive).
double head_plan_token_density(const BlockSparsePlan& plan, int head);

// Computed key blocks / causal key blocks over all heads, counted without building masks: a
// listed block (or block_n gathered columns) counts one; the causal count is that of the dense
// plan. This is the "kept-block density" the benches and the usage report quote.
struct BlockCounts {
  double computed = 0;  // key blocks computed (gathered columns in block_n units), all heads
  double causal = 0;    // key blocks of the dense causal plan, all heads
  BlockCounts& operator+=(const BlockCounts& o) {
    computed += o.computed;
    causal += o.causal;
    return *this;
  }
};
BlockCounts plan_block_counts(const BlockSparsePlan& plan);
// Key blocks of the dense causal plan of one head: q_len rows in blocks of block_m over num_keys
// keys (the rows are the last q_len of them) in blocks of block_n.
double causal_key_blocks(int q_len, int num_keys, int block_m, int block_n);
double plan_block_density(const BlockSparsePlan& plan);  // computed / causal (1 when no causal block)

}  // namespace vlm
