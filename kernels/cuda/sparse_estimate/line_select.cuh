// The line selection of the vertical-slash estimates on the GPU (kernels/sparse_prefill/
// vertical_slash.h and modality_boundary.h): the scores each line is chosen by, made from the
// estimating rows' probabilities and laid out as segments with the forced lines at +inf, and the
// top-k of every segment at once (kernels/sparse_prefill/top_k.h, top_k_indices): one radix sort
// of the whole score array (key: segment, then the score descending; stable, so ties go to the
// smaller index), the first k of each segment flagged, then compacted in index order. Plain C++17
// (included by the .cu and by the estimators' .cpp files).
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

namespace vlm::cuda {

// scores[total] (f32, device, >= 0 or +inf) in num_segments contiguous segments: segment s holds
// [begin[s], begin[s + 1]) (begin[num_segments] = total). out[out_begin[s] .. + k[s]) gets the
// indices (relative to begin[s]) of segment s's k[s] largest scores (k[s] <= its length), ties
// to the smaller index, in ascending index order; out_begin must be the exclusive sum of k.
// begin, k, out_begin: device arrays.
struct LineTopK {
  const float* scores = nullptr;
  int64_t total = 0;
  int num_segments = 0;
  const int64_t* begin = nullptr;      // [num_segments + 1]
  const int64_t* k = nullptr;          // [num_segments]
  const int64_t* out_begin = nullptr;  // [num_segments]
  int32_t* out = nullptr;
};

// Scratch of line_top_k for `total` scores and `num_segments` segments (bytes, one allocation).
size_t line_top_k_scratch_bytes(int64_t total, int num_segments);
void line_top_k(const LineTopK& args, void* scratch, size_t scratch_bytes, cudaStream_t stream);

// Vertical-slash: scores[2H, N] f32: row h = col[h] (a key column's summed probability), row
// H + h = slash[h] (a diagonal's), from grid_line_sums' col, slash [H, N] (f64); columns j <
// forced_verticals and offsets o < forced_slashes are +inf.
void vertical_slash_scores(const double* col /*[H,N]*/, const double* slash /*[H,N]*/, int H, int N,
                           int forced_verticals, int forced_slashes, float* scores /*[2H,N]*/, cudaStream_t stream);

// One query modality's rows of a boundary head (modality_boundary.h): probs[H, R, N] of its R
// estimating rows (grid_last_q_probs with row_pos), anchor[R, G] (device) the anchor e_i(g) of
// row i in key group g (-1: none), key groups g = [start[g], start[g + 1]) of the key order
// (order[N]: positions grouped; nullptr: one group of all keys, identity). Writes, at
// scores + ((h * num_mq + mq) * 2 + w) * N + start[g] + t (w 0: vertical, local key index t;
// w 1: slash, local offset t): the sum over rows of the probability of that line, +inf for t <
// forced_verticals / forced_slashes.
struct BoundaryScoreShape {
  int num_heads = 0, rows = 0, num_keys = 0, num_groups = 1;  // H, R, N, G
  int mq = 0, num_mq = 1;  // this query modality's index among the chunk's, and their count
  int forced_verticals = 30, forced_slashes = 100;
};
void boundary_pair_scores(const float* probs /*[H,R,N]*/, const int32_t* anchor /*[R,G]*/,
                          const int32_t* start /*[G+1]*/, const int32_t* order /*[N] or null*/,
                          const BoundaryScoreShape& shape, float* scores /*[H,num_mq,2,N]*/, cudaStream_t stream);

}  // namespace vlm::cuda
