// Pattern builders of kernels/sparse_prefill/ against brute-force masks built from their
// definitions (A-shape, tri-shape: block cover of the token mask; vertical-slash: the literal
// §3.3 merge walk and a cover of the selected lines), over tables of lengths, chunk offsets and
// block sizes; plus estimation and fidelity on planted structure.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>

#include "kernels/attention/block_sparse_attention.h"
#include "kernels/sparse_prefill/a_shape.h"
#include "kernels/sparse_prefill/sparse_prefill_planner.h"
#include "kernels/sparse_prefill/vertical_slash.h"
#include "tests/kernels/sparse_cache_fixture.h"

namespace vlm {
namespace {

// The block cover of a token mask: every causal pair of a (query block, aligned key block) pair
// that holds at least one kept pair.
std::vector<uint8_t> block_cover(const std::vector<uint8_t>& tok, int q_len, int N, int block) {
  const int off = N - q_len, nqb = (q_len + block - 1) / block, nkb = (N + block - 1) / block;
  std::vector<uint8_t> keep(static_cast<size_t>(nqb) * nkb, 0);
  for (int r = 0; r < q_len; ++r)
    for (int j = 0; j < N; ++j)
      if (tok[static_cast<size_t>(r) * N + j]) keep[(r / block) * nkb + j / block] = 1;
  std::vector<uint8_t> out(tok.size(), 0);
  for (int r = 0; r < q_len; ++r)
    for (int j = 0; j <= off + r; ++j) out[static_cast<size_t>(r) * N + j] = keep[(r / block) * nkb + j / block];
  return out;
}

BlockSparsePlan one_head(HeadPlan hp, int q_len, int N, int block) {
  BlockSparsePlan p;
  p.q_len = q_len;
  p.num_keys = N;
  p.block_m = p.block_n = block;
  p.heads.push_back(std::move(hp));
  validate_plan(p);
  return p;
}

struct ShapeCase {
  int q_len, N, block, n_init, n_local, n_last, prompt_len;
};

TEST(SparsePrefillPatterns, AShapeAndTriShapeAreBlockCoversOfTheirDefinitions) {
  const std::vector<ShapeCase> table = {
      {300, 300, 64, 128, 100, 0, 300},   {300, 300, 16, 4, 32, 10, 300},
      {100, 700, 64, 128, 200, 100, 700}, {100, 700, 32, 8, 64, 50, 1000},
      {77, 77, 8, 0, 16, 5, 77},          {50, 513, 64, 1, 1, 30, 520},
      {256, 1024, 64, 64, 128, 100, 1024}, {33, 1000, 16, 40, 5000, 0, 1000},
  };
  for (size_t i = 0; i < table.size(); ++i) {
    const auto& c = table[i];
    const auto a = one_head(a_shape_head_plan(c.q_len, c.N, c.block, c.n_init, c.n_local), c.q_len, c.N, c.block);
    EXPECT_EQ(head_plan_mask(a, 0),
              block_cover(a_shape_token_mask(c.q_len, c.N, c.n_init, c.n_local), c.q_len, c.N, c.block))
        << "a_shape case " << i;
    const auto t = one_head(tri_shape_head_plan(c.q_len, c.N, c.block, c.n_init, c.n_local, c.n_last, c.prompt_len),
                            c.q_len, c.N, c.block);
    EXPECT_EQ(head_plan_mask(t, 0),
              block_cover(tri_shape_token_mask(c.q_len, c.N, c.n_init, c.n_local, c.n_last, c.prompt_len),
                          c.q_len, c.N, c.block))
        << "tri_shape case " << i;
  }
}

VerticalSlashIndices random_indices(int q_len, int N, int nv, int ns, std::mt19937& rng) {
  std::set<int> v, s;
  std::uniform_int_distribution<int> uv(0, N - 1);
  std::uniform_int_distribution<int> us(0, N - 1);
  while (static_cast<int>(v.size()) < std::min(nv, N)) v.insert(uv(rng));
  for (int o = 0; o < std::min(N, 3); ++o) s.insert(o);  // the forced band next to the diagonal
  while (static_cast<int>(s.size()) < std::min(ns, N)) s.insert(us(rng));
  VerticalSlashIndices idx;
  idx.vertical.assign(v.begin(), v.end());
  idx.slash.assign(s.rbegin(), s.rend());
  return idx;
}

TEST(SparsePrefillPatterns, VerticalSlashConversionMatchesTheMergeWalk) {
  std::mt19937 rng(3);
  const std::vector<std::tuple<int, int, int>> shapes = {
      {300, 300, 64}, {64, 1000, 64}, {100, 777, 32}, {500, 500, 16}, {37, 2000, 64}, {1, 90, 16}};
  for (const auto& [q_len, N, block] : shapes)
    for (int trial = 0; trial < 6; ++trial) {
      const int nv = 1 + trial * 7, ns = 3 + trial * 11;
      const auto idx = random_indices(q_len, N, nv, ns, rng);
      const auto plan = one_head(vertical_slash_head_plan(idx, q_len, N, block), q_len, N, block);
      const HeadPlan& hp = plan.heads[0];
      const int off = N - q_len;
      for (int m = 0; m < plan.num_qblocks(); ++m) {
        std::vector<int32_t> bs, cols;
        vertical_slash_blocks_ref(idx, q_len, N, block, m, bs, cols);
        const int causal_end = off + std::min(q_len, (m + 1) * block);
        std::erase_if(bs, [&](int k) { return k >= causal_end; });
        std::erase_if(cols, [&](int k) { return k >= causal_end; });
        EXPECT_EQ(std::vector<int32_t>(hp.blocks.begin() + hp.block_ptr[m], hp.blocks.begin() + hp.block_ptr[m + 1]), bs)
            << "blocks q_len " << q_len << " N " << N << " m " << m << " trial " << trial;
        EXPECT_EQ(std::vector<int32_t>(hp.cols.begin() + hp.col_ptr[m], hp.cols.begin() + hp.col_ptr[m + 1]), cols)
            << "cols q_len " << q_len << " N " << N << " m " << m << " trial " << trial;
      }
      // Every selected line is covered: row at position p sees j if j is a vertical or p - j a
      // slash (causal).
      const auto mask = head_plan_mask(plan, 0);
      std::vector<uint8_t> is_v(N, 0), is_s(N, 0);
      for (int v : idx.vertical) is_v[v] = 1;
      for (int o : idx.slash) is_s[o] = 1;
      for (int r = 0; r < q_len; ++r)
        for (int j = 0; j <= off + r; ++j)
          if (is_v[j] || is_s[off + r - j]) {
            ASSERT_TRUE(mask[static_cast<size_t>(r) * N + j]) << "r " << r << " j " << j;
          }
    }
}

TEST(SparsePrefillPatterns, VerticalSlashEstimationFindsPlantedLines) {
  // Keys 500 and 1234 carry a direction every query shares: they must be among the verticals.
  const int N = 2048, D = 32, last_q = 64;
  std::mt19937 rng(1);
  std::normal_distribution<float> g(0, 1);
  std::vector<float> keys(static_cast<size_t>(N) * D), q(static_cast<size_t>(last_q) * D);
  for (auto& x : keys) x = 0.3f * g(rng);
  for (auto& x : q) x = 0.3f * g(rng);
  for (int d = 0; d < D; ++d) {
    keys[500 * D + d] += 2.0f;
    keys[1234 * D + d] += 2.0f;
  }
  for (int r = 0; r < last_q; ++r)
    for (int d = 0; d < D; ++d) q[r * D + d] += 1.0f;
  VerticalSlashParams prm;
  prm.vertical_size = 40;
  prm.slash_size = 60;
  const auto idx = estimate_vertical_slash(q.data(), last_q, keys.data(), N, D, 1.0f / std::sqrt(32.0f), prm);
  EXPECT_EQ(idx.vertical.size(), 40u);
  EXPECT_EQ(idx.slash.size(), 60u);
  EXPECT_TRUE(std::is_sorted(idx.vertical.begin(), idx.vertical.end()));
  EXPECT_TRUE(std::is_sorted(idx.slash.rbegin(), idx.slash.rend()));
  EXPECT_TRUE(std::binary_search(idx.vertical.begin(), idx.vertical.end(), 500));
  EXPECT_TRUE(std::binary_search(idx.vertical.begin(), idx.vertical.end(), 1234));
  EXPECT_TRUE(std::binary_search(idx.vertical.begin(), idx.vertical.end(), 0));  // forced
  EXPECT_EQ(idx.slash.back(), 0);                                                // forced
}

// Output error of each pattern against dense attention on a structured prompt (sink keys, a
// local band, a few heavy verticals), chunked and not.
TEST(SparsePrefillPatterns, FidelityOnStructuredInput) {
  const int H = 4, Hkv = 2, D = 64, B = 16;
  for (bool verticals : {false, true})
  for (auto [q_len, N] : {std::pair{2048, 2048}, std::pair{1024, 3072}}) {
    // Scores like a real head's: queries share a direction that sink keys and a few vertical
    // keys carry (high scores), and a rotary-like position code in dims 8..39 makes nearby keys
    // score high (a local band).
    auto shape = [verticals](int, int pos, int h, int d, bool is_key) -> float {
      if (d < 8) {
        if (!is_key) return 3.0f;
        return pos < 4 || (verticals && pos % 509 == 7) ? 3.0f : 0.0f;
      }
      if (d < 40) {
        const int pair = (d - 8) / 2;
        const float angle = pos * 0.002f * static_cast<float>(1 + pair);
        return 1.5f * ((d % 2) ? std::sin(angle) : std::cos(angle));
      }
      return 0.0f;
    };
    testing_sparse::SparseCache sc({{q_len, N}}, H, Hkv, D, B, DType::F32, 11, shape);
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    std::vector<float> dense(sc.q.size());
    paged_attention(sc.q.data(), H, sc.kv, sc.batch, scale, dense.data());
    for (auto method : {SparsePrefillMethod::AShape, SparsePrefillMethod::TriShape,
                        SparsePrefillMethod::VerticalSlash}) {
      SparsePrefillConfig cfg;
      cfg.method = method;
      cfg.n_init = 64;
      cfg.n_local = 512;
      cfg.vertical_size = 100;
      cfg.slash_size = 150;
      ChunkView cv;
      cv.q = sc.q.data();
      cv.q_len = q_len;
      cv.num_keys = cv.prompt_len = N;
      cv.block_table = sc.tables.data();
      const BlockSparsePlan plan = build_sparse_plan(cfg, cv, H, sc.kv, scale);
      validate_plan(plan);
      const BlockSparsePlan* pp = &plan;
      std::vector<float> out(sc.q.size());
      block_sparse_attention(sc.q.data(), H, sc.kv, sc.batch, {&pp, 1}, scale, out.data());
      double num = 0, den = 0;
      for (size_t i = 0; i < out.size(); ++i) {
        num += (out[i] - dense[i]) * (out[i] - dense[i]);
        den += dense[i] * dense[i];
      }
      const double rel = std::sqrt(num / den), density = plan_block_density(plan);
      const std::string key = std::string(sparse_prefill_method_name(method)) +
                              (verticals ? "_verticals_" : "_sink_local_") + std::to_string(N);
      RecordProperty(key + "_rel_error", std::to_string(rel));
      RecordProperty(key + "_density", std::to_string(density));
      EXPECT_LT(density, 0.65) << key;
      // Sink + local input: every pattern keeps the mass (errors 2-8% from the random background). With far vertical lines only
      // vertical-slash does (A-shape and tri-shape miss them by design: reported, not bounded).
      if (!verticals || method == SparsePrefillMethod::VerticalSlash) {
        EXPECT_LT(rel, 0.1) << key;
      }
    }
  }
}

}  // namespace
}  // namespace vlm
