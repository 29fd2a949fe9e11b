// Sparse prefill's per-head state as a tensor-parallel rank sees it (issue 42): a rank holds the
// model's query heads [head_begin, head_begin + n) and must plan each of them with the pattern
// one GPU would use for that model head (MMInference's per-head patterns are the model's heads'),
// and keep a sequence's searched grid layouts (GridLayoutStore, grid_search_once) by the model's
// heads, so every rank reads back its own heads' layouts. One GPU: head_begin 0, n = the model's heads.
#pragma once

#include <span>
#include <vector>

#include "kernels/sparse_prefill/sparse_prefill_config.h"

namespace vlm {

// The pattern of the model's query head `head` in `layer` for the estimating methods: the
// method's one pattern (vertical_slash, grid, xattention), else (MMInference) cfg.head_patterns'
// entry for (layer, head), else cfg.default_head. (A-shape and tri-shape plan every head alike
// from cfg's own fields and never ask.)
HeadPattern head_pattern_of(const SparsePrefillConfig& cfg, int layer, int head);

// [n] the patterns of the model's heads [head_begin, head_begin + n) in `layer` (a rank's heads).
std::vector<HeadPattern> rank_head_patterns(const SparsePrefillConfig& cfg, int layer, int head_begin, int n);

// Whether the store holds layer `layer`'s layouts for the model's total_heads heads (every rank
// stored its heads in an earlier step: grid_store_put below).
bool grid_store_has(const GridLayoutStore& store, int layer, int total_heads);
// [n] the stored layouts of the model's heads [head_begin, head_begin + n) of `layer`.
// Precondition: grid_store_has(store, layer, head_begin + n or more).
std::vector<GridLayout> grid_store_slice(const GridLayoutStore& store, int layer, int head_begin, int n);
// Stores `layouts` as the model's heads [head_begin, head_begin + layouts.size()) of `layer`
// (the layer sized to total_heads first; the other heads' entries are kept). Not thread-safe:
// under tensor parallelism the ranks' layouts are put after every rank's step has returned
// (CudaSparsePrefill::commit_layouts), so no rank reads a layer another rank half-stored.
void grid_store_put(GridLayoutStore& store, int layer, int head_begin, int total_heads,
                    std::span<const GridLayout> layouts);

}  // namespace vlm
