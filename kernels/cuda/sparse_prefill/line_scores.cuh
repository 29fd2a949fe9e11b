// The scores the vertical-slash lines are chosen from (kernels/sparse_prefill/vertical_slash.h and
// modality_boundary.h), made on the GPU from the last rows' probabilities (grid_last_q_probs) and
// laid out as line_top_k segments, the forced lines set to +inf. Plain C++17.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace vlm::cuda {

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
