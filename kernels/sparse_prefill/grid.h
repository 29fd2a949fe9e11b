// Grid head (MMInference, paper Algorithm 1 / ALGORITHMS.md §4.2): video tokens attend along
// lines spaced by the frame stride s (tokens per frame). With group g(p) = (p - phase) mod s
// (the spatial position of token p in its frame), a grid head keeps, for a query at position p
// and a causal key j <= p:
//   - slash lines:      |g(p) - g(j)| <= band (circular distance mod s): the same spatial
//                       position (and its `band` neighbours) in every earlier frame, i.e. the
//                       diagonals at offsets k*s (+-band), the local window included;
//   - vertical lines:   g(j) in vgroups (key positions of the strongest phases);
//   - horizontal lines: g(p) in hgroups (those query rows attend every key);
//   - sink:             j < n_init.
// Permuting rows and keys by (g, position) makes every line a run of consecutive indices, so
// the plan is the block cover, in permuted order, of the line mask (a (query block, key block)
// pair is listed iff one of its causal pairs is on a line), plus the sink keys as gathered
// columns where no listed block holds them. Causality stays by original positions (the kernel).
//
// Online search (search_grid): from the estimated attention of the last queries, the stride
// maximises the concentration of the attention mass on lines of period s, over the stride space
// [min_stride, max_stride] plus the known strides (tokens per frame, from the media metadata):
//   slash score    S_sl(s) = s * sum_{k>=1} slash[k*s] / sum_{o>=1} slash[o]
//   vertical score S_v(s)  = s * max_phi sum_{j = phi mod s, j >= n_init} col[j] / sum_{j >= n_init} col[j]
// The phase is then the residue with the most vertical mass the slash band does not explain.
// (1 = no structure). Multiples of the true stride score as high as it, its divisors lower: the
// winner is a known stride scoring >= 0.9 x the best if there is one, else the smallest stride
// scoring >= 0.9 x the best. The phase is the residue holding the most vertical mass;
// vgroups are the num_vlines strongest residues (group 0 first), hgroups the first num_hlines of
// them (the paper's grids are "often symmetrical").
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/attention/block_sparse_plan.h"

namespace vlm {

struct GridParams {
  int stride = 0;          // > 0: fixed stride (no search); 0: online search
  bool use_hline = true;   // Table 3 of the paper: (stride, use hline, use vline, use slash, max stride)
  bool use_vline = true;
  bool use_slash = true;
  int min_stride = 16;
  int max_stride = 1024;
  int band = 1;            // slash band half-width in groups
  int num_vlines = 2;
  int num_hlines = 1;
  int n_init = 64;         // sink keys, always kept
  int last_q = 64;         // estimation rows
};

struct GridLayout {
  int stride = 1;
  int phase = 0;                 // residue of group 0
  std::vector<int32_t> vgroups;  // vertical-line groups (0 = the strongest)
  std::vector<int32_t> hgroups;  // horizontal-line query groups
  double score = 1.0;            // the winning concentration (1 = none)
};

// probs[R, N]: estimated attention of R rows (last_q_attention), q_pos[R] their positions.
// known_strides: tokens per frame of the prompt's videos (may be empty).
GridLayout search_grid(const float* probs /*[R,N]*/, const int32_t* q_pos, int R, int num_keys,
                       const GridParams& params, std::span<const int32_t> known_strides);

// search_grid in two halves, for estimators that reduce the probabilities elsewhere (the GPU):
// col[N] = sum_r probs[r][j] and slash[N] = sum_r probs[r][q_pos[r] - o] choose the stride (and
// its score); phase_mass[stride] (per residue j mod stride, the mass of keys j >= n_init off the
// rows' slash band, circ_dist((q_pos - j) mod stride, 0) > band; band -1 without slash lines)
// then gives the layout. search_grid == both halves over its own sums.
struct GridStride {
  int stride = 1;
  double score = 1.0;
};
GridStride choose_grid_stride(const double* col /*[N]*/, const double* slash /*[N]*/, int num_keys,
                              const GridParams& params, std::span<const int32_t> known_strides);
// The strides choose_grid_stride scores, in its order: params.stride alone when > 0, else
// min_stride..min(max_stride, num_keys / 2) then the known strides (the GPU's device choice scores
// the same list). At most kGridTopColumns columns (the most massive non-sink ones) enter the
// vertical score.
constexpr int kGridTopColumns = 512;
std::vector<int32_t> grid_stride_candidates(int num_keys, const GridParams& params,
                                            std::span<const int32_t> known_strides);
GridLayout grid_layout_from_phase_mass(const GridStride& stride, const std::vector<double>& phase_mass,
                                       const GridParams& params);

// A layout with a fixed stride and phase (vgroups = {0..num_vlines-1}, hgroups the first
// num_hlines): for tests and configs with a known grid.
GridLayout fixed_grid_layout(int stride, int phase, const GridParams& params);

// The plan of one head (chunk rows are positions [num_keys - q_len, num_keys)).
HeadPlan grid_head_plan(const GridLayout& layout, const GridParams& params, int q_len,
                        int num_keys, int block);

// The line mask of the definition above (no block cover, sink included): [q_len, num_keys].
std::vector<uint8_t> grid_token_mask(const GridLayout& layout, const GridParams& params, int q_len,
                                     int num_keys);

// The grid permutation order of positions [first, first + n): sorted by (g(p), p).
std::vector<int32_t> grid_order(int stride, int phase, int first, int n);

}  // namespace vlm
