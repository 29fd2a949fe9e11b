// MMInference patterns (grid with online stride/phase search, Q-boundary, 2D-boundary) and
// XAttention: plans against brute-force masks from their definitions (tables of lengths, chunk
// offsets, block sizes, strides, modality layouts), the kernel against its reference on the
// permuted plans (GQA ratios), and fidelity on generated video-like / mixed-modality inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "kernels/attention/block_sparse_attention.h"
#include "kernels/sparse_prefill/grid.h"
#include "kernels/sparse_prefill/last_q_attention.h"
#include "kernels/sparse_prefill/modality_boundary.h"
#include "kernels/sparse_prefill/sparse_prefill_planner.h"
#include "kernels/sparse_prefill/xattention.h"
#include "tests/kernels/sparse_cache_fixture.h"

namespace vlm {
namespace {

BlockSparsePlan one_head(HeadPlan hp, int q_len, int N, int block) {
  BlockSparsePlan p;
  p.q_len = q_len;
  p.num_keys = N;
  p.block_m = p.block_n = block;
  p.heads.push_back(std::move(hp));
  validate_plan(p);
  return p;
}

// Inverse of an order (empty = identity) over n entries.
std::vector<int32_t> inverse(const std::vector<int32_t>& order, int n) {
  std::vector<int32_t> inv(n);
  if (order.empty()) std::iota(inv.begin(), inv.end(), 0);
  else
    for (int i = 0; i < n; ++i) inv[order[i]] = i;
  return inv;
}

// The block cover of `cover` (in the given row/key orders) plus the exact pairs of `exact`.
std::vector<uint8_t> expected_mask(const std::vector<uint8_t>& cover, const std::vector<uint8_t>& exact,
                                   const std::vector<int32_t>& q_order, const std::vector<int32_t>& k_order,
                                   int q_len, int N, int block) {
  const auto qi = inverse(q_order, q_len), ki = inverse(k_order, N);
  const int off = N - q_len, nqb = (q_len + block - 1) / block, nkb = (N + block - 1) / block;
  std::vector<uint8_t> keep(static_cast<size_t>(nqb) * nkb, 0), colkeep(static_cast<size_t>(nqb) * N, 0);
  for (int r = 0; r < q_len; ++r)
    for (int j = 0; j <= off + r; ++j) {
      if (cover[static_cast<size_t>(r) * N + j]) keep[(qi[r] / block) * nkb + ki[j] / block] = 1;
      if (exact[static_cast<size_t>(r) * N + j]) colkeep[(qi[r] / block) * static_cast<size_t>(N) + j] = 1;
    }
  std::vector<uint8_t> out(static_cast<size_t>(q_len) * N, 0);
  for (int r = 0; r < q_len; ++r)
    for (int j = 0; j <= off + r; ++j)
      out[static_cast<size_t>(r) * N + j] =
          keep[(qi[r] / block) * nkb + ki[j] / block] || colkeep[(qi[r] / block) * static_cast<size_t>(N) + j];
  return out;
}

struct GridCase {
  int q_len, N, block, stride, phase, band, nv, nh, n_init;
  bool h, v, s;
};

TEST(GridPattern, PlanIsTheBlockCoverOfTheLineMaskInPermutedOrder) {
  const std::vector<GridCase> table = {
      {300, 300, 16, 24, 5, 1, 2, 1, 8, true, true, true},
      {300, 300, 64, 50, 0, 0, 1, 1, 64, false, true, true},
      {100, 700, 32, 33, 7, 2, 3, 1, 16, true, false, true},
      {77, 77, 8, 10, 3, 1, 1, 0, 0, false, false, true},
      {50, 513, 64, 64, 63, 0, 2, 2, 4, true, true, false},
      {256, 1024, 64, 96, 40, 1, 2, 1, 64, true, true, true},
      {33, 1000, 16, 7, 2, 4, 1, 1, 3, true, true, true},   // band spans every group
      {120, 200, 16, 300, 11, 1, 1, 1, 5, true, true, true}, // stride longer than the sequence
  };
  for (size_t i = 0; i < table.size(); ++i) {
    const auto& c = table[i];
    GridParams gp;
    gp.band = c.band;
    gp.num_vlines = c.nv;
    gp.num_hlines = c.nh;
    gp.n_init = c.n_init;
    gp.use_hline = c.h;
    gp.use_vline = c.v;
    gp.use_slash = c.s;
    const GridLayout l = fixed_grid_layout(c.stride, c.phase, gp);
    const auto plan = one_head(grid_head_plan(l, gp, c.q_len, c.N, c.block), c.q_len, c.N, c.block);
    const auto tok = grid_token_mask(l, gp, c.q_len, c.N);
    GridParams no_sink = gp;
    no_sink.n_init = 0;
    const auto lines = grid_token_mask(l, no_sink, c.q_len, c.N);
    std::vector<uint8_t> sink(tok.size(), 0);
    for (size_t k = 0; k < tok.size(); ++k) sink[k] = tok[k] && !lines[k];
    const auto& hp = plan.heads[0];
    EXPECT_EQ(head_plan_mask(plan, 0),
              expected_mask(lines, sink, hp.q_order, hp.k_order, c.q_len, c.N, c.block))
        << "grid case " << i;
    // The orders group positions by (position - phase) mod stride.
    for (size_t k = 1; k < hp.k_order.size(); ++k) {
      const int g0 = ((hp.k_order[k - 1] - c.phase) % c.stride + c.stride) % c.stride;
      const int g1 = ((hp.k_order[k] - c.phase) % c.stride + c.stride) % c.stride;
      ASSERT_TRUE(g0 < g1 || (g0 == g1 && hp.k_order[k - 1] < hp.k_order[k])) << "case " << i;
    }
  }
}

// Video-like tokens: a text prefix of `prefix` tokens, then frames of P tokens. Token p of the
// video has spatial index x = (p - prefix) mod P; queries and keys carry a random direction per
// spatial index (so a query attends the same spatial index in every earlier frame: slashes at
// multiples of P), a shared direction picks out the 4 sink keys and the keys of the salient
// spatial index x_star (vertical lines at phase (prefix + x_star) mod P).
struct VideoShape {
  int prefix, P, x_star;
  std::vector<float> dirs;  // [P, 32]
  VideoShape(int prefix_, int P_, int x_star_, uint32_t seed) : prefix(prefix_), P(P_), x_star(x_star_) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> g(0, 1);
    dirs.resize(static_cast<size_t>(P) * 32);
    for (int x = 0; x < P; ++x) {
      double n = 0;
      for (int d = 0; d < 32; ++d) n += std::pow(dirs[x * 32 + d] = g(rng), 2);
      for (int d = 0; d < 32; ++d) dirs[x * 32 + d] /= static_cast<float>(std::sqrt(n));
    }
  }
  float operator()(int, int pos, int, int d, bool is_key) const {
    if (pos < prefix) return d < 8 && is_key && pos < 4 ? 2.5f : (d < 8 && !is_key ? 2.5f : 0.0f);
    const int x = (pos - prefix) % P;
    if (d < 8) return is_key ? (x == x_star ? 2.0f : 0.0f) : 2.5f;
    if (d < 40) return 10.0f * dirs[x * 32 + d - 8];
    return 0.0f;
  }
};

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    den += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

// Mean over (head, row) of the dense attention mass the plan keeps (exact probabilities).
double attention_recall(const testing_sparse::SparseCache& sc, const BlockSparsePlan& plan, int H, int D,
                        float scale) {
  const int N = plan.num_keys, Hkv = sc.kv.num_kv_heads, G = H / Hkv;
  std::vector<float> keys(static_cast<size_t>(N) * D), probs(static_cast<size_t>(N));
  std::vector<int32_t> pos(1);
  double total = 0;
  for (int h = 0; h < H; ++h) {
    gather_head_keys(sc.kv, sc.tables.data(), h / G, N, keys.data());
    const auto mask = head_plan_mask(plan, h);
    for (int r = 0; r < plan.q_len; ++r) {
      pos[0] = plan.offset() + r;
      last_q_attention(sc.q.data() + (static_cast<size_t>(r) * H + h) * D, pos.data(), 1, keys.data(), N, D, scale,
                       probs.data());
      double kept = 0;
      for (int j = 0; j <= pos[0]; ++j) kept += mask[static_cast<size_t>(r) * N + j] * probs[j];
      total += kept;
    }
  }
  return total / (static_cast<double>(H) * plan.q_len);
}

struct Fidelity {
  double recall, rel_error, density;
};

Fidelity run_plan(const testing_sparse::SparseCache& sc, const BlockSparsePlan& plan, int H, int D, float scale) {
  validate_plan(plan);
  std::vector<float> dense(sc.q.size()), out(sc.q.size());
  paged_attention(sc.q.data(), H, sc.kv, sc.batch, scale, dense.data());
  const BlockSparsePlan* pp = &plan;
  block_sparse_attention(sc.q.data(), H, sc.kv, sc.batch, {&pp, 1}, scale, out.data());
  return {attention_recall(sc, plan, H, D, scale), rel_l2(out, dense), plan_block_density(plan)};
}

TEST(GridPattern, SearchRecoversPlantedStrideAndPhaseWithHighFidelity) {
  const int H = 4, Hkv = 2, D = 64, B = 16;
  struct Run { int prefix, P, x_star, q_len, N; std::vector<int32_t> known; };
  for (const Run& run : {Run{37, 96, 20, 3072, 3072, {}}, Run{100, 72, 5, 1024, 3000, {}},
                         Run{10, 128, 99, 2048, 3000, {128}}}) {
    const VideoShape vs(run.prefix, run.P, run.x_star, 5);
    testing_sparse::SparseCache sc({{run.q_len, run.N}}, H, Hkv, D, B, DType::F32, 7,
                                   [&](int s, int p, int h, int d, bool k) { return vs(s, p, h, d, k); });
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    // The search itself, on one head's estimate.
    std::vector<float> keys(static_cast<size_t>(run.N) * D), rows(64 * D), probs(64 * static_cast<size_t>(run.N));
    std::vector<int32_t> pos(64);
    gather_head_keys(sc.kv, sc.tables.data(), 0, run.N, keys.data());
    for (int r = 0; r < 64; ++r) {
      pos[r] = run.N - 64 + r;
      std::copy_n(sc.q.data() + (static_cast<size_t>(run.q_len - 64 + r) * H) * D, D, rows.data() + r * D);
    }
    last_q_attention(rows.data(), pos.data(), 64, keys.data(), run.N, D, scale, probs.data());
    GridParams gp;
    const GridLayout l = search_grid(probs.data(), pos.data(), 64, run.N, gp, run.known);
    EXPECT_EQ(l.stride, run.P) << "prefix " << run.prefix;
    EXPECT_EQ(l.phase, (run.prefix + run.x_star) % run.P) << "prefix " << run.prefix;
    EXPECT_GT(l.score, 3.0);
    // Through the planner and the kernel.
    SparsePrefillConfig cfg;
    cfg.method = SparsePrefillMethod::Grid;
    cfg.block = 32;  // groups hold N / P ~ 30 keys here; real frames hold hundreds of tokens
    ChunkView cv{sc.q.data(), run.q_len, run.N, run.N, sc.tables.data(), 0, nullptr, {}};
    cv.frame_strides = run.known;
    const auto plan = build_sparse_plan(cfg, cv, H, sc.kv, scale);
    const Fidelity f = run_plan(sc, plan, H, D, scale);
    const std::string key = "grid_P" + std::to_string(run.P) + "_N" + std::to_string(run.N);
    RecordProperty(key + "_recall", std::to_string(f.recall));
    RecordProperty(key + "_rel_error", std::to_string(f.rel_error));
    RecordProperty(key + "_density", std::to_string(f.density));
    std::printf("%s: recall %.4f rel_error %.4f density %.4f\n", key.c_str(), f.recall, f.rel_error, f.density);
    EXPECT_GE(f.recall, 0.95) << key;
    EXPECT_LE(f.rel_error, 0.02) << key;
    EXPECT_LT(f.density, 0.25) << key;
  }
}

TEST(GridPattern, KernelEqualsReferenceOnGridPlansAcrossGqaRatios) {
  for (auto [H, Hkv] : {std::pair{4, 4}, std::pair{4, 2}, std::pair{6, 1}})
    for (auto [q_len, N] : {std::pair{200, 200}, std::pair{90, 333}}) {
      testing_sparse::SparseCache sc({{q_len, N}, {1, 40}}, H, Hkv, 32, 16, DType::BF16, 3);
      BlockSparsePlan plan;
      plan.q_len = q_len;
      plan.num_keys = N;
      plan.block_m = plan.block_n = 32;
      GridParams gp;
      gp.n_init = 5;
      for (int h = 0; h < H; ++h)
        plan.heads.push_back(grid_head_plan(fixed_grid_layout(17 + h, h, gp), gp, q_len, N, 32));
      const BlockSparsePlan* plans[2] = {&plan, nullptr};
      std::vector<float> a(sc.q.size(), 0.0f), b(sc.q.size(), 0.0f);
      block_sparse_attention(sc.q.data(), H, sc.kv, sc.batch, plans, 0.2f, a.data());
      block_sparse_attention_ref(sc.q.data(), H, sc.kv, sc.batch, plans, 0.2f, b.data());
      a.resize(static_cast<size_t>(q_len) * H * 32);
      b.resize(a.size());
      EXPECT_LT(testing_sparse::max_row_rel_error(a, b, 32), 1e-5) << H << "/" << Hkv << " " << q_len << " " << N;
    }
}

// Modality layout: alternating text and video segments ending with text.
std::vector<uint8_t> layout(const std::vector<std::pair<int, int>>& segs) {
  std::vector<uint8_t> m;
  for (auto [code, n] : segs) m.insert(m.end(), n, static_cast<uint8_t>(code));
  return m;
}

TEST(BoundaryPattern, PlansAreBlockCoversOfTheirLinesInModalityOrder) {
  std::mt19937 rng(9);
  struct Case { std::vector<std::pair<int, int>> segs; int q_len, block; };
  const std::vector<Case> table = {
      {{{0, 50}, {2, 200}, {0, 30}, {2, 100}, {0, 20}}, 400, 32},
      {{{0, 50}, {2, 200}, {0, 30}, {2, 100}, {0, 20}}, 150, 16},
      {{{0, 10}, {1, 64}, {0, 5}, {2, 300}, {0, 90}}, 100, 64},
      {{{2, 100}, {0, 1}, {2, 100}, {0, 61}}, 262, 8},
  };
  for (size_t ci = 0; ci < table.size(); ++ci) {
    const auto mod = layout(table[ci].segs);
    const int N = static_cast<int>(mod.size()), q_len = table[ci].q_len, block = table[ci].block;
    for (BoundaryKind kind : {BoundaryKind::Q, BoundaryKind::TwoD}) {
      BoundaryLines lines;
      lines.kind = kind;
      for (int mq : {0, 1, 2})
        for (int mk : kind == BoundaryKind::Q ? std::vector<int>{-1} : std::vector<int>{0, 1, 2}) {
          int nk = 0;
          for (uint8_t c : mod) nk += mk < 0 || c == mk;
          if (nk == 0) continue;
          PairLines pl;
          pl.mq = mq;
          pl.mk = mk;
          std::uniform_int_distribution<int> u(0, nk - 1);
          for (int i = 0; i < 6; ++i) pl.vertical.push_back(u(rng));
          for (int i = 0; i < 5; ++i) pl.slash.push_back(u(rng) / 3);
          pl.slash.push_back(0);
          std::sort(pl.vertical.begin(), pl.vertical.end());
          pl.vertical.erase(std::unique(pl.vertical.begin(), pl.vertical.end()), pl.vertical.end());
          std::sort(pl.slash.begin(), pl.slash.end(), std::greater<>());
          pl.slash.erase(std::unique(pl.slash.begin(), pl.slash.end()), pl.slash.end());
          lines.pairs.push_back(pl);
        }
      const auto plan = one_head(boundary_head_plan(lines, mod.data(), q_len, N, block), q_len, N, block);
      // Split the definition into its slash part (block cover) and vertical part (exact).
      BoundaryLines sl = lines, vl = lines;
      for (auto& p : sl.pairs) p.vertical.clear();
      for (auto& p : vl.pairs) p.slash.clear();
      const auto& hp = plan.heads[0];
      EXPECT_EQ(head_plan_mask(plan, 0),
                expected_mask(boundary_token_mask(sl, mod.data(), q_len, N),
                              boundary_token_mask(vl, mod.data(), q_len, N), hp.q_order, hp.k_order, q_len, N, block))
          << "case " << ci << " kind " << static_cast<int>(kind);
      // Query rows grouped by modality, positions ascending within a modality.
      for (size_t i = 1; i < hp.q_order.size(); ++i) {
        const int off = N - q_len, a = hp.q_order[i - 1], b = hp.q_order[i];
        ASSERT_TRUE(mod[off + a] < mod[off + b] || (mod[off + a] == mod[off + b] && a < b));
      }
    }
  }
}

// Mixed-modality input: text and video segments interleaved, ending with a text question.
// Text queries attend the previous text tokens in text order (a local band in text-local
// coordinates, across the video between), video queries attend the same spatial index in
// earlier frames (video-local grid), and both like the 4 sink tokens.
struct MixedShape {
  const std::vector<uint8_t>& mod;
  std::vector<int32_t> rank;  // rank of each position within its modality
  std::vector<float> dirs;    // [P, 32]
  int P;
  MixedShape(const std::vector<uint8_t>& m, int P_) : mod(m), rank(m.size()), P(P_) {
    int cnt[3] = {0, 0, 0};
    for (size_t i = 0; i < m.size(); ++i) rank[i] = cnt[m[i]]++;
    std::mt19937 rng(1);
    std::normal_distribution<float> g(0, 1);
    dirs.resize(static_cast<size_t>(P) * 32);
    for (int x = 0; x < P; ++x) {
      double n = 0;
      for (int d = 0; d < 32; ++d) n += std::pow(dirs[x * 32 + d] = g(rng), 2);
      for (int d = 0; d < 32; ++d) dirs[x * 32 + d] /= static_cast<float>(std::sqrt(n));
    }
  }
  float operator()(int, int pos, int, int d, bool is_key) const {
    if (d < 8) return is_key ? (pos < 4 ? 2.5f : 0.0f) : 2.0f;
    if (d < 40) {
      if (mod[pos] == 2) return 9.0f * dirs[(rank[pos] % P) * 32 + d - 8];
      return 0.0f;
    }
    if (mod[pos] == 0) {  // text: rotary-like code of the text rank
      const int pair = (d - 40) / 2;
      const float angle = rank[pos] * 0.05f * static_cast<float>(1 + pair) / 12.0f;
      return 3.0f * ((d % 2) ? std::sin(angle) : std::cos(angle));
    }
    return 0.0f;
  }
};

TEST(BoundaryPattern, BoundaryHeadsBeatThePlainPatternsOnMixedModalities) {
  const int H = 2, Hkv = 1, D = 64, B = 16;
  std::vector<std::pair<int, int>> segs;
  for (int i = 0; i < 4; ++i) {
    segs.push_back({0, 96});
    segs.push_back({2, 640});
  }
  segs.push_back({0, 128});
  const auto mod = layout(segs);
  const int N = static_cast<int>(mod.size());
  const MixedShape shape(mod, 64);
  testing_sparse::SparseCache sc({{N, N}}, H, Hkv, D, B, DType::F32, 21,
                                 [&](int s, int p, int h, int d, bool k) { return shape(s, p, h, d, k); });
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  std::vector<Fidelity> res;
  const char* names[] = {"vertical_slash", "q_boundary", "2d_boundary"};
  for (BoundaryKind kind : {BoundaryKind::None, BoundaryKind::Q, BoundaryKind::TwoD}) {
    SparsePrefillConfig cfg;
    cfg.method = SparsePrefillMethod::MMInference;
    cfg.default_head.type = HeadPatternType::VerticalSlash;
    cfg.default_head.boundary = kind;
    cfg.default_head.vertical_size = 32;
    cfg.default_head.slash_size = 200;  // the 100 forced diagonals + 100 estimated
    ChunkView cv{sc.q.data(), N, N, N, sc.tables.data(), 0, nullptr, {}};
    cv.modalities = mod.data();
    const auto plan = build_sparse_plan(cfg, cv, H, sc.kv, scale);
    res.push_back(run_plan(sc, plan, H, D, scale));
    const std::string key = names[static_cast<int>(kind)];
    std::printf("%s: recall %.4f rel_error %.4f density %.4f\n", key.c_str(), res.back().recall,
                res.back().rel_error, res.back().density);
    RecordProperty(key + "_recall", std::to_string(res.back().recall));
    RecordProperty(key + "_rel_error", std::to_string(res.back().rel_error));
    RecordProperty(key + "_density", std::to_string(res.back().density));
  }
  EXPECT_GT(res[1].recall, res[0].recall);
  EXPECT_LT(res[1].rel_error, res[0].rel_error);
  EXPECT_GT(res[2].recall, res[0].recall);
  EXPECT_LT(res[2].rel_error, res[0].rel_error);
  EXPECT_GE(res[2].recall, 0.95);
}

// XAttention: block scores against a naive double computation, and the selection against its
// definition walked literally.
TEST(XAttentionPattern, ScoresAndSelectionMatchTheDefinition) {
  std::mt19937 rng(4);
  std::normal_distribution<float> g(0, 1);
  for (auto [q_len, N, B, S] : {std::tuple{256, 256, 64, 8}, std::tuple{100, 420, 32, 8}, std::tuple{77, 77, 16, 4},
                                std::tuple{64, 640, 64, 16}}) {
    const int H = 2, D = 16, off = N - q_len;
    std::vector<float> q(static_cast<size_t>(q_len) * H * D), keys(static_cast<size_t>(N) * D);
    for (auto& x : q) x = g(rng);
    for (auto& x : keys) x = g(rng);
    const float scale = 0.25f;
    const auto blk = xattention_block_scores(q.data(), H, 1, q_len, keys.data(), N, D, scale, B, S);
    const int nqb = (q_len + B - 1) / B, nkb = (N + B - 1) / B, na = (q_len + S - 1) / S, nb = (N + S - 1) / S;
    std::vector<double> ref(static_cast<size_t>(nqb) * nkb, 0.0), row(nb);
    for (int a = 0; a < na; ++a) {
      const int allowed = std::min(nb, (off + a * S) / S + 1);
      double mx = -INFINITY;
      for (int b = 0; b < allowed; ++b) {
        double s = 0;
        for (int t = 0; t < S; ++t) {
          const int r = a * S + S - 1 - t, j = b * S + t;
          if (r >= q_len || j >= N) continue;
          for (int d = 0; d < D; ++d) s += static_cast<double>(q[(static_cast<size_t>(r) * H + 1) * D + d]) * keys[static_cast<size_t>(j) * D + d];
        }
        row[b] = s * scale / S;
        mx = std::max(mx, row[b]);
      }
      double sum = 0;
      for (int b = 0; b < allowed; ++b) sum += (row[b] = std::exp(row[b] - mx));
      for (int b = 0; b < allowed; ++b) ref[(a * S / B) * nkb + b * S / B] += row[b] / sum;
    }
    for (size_t i = 0; i < ref.size(); ++i) ASSERT_NEAR(blk[i], ref[i], 1e-4) << i;
    for (float tau : {0.5f, 0.8f, 0.95f}) {
      const auto plan = one_head(xattention_select(blk, q_len, N, B, tau), q_len, N, B);
      const auto& hp = plan.heads[0];
      for (int I = 0; I < nqb; ++I) {
        const int d0 = (off + I * B) / B, d1 = (off + std::min(q_len, (I + 1) * B) - 1) / B;
        std::vector<int> kept(hp.blocks.begin() + hp.block_ptr[I], hp.blocks.begin() + hp.block_ptr[I + 1]);
        for (int& k : kept) k /= B;
        double total = 0, got = 0;
        for (int J = 0; J <= d1; ++J) total += blk[I * nkb + J];
        for (int J : kept) got += blk[I * nkb + J];
        // Sink and diagonal always kept, nothing right of the diagonal.
        EXPECT_TRUE(std::count(kept.begin(), kept.end(), 0) == 1);
        for (int J = d0; J <= d1; ++J) EXPECT_TRUE(std::count(kept.begin(), kept.end(), J) == 1);
        EXPECT_LE(kept.back(), d1);
        // Kept mass reaches the threshold, and dropping the smallest non-forced kept block
        // would fall below it (minimality of the cumulative walk).
        EXPECT_GE(got, tau * total - 1e-6);
        double smallest = INFINITY;
        for (int J : kept)
          if (J != 0 && (J < d0 || J > d1)) smallest = std::min<double>(smallest, blk[I * nkb + J]);
        if (std::isfinite(smallest)) {
          EXPECT_LT(got - smallest, tau * total + 1e-6);
        }
        // Every dropped causal block scores no higher than every kept non-forced one.
        for (int J = 1; J < d0; ++J)
          if (std::count(kept.begin(), kept.end(), J) == 0 && std::isfinite(smallest)) {
            EXPECT_LE(blk[I * nkb + J], smallest + 1e-7);
          }
      }
    }
    const auto dense = one_head(xattention_select(blk, q_len, N, B, 1.0f), q_len, N, B);
    EXPECT_EQ(dense.heads[0].blocks, dense_head_plan(q_len, N, B, B).blocks);
    // Dense tail: query blocks reaching position N - 40 keep every causal block, the others
    // are unchanged.
    const auto tail = one_head(xattention_select(blk, q_len, N, B, 0.5f, N - 40), q_len, N, B);
    const auto plain = one_head(xattention_select(blk, q_len, N, B, 0.5f), q_len, N, B);
    const auto full = dense_head_plan(q_len, N, B, B);
    for (int I = 0; I < nqb; ++I) {
      const bool in_tail = off + std::min(q_len, (I + 1) * B) - 1 >= N - 40;
      const HeadPlan& want = in_tail ? full : plain.heads[0];
      EXPECT_EQ(std::vector<int32_t>(tail.heads[0].blocks.begin() + tail.heads[0].block_ptr[I],
                                     tail.heads[0].blocks.begin() + tail.heads[0].block_ptr[I + 1]),
                std::vector<int32_t>(want.blocks.begin() + want.block_ptr[I], want.blocks.begin() + want.block_ptr[I + 1]))
          << I;
    }
  }
}

TEST(XAttentionPattern, FidelityOnStructuredInput) {
  // Sink keys every query likes and a rotary-like position code (a local band): block-friendly.
  const int H = 4, Hkv = 2, D = 64, B = 16;
  auto shape = [](int, int pos, int, int d, bool is_key) -> float {
    if (d < 8) return !is_key || pos < 4 ? 3.0f : 0.0f;
    if (d < 40) {
      const int pair = (d - 8) / 2;
      const float angle = pos * 0.002f * static_cast<float>(1 + pair);
      return 2.5f * ((d % 2) ? std::sin(angle) : std::cos(angle));
    }
    return 0.0f;
  };
  for (auto [q_len, N] : {std::pair{3072, 3072}, std::pair{1024, 3072}}) {
    testing_sparse::SparseCache sc({{q_len, N}}, H, Hkv, D, B, DType::F32, 7, shape);
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    SparsePrefillConfig cfg;
    cfg.method = SparsePrefillMethod::XAttention;
    cfg.xattention.threshold = 0.9f;
    ChunkView cv{sc.q.data(), q_len, N, N, sc.tables.data(), 0, nullptr, {}};
    const auto plan = build_sparse_plan(cfg, cv, H, sc.kv, scale);
    const Fidelity f = run_plan(sc, plan, H, D, scale);
    std::printf("xattention q_len %d N %d: recall %.4f rel_error %.4f density %.4f\n", q_len, N, f.recall,
                f.rel_error, f.density);
    EXPECT_LT(f.density, 0.6);
    EXPECT_GE(f.recall, 0.85);
  }
}

}  // namespace
}  // namespace vlm
