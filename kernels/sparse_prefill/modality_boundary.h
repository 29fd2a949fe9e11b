// Inter-modality heads of MMInference (paper Algorithms 2, 3, 6, 7; ALGORITHMS.md §4.3-4.4):
//   - Q-boundary: query rows are grouped by modality (stable); each query modality mq has its
//     own vertical-slash lines over the whole (unpermuted) key sequence, estimated from the last
//     queries of that modality;
//   - 2D-boundary: keys are grouped by modality too; each (query modality mq, key modality mk)
//     pair has its own lines in modality-local coordinates, estimated from mq's last queries.
// Coordinates of a key group K (Q-boundary: all keys; 2D: the keys of modality mk, ascending):
// key j has local index b(j) (its rank in K); a query at position p has anchor
// e(p) = |{k in K : k <= p}| - 1 (the local index of the latest key of K it may see). Lines of a
// pair: verticals b (local key indices) and slashes o (local offsets); the pair keeps key j for
// query p (j <= p) iff b(j) is a vertical or e(p) - b(j) is a slash. Across a boundary the lines
// continue in local coordinates: e.g. a text->text local band spans the video between two text
// segments. The plan is the block cover (in key-group order) of the slash pairs plus the
// verticals as gathered columns where no listed block holds them; the kernel applies the causal
// mask by original positions. No-boundary and K-boundary heads use the intra-modality patterns.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/attention/block_sparse_plan.h"

namespace vlm {

enum class BoundaryKind { None, Q, TwoD };

struct BoundaryParams {
  int vertical_size = 1000;  // per pair, clamped to the pair's keys
  int slash_size = 6096;
  int last_q = 64;           // estimation rows per query modality (its last rows of the chunk)
  int forced_verticals = 30; // local key indices 0.. of each key group always kept
  int forced_slashes = 100;  // local offsets 0.. always kept
};

struct PairLines {
  int mq = 0;   // query modality code
  int mk = -1;  // key modality code; -1: all keys (Q-boundary)
  std::vector<int32_t> vertical;  // local key indices, ascending
  std::vector<int32_t> slash;     // local offsets, descending
};

struct BoundaryLines {
  BoundaryKind kind = BoundaryKind::Q;
  std::vector<PairLines> pairs;  // at most one per (mq, mk)
};

// modality[num_keys]: code (0..255) of every key position of the sequence (the chunk's rows are
// the last q_len). q_chunk[q_len, H, D]: the chunk's queries; head h; keys[num_keys, D] its kv
// head's keys (f32, post-RoPE). Pairs with no keys or no queries are left out.
BoundaryLines estimate_boundary_lines(BoundaryKind kind, const uint8_t* modality, const float* q_chunk,
                                      int num_heads, int head, int q_len, const float* keys,
                                      int num_keys, int D, float scale, const BoundaryParams& params);

HeadPlan boundary_head_plan(const BoundaryLines& lines, const uint8_t* modality /*[num_keys]*/,
                            int q_len, int num_keys, int block);

// The token mask of the lines (definition above): [q_len, num_keys].
std::vector<uint8_t> boundary_token_mask(const BoundaryLines& lines, const uint8_t* modality,
                                         int q_len, int num_keys);

}  // namespace vlm
