// SparsePrefillConfig: which sparse-prefill pattern a sequence's prefill chunks use and its
// parameters (defaults from shared/ALGORITHMS.md §1-§5). Method Off is the exact dense path.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/sparse_prefill/grid.h"
#include "kernels/sparse_prefill/modality_boundary.h"
#include "kernels/sparse_prefill/xattention.h"

namespace vlm {

// MMInference: every head its own pattern (HeadPattern, from a per-model file, else the default
// head pattern); the others: one pattern for every head.
enum class SparsePrefillMethod { Off, AShape, TriShape, VerticalSlash, Grid, XAttention, MMInference };

// "off" (or "dense"), "a_shape", "tri_shape", "vertical_slash", "grid", "xattention",
// "mminference" (also with '-' for '_').
std::optional<SparsePrefillMethod> parse_sparse_prefill_method(std::string_view name);
const char* sparse_prefill_method_name(SparsePrefillMethod m);

// One head's pattern (ALGORITHMS.md §4.6). Dense: every causal block (exact).
enum class HeadPatternType { Dense, AShape, VerticalSlash, Grid, XAttention };
const char* head_pattern_type_name(HeadPatternType t);  // "dense", "a_shape", "vertical_and_slash", "grid", "xattention"
std::optional<HeadPatternType> parse_head_pattern_type(std::string_view name);  // also "stream_llm"

struct HeadPattern {
  HeadPatternType type = HeadPatternType::Grid;
  // None: the intra-modality pattern over the whole sequence (No-/K-boundary heads). Q / TwoD:
  // modality-permuted vertical-slash with (vertical_size, slash_size) per modality (pair); they
  // fall back to the intra pattern when the keys hold one modality only.
  BoundaryKind boundary = BoundaryKind::None;
  int n_init = 128, n_local = 3968;              // AShape
  int vertical_size = 1000, slash_size = 6096;   // VerticalSlash and the boundary heads
  GridParams grid;                               // Grid (grid.stride 0: online search)
  XAttentionParams xattention;                   // XAttention
};

// Per layer, per query head (a missing layer or head takes SparsePrefillConfig::default_head).
struct SparseHeadPatterns {
  std::vector<std::vector<HeadPattern>> layers;
  const HeadPattern* find(int layer, int head) const {
    if (layer < 0 || layer >= static_cast<int>(layers.size())) return nullptr;
    const auto& l = layers[layer];
    return head >= 0 && head < static_cast<int>(l.size()) ? &l[head] : nullptr;
  }
};

struct SparsePrefillConfig {
  SparsePrefillMethod method = SparsePrefillMethod::Off;
  int min_prompt_len = 4096;  // shorter prompts stay dense (sparse prefill only pays off long)
  int block = 64;             // query and key block size of the plans (BLOCK_M = BLOCK_N)
  // A-shape / tri-shape (MInference defaults): sink tokens, local window, dense last rows.
  int n_init = 128;
  int n_local = 3968;
  int n_last = 100;
  // Vertical-slash: top-k verticals / slashes estimated from the last last_q queries.
  int vertical_size = 1000;
  int slash_size = 6096;
  int last_q = 64;
  GridParams grid;              // method Grid
  XAttentionParams xattention;  // method XAttention (block = `block`, OpenVINO's default 64)
  // Method MInference: per-head patterns (shared, immutable; null: default_head everywhere).
  std::shared_ptr<const SparseHeadPatterns> head_patterns;
  HeadPattern default_head;     // grid with online stride search
  // The grid heads' online search: false, every prefill chunk estimates its layouts from its own
  // last queries (the CPU's behaviour); true (the default), a sequence's first sparse chunk
  // estimates them and its later chunks reuse them (MMInference's estimate once per prompt; the
  // layouts are residues mod the stride, so they extend causally), kept in
  // ForwardBatch::grid_layouts. GPU backend only (the CPU backend searches every chunk). Default
  // since its error on the structured 128K video input equalled the per-chunk search's (0.0119
  // relative L2 of the last row's logits both, bench/RESULTS.md "end to end II") at a third of
  // the search cost.
  bool grid_search_once = true;

  bool enabled() const { return method != SparsePrefillMethod::Off; }
};

// A sequence's grid layouts kept across its prefill chunks (SparsePrefillConfig::grid_search_once):
// layers[l][h] the layout of query head h of layer l; an empty layer is not searched yet.
struct GridLayoutStore {
  std::vector<std::vector<GridLayout>> layers;
};

// Whether every head's plan of cfg is made from the configuration and the estimates the GPU
// backend makes on the device (method off, A-shape, tri-shape, grid with grid.last_q <= 64,
// vertical-slash with last_q <= 64, xattention with a stride dividing 64, or MMInference whose
// head patterns and default head are dense, A-shape, grid (grid.last_q <= 64), vertical-slash
// with or without a Q / 2D boundary (last_q <= 64), or such xattention with no boundary): what
// the GPU backend plans.
bool plannable_without_host_data(const SparsePrefillConfig& cfg);
// Whether some head of cfg is an XAttention head (method xattention, or MMInference whose default
// head or a head pattern is one): the GPU's XAttention estimate reads a 16-bit cache only, so an
// FP8 KV cache refuses these (cuda_model_support, CudaBackend::runs_sparse_prefill).
bool uses_xattention_heads(const SparsePrefillConfig& cfg);

}  // namespace vlm
