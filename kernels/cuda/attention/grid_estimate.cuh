// Device half of the grid heads' online search (kernels/sparse_prefill/grid.h, search_grid) for
// one sequence's chunk, every query head at once (C++17: included by the .cu and by
// cuda_grid_search.cpp). The host half (stride choice, layout) is cuda_grid_search.h.
#pragma once

#include <cstdint>

#include "kernels/cuda/attention/cuda_attention.h"

namespace vlm::cuda {

struct GridEstimateShape {
  int num_heads = 0;  // H (query heads; kv head h / (H / Hkv))
  int t0 = 0;         // the chunk's first row in q
  int q_len = 0;      // rows of the chunk
  int num_keys = 0;   // N, the chunk included
  int rows = 64;      // R: the chunk's last R rows estimate (R <= q_len, R <= 64)
};

// probs[H, R, N] (f32, device) = softmax_j(scale * q_r . k_j) over j <= pos_r (pos_r = N - R + r),
// zero after: last_q_attention of every head. q[T, H, D] in dtype act; block_table: the
// sequence's row of the block table (device); kv any dtype.
void grid_last_q_probs(const void* q /*[T,H,D]*/, DType act, const PagedKVLayer& kv, const int32_t* block_table,
                       const GridEstimateShape& shape, float scale, float* probs /*[H,R,N]*/, cudaStream_t stream);

// col[H, N] = sum_r probs[h][r][j]; slash[H, N] = sum_r probs[h][r][pos_r - o] (f64, device).
void grid_line_sums(const float* probs /*[H,R,N]*/, const GridEstimateShape& shape, double* col /*[H,N]*/,
                    double* slash /*[H,N]*/, cudaStream_t stream);

// phase_mass[H, max_stride] (f64, device; zeroed here): for head h with stride s = strides[h]
// (device, 1 <= s <= max_stride <= 4096), residue j mod s collects probs[h][r][j] over rows r and
// keys n_init <= j <= pos_r off the slash band (circ_dist((pos_r - j) mod s, 0) > band).
void grid_phase_mass(const float* probs /*[H,R,N]*/, const GridEstimateShape& shape, const int32_t* strides /*[H]*/,
                     int max_stride, int band, int n_init, double* phase_mass /*[H,max_stride]*/, cudaStream_t stream);

}  // namespace vlm::cuda
