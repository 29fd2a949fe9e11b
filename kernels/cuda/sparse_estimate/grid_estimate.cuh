// Device half of the grid heads' online search (kernels/sparse_prefill/grid.h, search_grid) for
// one sequence's chunk, every query head at once (C++17: included by the .cu and by
// cuda_grid_search.cpp), and the stride and layout choice (below; CudaGridSearch can also make it
// on the host, cuda_grid_search.h).
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
  // grid_last_q_probs only (the boundary heads' estimate): the estimating rows' positions (device,
  // [R], each in [num_keys - q_len, num_keys)) instead of the last R; pos_r below is row_pos[r].
  const int32_t* row_pos = nullptr;
};

// probs[H, R, N] (f32, device) = softmax_j(scale * q_r . k_j) over j <= pos_r (pos_r = N - R + r),
// zero after: last_q_attention of every head. q[T, H, D] in dtype act; block_table: the
// sequence's row of the block table (device); kv any dtype (F8_E4M3: the dequantized keys, byte
// times the head's k_scale).
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

// The stride and layout choice on the device (grid_choice.cu: choose_grid_stride and
// grid_layout_from_phase_mass of kernels/sparse_prefill/grid.h, every head at once), in the
// host's summation orders so the
// decisions are the host's: the totals and each candidate's slash sum and residue histogram are
// summed sequentially in the host's order, the top columns sorted stably as its partial_sort.
constexpr int kGridChoiceMaxLines = 8;  // vertical line groups a device layout holds

struct GridChoiceShape {
  int num_heads = 0, num_keys = 0;  // H, N
  int n_init = 0;                   // min(max(n_init, 0), N)
  int num_cands = 0;                // grid_stride_candidates(...).size() (> 0)
  int max_cand = 1;                 // the largest candidate (<= 4096)
  int num_known = 0;
  bool use_slash = true, use_lines = true;  // use_slash; use_vline || use_hline
  int num_vlines = 2, num_hlines = 1;       // num_vlines <= kGridChoiceMaxLines
};

// One head's choice: GridLayout's fields (stride, phase, vgroups, hgroups, score).
struct DeviceGridLayout {
  int32_t stride, phase, nv, nh;
  int32_t v[kGridChoiceMaxLines], h[kGridChoiceMaxLines];
  double score;
};

// The top columns the choice scores the candidates over (kGridTopColumns of grid.h).
constexpr int kGridChoiceTop = 512;

// Device scratch of grid_choose_strides for H heads and C candidates.
struct GridChoiceScratch {
  double* totals;       // [H, 2]: slash, col
  double* top_keys;     // [H, kGridChoiceTop]: the top columns' sums, descending (ties: index order)
  int32_t* top_idx;     // [H, kGridChoiceTop]: their key indices
  double* cand_scores;  // [H, C]
};

// strides[H] and scores[H] (device) from the line sums col, slash [H, N] (grid_line_sums) over the
// candidates cands[C] and known[num_known] (device).
void grid_choose_strides(const double* col /*[H,N]*/, const double* slash /*[H,N]*/, const int32_t* cands,
                         const int32_t* known, const GridChoiceShape& shape, const GridChoiceScratch& scratch,
                         int32_t* strides /*[H]*/, double* scores /*[H]*/, cudaStream_t stream);

// layouts[H] from grid_phase_mass's phase_mass[H, max_stride] and the chosen strides and scores.
void grid_layouts_from_phase(const double* phase_mass, int max_stride, const int32_t* strides, const double* scores,
                             const GridChoiceShape& shape, DeviceGridLayout* layouts /*[H]*/, cudaStream_t stream);

}  // namespace vlm::cuda
