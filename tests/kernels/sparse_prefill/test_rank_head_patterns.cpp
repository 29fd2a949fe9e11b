// A tensor-parallel rank's view of sparse prefill's per-head state (kernels/sparse_prefill/
// rank_head_patterns.h, issue 42): each rank's head patterns are the model's heads' (ranks side by
// side give one GPU's list, for 1, 2 and 4 ranks; a rank's slice of an MMInference file differs
// from another rank's where the file does), the single-pattern methods give every head theirs,
// and a GridLayoutStore filled by 2 ranks' slices (each rank's put) reads back as one GPU's store
// (the same heads at the same places), a layer counting as stored only once it holds every head.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "kernels/core/check.h"
#include "kernels/sparse_prefill/rank_head_patterns.h"

namespace vlm {
namespace {

constexpr int kL = 3, kH = 8;

bool same(const HeadPattern& a, const HeadPattern& b) {
  return a.type == b.type && a.boundary == b.boundary && a.n_init == b.n_init && a.n_local == b.n_local &&
         a.vertical_size == b.vertical_size && a.slash_size == b.slash_size && a.grid.stride == b.grid.stride;
}

// Every head of every layer its own pattern: type and sizes from (layer, head).
SparsePrefillConfig distinct_heads() {
  auto pats = std::make_shared<SparseHeadPatterns>();
  for (int l = 0; l < kL; ++l) {
    std::vector<HeadPattern> heads(kH - 1);  // the last head is missing: default_head
    for (int h = 0; h < kH - 1; ++h) {
      HeadPattern& p = heads[h];
      p.type = static_cast<HeadPatternType>((l + h) % 5);
      p.n_local = 100 * l + h;
      p.vertical_size = 1000 + h;
      p.grid.stride = 8 + h;
    }
    pats->layers.push_back(heads);
  }
  SparsePrefillConfig c;
  c.method = SparsePrefillMethod::MMInference;
  c.head_patterns = pats;
  c.default_head.type = HeadPatternType::Dense;
  c.default_head.n_local = 7;
  return c;
}

TEST(RankHeadPatterns, RanksSideBySideGiveTheModelsHeads) {
  const SparsePrefillConfig cfg = distinct_heads();
  for (int l = 0; l < kL; ++l) {
    const std::vector<HeadPattern> all = rank_head_patterns(cfg, l, 0, kH);
    ASSERT_EQ(all.size(), static_cast<size_t>(kH));
    for (int h = 0; h < kH - 1; ++h) EXPECT_TRUE(same(all[h], cfg.head_patterns->layers[l][h])) << l << " " << h;
    EXPECT_TRUE(same(all[kH - 1], cfg.default_head));  // not in the file
    for (int ranks : {2, 4}) {
      const int n = kH / ranks;
      for (int r = 0; r < ranks; ++r) {
        const std::vector<HeadPattern> mine = rank_head_patterns(cfg, l, r * n, n);
        ASSERT_EQ(mine.size(), static_cast<size_t>(n));
        for (int h = 0; h < n; ++h)
          EXPECT_TRUE(same(mine[h], all[r * n + h])) << "layer " << l << " rank " << r << " of " << ranks << " head " << h;
      }
      // A rank that took its local index for the model's (head_begin 0 on rank 1) would differ.
      const std::vector<HeadPattern> local = rank_head_patterns(cfg, l, 0, n), rank1 = rank_head_patterns(cfg, l, n, n);
      bool differs = false;
      for (int h = 0; h < n; ++h) differs |= !same(local[h], rank1[h]);
      EXPECT_TRUE(differs) << "layer " << l << ", " << ranks << " ranks";
    }
  }
  EXPECT_TRUE(same(head_pattern_of(cfg, kL + 2, 0), cfg.default_head));  // a layer past the file
}

TEST(RankHeadPatterns, SinglePatternMethodsGiveEveryHeadTheirs) {
  SparsePrefillConfig c = distinct_heads();  // the file is ignored by these methods
  c.method = SparsePrefillMethod::VerticalSlash;
  c.vertical_size = 321;
  c.slash_size = 654;
  for (const HeadPattern& p : rank_head_patterns(c, 1, 4, 4)) {
    EXPECT_EQ(p.type, HeadPatternType::VerticalSlash);
    EXPECT_EQ(p.vertical_size, 321);
    EXPECT_EQ(p.slash_size, 654);
  }
  c.method = SparsePrefillMethod::Grid;
  c.grid.stride = 24;
  for (const HeadPattern& p : rank_head_patterns(c, 0, 4, 4)) {
    EXPECT_EQ(p.type, HeadPatternType::Grid);
    EXPECT_EQ(p.grid.stride, 24);
  }
  c.method = SparsePrefillMethod::XAttention;
  c.xattention.stride = 16;
  for (const HeadPattern& p : rank_head_patterns(c, 2, 2, 2)) {
    EXPECT_EQ(p.type, HeadPatternType::XAttention);
    EXPECT_EQ(p.xattention.stride, 16);
  }
}

GridLayout layout(int layer, int head) {
  GridLayout g;
  g.stride = 16 + head;
  g.phase = layer;
  g.vgroups = {head, layer};
  return g;
}

TEST(RankHeadPatterns, GridStoreOfTwoRanksReadsAsOneGpus) {
  GridLayoutStore one, two;
  for (int l = 0; l < kL; ++l) {
    std::vector<GridLayout> all, lo, hi;
    for (int h = 0; h < kH; ++h) (h < kH / 2 ? lo : hi).push_back(layout(l, h)), all.push_back(layout(l, h));
    EXPECT_FALSE(grid_store_has(one, l, kH));
    grid_store_put(one, l, 0, kH, all);  // one GPU: every head at once
    // Two ranks: rank 1 first, then rank 0 (the backend's commit order may be any).
    grid_store_put(two, l, kH / 2, kH, hi);
    EXPECT_TRUE(grid_store_has(two, l, kH));  // sized for every head
    grid_store_put(two, l, 0, kH, lo);
  }
  for (int l = 0; l < kL; ++l) {
    ASSERT_TRUE(grid_store_has(one, l, kH));
    ASSERT_TRUE(grid_store_has(two, l, kH));
    EXPECT_FALSE(grid_store_has(two, l, kH / 2));  // a store of the model's heads is not a rank's
    for (int r = 0; r < 2; ++r) {
      const std::vector<GridLayout> a = grid_store_slice(one, l, r * kH / 2, kH / 2),
                                    b = grid_store_slice(two, l, r * kH / 2, kH / 2);
      ASSERT_EQ(a.size(), b.size());
      for (size_t i = 0; i < a.size(); ++i) {
        const GridLayout want = layout(l, r * kH / 2 + static_cast<int>(i));
        EXPECT_EQ(b[i].stride, want.stride);
        EXPECT_EQ(b[i].phase, want.phase);
        EXPECT_EQ(b[i].vgroups, want.vgroups);
        EXPECT_EQ(a[i].stride, b[i].stride);
      }
    }
  }
  EXPECT_FALSE(grid_store_has(two, kL, kH));
  EXPECT_THROW(grid_store_slice(two, kL, 0, 1), InternalError);  // not stored
  EXPECT_THROW(grid_store_put(two, 0, 6, kH, std::vector<GridLayout>(3)), InternalError);  // past the model's heads
}

}  // namespace
}  // namespace vlm
