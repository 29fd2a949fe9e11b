#include "kernels/sparse_prefill/rank_head_patterns.h"

#include <algorithm>

#include "kernels/core/check.h"

namespace vlm {

HeadPattern head_pattern_of(const SparsePrefillConfig& cfg, int layer, int head) {
  HeadPattern pt;
  switch (cfg.method) {
    case SparsePrefillMethod::VerticalSlash:
      pt.type = HeadPatternType::VerticalSlash;
      pt.vertical_size = cfg.vertical_size;
      pt.slash_size = cfg.slash_size;
      return pt;
    case SparsePrefillMethod::Grid:
      pt.type = HeadPatternType::Grid;
      pt.grid = cfg.grid;
      return pt;
    case SparsePrefillMethod::XAttention:
      pt.type = HeadPatternType::XAttention;
      pt.xattention = cfg.xattention;
      return pt;
    default: {
      const HeadPattern* f = cfg.head_patterns ? cfg.head_patterns->find(layer, head) : nullptr;
      return f ? *f : cfg.default_head;
    }
  }
}

std::vector<HeadPattern> rank_head_patterns(const SparsePrefillConfig& cfg, int layer, int head_begin, int n) {
  std::vector<HeadPattern> pats(static_cast<size_t>(n));
  for (int h = 0; h < n; ++h) pats[static_cast<size_t>(h)] = head_pattern_of(cfg, layer, head_begin + h);
  return pats;
}

bool grid_store_has(const GridLayoutStore& store, int layer, int total_heads) {
  return layer >= 0 && layer < static_cast<int>(store.layers.size()) &&
         static_cast<int>(store.layers[static_cast<size_t>(layer)].size()) == total_heads;
}

std::vector<GridLayout> grid_store_slice(const GridLayoutStore& store, int layer, int head_begin, int n) {
  VLM_CHECK(layer >= 0 && layer < static_cast<int>(store.layers.size()) && head_begin >= 0 &&
                head_begin + n <= static_cast<int>(store.layers[static_cast<size_t>(layer)].size()),
            "grid layouts of heads [{}, {}) of layer {}: not stored", head_begin, head_begin + n, layer);
  const auto& l = store.layers[static_cast<size_t>(layer)];
  return std::vector<GridLayout>(l.begin() + head_begin, l.begin() + head_begin + n);
}

void grid_store_put(GridLayoutStore& store, int layer, int head_begin, int total_heads,
                    std::span<const GridLayout> layouts) {
  const int n = static_cast<int>(layouts.size());
  VLM_CHECK(layer >= 0 && head_begin >= 0 && head_begin + n <= total_heads,
            "grid layouts of heads [{}, {}) of {} in layer {}", head_begin, head_begin + n, total_heads, layer);
  if (static_cast<int>(store.layers.size()) <= layer) store.layers.resize(static_cast<size_t>(layer) + 1);
  auto& l = store.layers[static_cast<size_t>(layer)];
  if (static_cast<int>(l.size()) != total_heads) l.assign(static_cast<size_t>(total_heads), GridLayout{});
  std::copy(layouts.begin(), layouts.end(), l.begin() + head_begin);
}

}  // namespace vlm
