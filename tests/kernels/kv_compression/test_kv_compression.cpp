// LOOK-M kernels (kernels/kv_compression/): each optimized kernel against its naive reference
// over tables of shapes (MHA and GQA, odd lengths, chunked rows, several images), plus the
// structural promises: exact budget, text evicted only when text alone exceeds it, chunked
// "full" scores equal one pass, hand-checked merges.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/kv_compression/attention_scores.h"
#include "kernels/kv_compression/kv_compaction.h"
#include "kernels/kv_compression/kv_merge.h"
#include "kernels/kv_compression/look_m_params.h"
#include "kernels/kv_compression/token_selection.h"

namespace vlm {
namespace {

// One sequence's paged cache of L tokens in shuffled blocks (plus a spare block), random K/V.
struct OneSeqCache {
  std::vector<uint8_t> kbuf, vbuf;
  PagedKVLayer kv;
  std::vector<int32_t> table;

  OneSeqCache(int L, int Hkv, int D, int B, DType dtype, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    const int nb = (L + B - 1) / B;
    kv.dtype = dtype;
    kv.num_blocks = nb + 1;
    kv.block_size = B;
    kv.num_kv_heads = Hkv;
    kv.head_dim = D;
    const size_t elems = size_t(kv.num_blocks) * kv.block_stride();
    kbuf.resize(elems * dtype_size(dtype));
    vbuf.resize(elems * dtype_size(dtype));
    kv.k = kbuf.data();
    kv.v = vbuf.data();
    std::vector<float> tmp(elems);
    for (float& x : tmp) x = nd(rng);
    convert_from_f32(tmp.data(), dtype, kbuf.data(), int64_t(elems));
    for (float& x : tmp) x = nd(rng);
    convert_from_f32(tmp.data(), dtype, vbuf.data(), int64_t(elems));
    table.resize(nb);
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), rng);
    for (int32_t& b : table) b = (b + 1) % int32_t(kv.num_blocks);  // leave one block unused
  }
};

std::vector<float> random_q(int R, int H, int D, uint32_t seed, float mag = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, mag);
  std::vector<float> q(size_t(R) * H * D);
  for (float& x : q) x = nd(rng);
  return q;
}

// Text/image tags: a text prefix, `images` image spans of `span` tokens separated by 3 text
// tokens, text up to L.
std::vector<uint8_t> tags(int L, int prefix, int images, int span) {
  std::vector<uint8_t> t(L, 1);
  int pos = prefix;
  for (int i = 0; i < images && pos < L; ++i) {
    for (int j = 0; j < span && pos < L; ++j) t[pos++] = 0;
    pos += 3;
  }
  return t;
}

struct ScoreCase { int L, H, Hkv, D, B; DType dtype; };
const ScoreCase kScoreCases[] = {
    {1, 2, 2, 8, 4, DType::F32},     {37, 4, 4, 16, 16, DType::F32},  {100, 8, 2, 32, 16, DType::F32},
    {129, 6, 3, 64, 32, DType::BF16}, {77, 14, 2, 64, 16, DType::F16}, {250, 4, 1, 24, 8, DType::F32},
};

TEST(LookMScores, OptimizedMatchesReferenceOverChunks) {
  for (const ScoreCase& c : kScoreCases) {
    OneSeqCache cache(c.L, c.Hkv, c.D, c.B, c.dtype, 7 + c.L);
    const float scale = 1.0f / std::sqrt(float(c.D));
    // Rows in up to three chunks (the last one odd-sized), accumulated into the same scores.
    const std::vector<int> cuts = {0, c.L / 3, c.L / 3 + (c.L - c.L / 3) / 2, c.L};
    const std::vector<float> q = random_q(c.L, c.H, c.D, 11 + c.L, 2.0f);
    const int64_t stride = c.L + 5;
    std::vector<float> opt(size_t(c.Hkv) * stride, 0.f), ref(opt), one(opt);
    for (size_t i = 0; i + 1 < cuts.size(); ++i) {
      const int first = cuts[i], R = cuts[i + 1] - cuts[i];
      const float* qr = q.data() + size_t(first) * c.H * c.D;
      accumulate_attention_scores(qr, R, c.H, cache.kv, cache.table.data(), first, scale, opt.data(), stride);
      accumulate_attention_scores_ref(qr, R, c.H, cache.kv, cache.table.data(), first, scale, ref.data(), stride);
    }
    accumulate_attention_scores(q.data(), c.L, c.H, cache.kv, cache.table.data(), 0, scale, one.data(), stride);
    const int G = c.H / c.Hkv;
    for (int h = 0; h < c.Hkv; ++h) {
      double total = 0;
      for (int j = 0; j < c.L; ++j) {
        const size_t i = size_t(h) * stride + j;
        EXPECT_NEAR(opt[i], ref[i], 1e-4 * std::max(1.0f, ref[i])) << "L=" << c.L << " h=" << h << " j=" << j;
        EXPECT_NEAR(one[i], ref[i], 1e-4 * std::max(1.0f, ref[i]));
        total += ref[i];
      }
      EXPECT_NEAR(total, double(c.L) * G, 1e-3 * c.L * G);  // every row sums to 1
      for (int j = c.L; j < stride; ++j) EXPECT_EQ(opt[size_t(h) * stride + j], 0.0f);
    }
  }
}

TEST(LookMScores, WindowIsTheLastRowsOnly) {
  OneSeqCache cache(50, 2, 16, 8, DType::F32, 3);
  const std::vector<float> q = random_q(50, 4, 16, 4);
  std::vector<float> s(100, 0.f), r(100, 0.f);
  accumulate_attention_scores(q.data() + 40 * 4 * 16, 10, 4, cache.kv, cache.table.data(), 40, 0.25f, s.data(), 50);
  accumulate_attention_scores_ref(q.data() + 40 * 4 * 16, 10, 4, cache.kv, cache.table.data(), 40, 0.25f, r.data(), 50);
  double total = 0;
  for (int i = 0; i < 100; ++i) {
    EXPECT_NEAR(s[i], r[i], 1e-5);
    total += s[i];
  }
  EXPECT_NEAR(total, 10 * 4, 1e-3);
}

struct SelectCase { int L; double rr, ir; int prefix, images, span; bool text_prior; };
const SelectCase kSelectCases[] = {
    {10, 0.1, 0.1, 2, 1, 5, true},    {101, 0.1, 0.1, 5, 2, 30, true},  {333, 0.2, 0.15, 7, 4, 60, true},
    {333, 0.05, 0.3, 1, 3, 100, true}, {64, 0.5, 0.0, 0, 1, 64, true},   {97, 0.0, 0.5, 3, 2, 40, false},
    {500, 0.1, 0.1, 20, 5, 90, false}, {33, 0.1, 0.1, 33, 0, 0, true},   {256, 0.3, 0.3, 10, 1, 200, true},
};

TEST(LookMSelect, OptimizedMatchesReferenceAndBudgetIsExact) {
  std::mt19937 rng(5);
  for (const SelectCase& c : kSelectCases) {
    for (int trial = 0; trial < 3; ++trial) {
      std::vector<float> s(c.L);
      std::uniform_real_distribution<float> u(0.f, 3.f);
      for (float& x : s) x = trial == 2 ? float(int(u(rng))) : u(rng);  // trial 2: many ties
      const std::vector<uint8_t> t = tags(c.L, c.prefix, c.images, c.span);
      LookMParams p;
      p.text_prior = c.text_prior;
      p.recent_ratio = c.rr;
      p.important_ratio = c.ir;
      const LookMBudget b = look_m_budget(p, c.L);
      const auto opt = select_kept_tokens(s.data(), t.data(), c.L, p, b);
      const auto ref = select_kept_tokens_ref(s.data(), t.data(), c.L, p, b);
      EXPECT_EQ(opt, ref) << "L=" << c.L;
      EXPECT_EQ(int(opt.size()), std::min(c.L, b.kept()));
      EXPECT_TRUE(std::is_sorted(opt.begin(), opt.end()));
      if (b.kept() >= c.L) continue;
      // Recent window always kept.
      for (int j = c.L - b.recent; j < c.L; ++j) EXPECT_TRUE(std::binary_search(opt.begin(), opt.end(), j));
      const int cand = c.L - b.recent;
      int text_cand = 0, text_kept = 0, image_kept = 0;
      for (int j = 0; j < cand; ++j) text_cand += t[j];
      for (int j : opt)
        if (j < cand) (t[j] ? text_kept : image_kept)++;
      if (c.text_prior) {
        // Text is evicted only when text alone exceeds the important budget.
        EXPECT_EQ(text_kept, std::min(text_cand, b.important));
        if (text_cand >= b.important) {
          EXPECT_EQ(image_kept, 0);
        }
      } else {
        for (int j = 0; j < std::min({p.num_sink_tokens, b.important, cand}); ++j)
          EXPECT_TRUE(std::binary_search(opt.begin(), opt.end(), j)) << "sink " << j;
      }
    }
  }
}

TEST(LookMSelect, AbsoluteBudgets) {
  std::vector<float> s(40, 1.f);
  std::vector<uint8_t> t(40, 0);
  LookMParams p;
  p.recent_tokens = 3;
  p.important_tokens = 5;
  const auto kept = select_kept_tokens(s.data(), t.data(), 40, p, look_m_budget(p, 40));
  EXPECT_EQ(kept, (std::vector<int32_t>{0, 1, 2, 3, 4, 37, 38, 39}));  // ties: lower positions
}

TEST(LookMMerge, OptimizedMatchesReference) {
  const KVMerge modes[] = {KVMerge::None, KVMerge::Average, KVMerge::Pivot, KVMerge::Weighted};
  for (int L : {5, 31, 200}) {
    for (int D : {8, 64}) {
      std::mt19937 rng(L * 100 + D);
      std::normal_distribution<float> nd;
      std::vector<float> k(size_t(L) * D), v(k.size());
      for (float& x : k) x = nd(rng);
      for (float& x : v) x = nd(rng);
      std::vector<int32_t> kept;
      for (int j = 0; j < L; ++j)
        if (j % 3 == 0 || j >= L - 2) kept.push_back(j);
      const size_t C = kept.size();
      for (KVMerge m : modes) {
        std::vector<float> ko(C * D), vo(C * D), kr(C * D), vr(C * D);
        merge_kept_kv(k.data(), v.data(), L, D, kept, m, ko.data(), vo.data());
        merge_kept_kv_ref(k.data(), v.data(), L, D, kept, m, kr.data(), vr.data());
        for (size_t i = 0; i < C * D; ++i) {
          EXPECT_NEAR(ko[i], kr[i], 1e-5) << "L=" << L << " D=" << D << " mode " << int(m);
          EXPECT_NEAR(vo[i], vr[i], 1e-5);
        }
        if (m == KVMerge::None) {
          for (size_t c = 0; c < C; ++c) {
            for (int d = 0; d < D; ++d) {
              EXPECT_EQ(ko[c * D + d], k[size_t(kept[c]) * D + d]);
            }
          }
        }
      }
    }
  }
}

TEST(LookMMerge, HandCheckedFormulas) {
  // D = 2. Kept: 0 -> (1, 0), 2 -> (0, 1). Evicted 1 -> (2, 0.1) (matches 0), 3 -> (0.1, 3)
  // (matches 2), 4 -> (3, 0) (matches 0, cosine 1).
  const std::vector<float> k = {1, 0, 2, 0.1f, 0, 1, 0.1f, 3, 3, 0};
  const std::vector<float> v = {1, 1, 2, 2, 3, 3, 4, 4, 5, 5};
  const std::vector<int32_t> kept = {0, 2};
  std::vector<float> ko(4), vo(4);
  merge_kept_kv(k.data(), v.data(), 5, 2, kept, KVMerge::Average, ko.data(), vo.data());
  EXPECT_FLOAT_EQ(vo[0], (1 + 2 + 5) / 3.0f);
  EXPECT_FLOAT_EQ(vo[2], (3 + 4) / 2.0f);
  EXPECT_FLOAT_EQ(ko[0], (1 + 2 + 3) / 3.0f);
  merge_kept_kv(k.data(), v.data(), 5, 2, kept, KVMerge::Pivot, ko.data(), vo.data());
  EXPECT_FLOAT_EQ(vo[0], (1 + (2 + 1) / 2.0f + (5 + 1) / 2.0f) / 3.0f);
  EXPECT_FLOAT_EQ(vo[2], (3 + (4 + 3) / 2.0f) / 2.0f);
  merge_kept_kv(k.data(), v.data(), 5, 2, kept, KVMerge::Weighted, ko.data(), vo.data());
  const float w1 = 2 / std::sqrt(4 + 0.01f), w3 = 3 / std::sqrt(9 + 0.01f);
  EXPECT_NEAR(vo[0], (1 + w1 * 2 + 1 * 5) / 3.0f, 1e-6);
  EXPECT_NEAR(vo[2], (3 + w3 * 4) / 2.0f, 1e-6);
}

struct CompactCase { int L, Hkv, D, B; DType dtype; const char* mode; LookMScores scores; };
const CompactCase kCompactCases[] = {
    {97, 2, 16, 16, DType::F32, "text-prior-pivot", LookMScores::Full},
    {300, 1, 32, 16, DType::F32, "text-prior-avg", LookMScores::Window},
    {211, 4, 8, 8, DType::F32, "text-prior-weighted", LookMScores::Full},
    {150, 2, 64, 32, DType::BF16, "pivot", LookMScores::Full},
    {64, 3, 16, 16, DType::F32, "h2o", LookMScores::Full},
    {129, 2, 16, 16, DType::F16, "text-prior-h2o", LookMScores::Window},
};

TEST(LookMCompact, OptimizedMatchesReferenceInThePagedCache) {
  for (const CompactCase& c : kCompactCases) {
    OneSeqCache a(c.L, c.Hkv, c.D, c.B, c.dtype, 21 + c.L), b(c.L, c.Hkv, c.D, c.B, c.dtype, 21 + c.L);
    const int H = c.Hkv * 2;
    const std::vector<float> q = random_q(c.L, H, c.D, 3 + c.L, 1.5f);
    LookMParams p = *look_m_mode_from_name(c.mode);
    p.scores = c.scores;
    const int first = c.scores == LookMScores::Full ? 0 : std::max(0, c.L - p.window);
    std::vector<float> s(size_t(c.Hkv) * c.L, 0.f);
    accumulate_attention_scores_ref(q.data() + size_t(first) * H * c.D, c.L - first, H, a.kv, a.table.data(), first,
                                    0.3f, s.data(), c.L);
    const std::vector<uint8_t> t = tags(c.L, 4, 3, c.L / 4);
    const std::vector<uint8_t> before = a.kbuf;
    const int32_t na = compact_sequence_kv(a.kv, a.table.data(), c.L, s.data(), c.L, t.data(), p);
    const int32_t nb = compact_sequence_kv_ref(b.kv, b.table.data(), c.L, s.data(), c.L, t.data(), p);
    EXPECT_EQ(na, nb);
    EXPECT_EQ(na, look_m_budget(p, c.L).kept());
    const double tol = c.dtype == DType::F32 ? 1e-5 : 1e-2;
    std::vector<float> ka(size_t(c.L) * c.D), kb(ka.size()), va(ka.size()), vb(ka.size());
    for (int h = 0; h < c.Hkv; ++h) {
      gather_kv_head(a.kv, a.table.data(), c.L, h, ka.data(), va.data());
      gather_kv_head(b.kv, b.table.data(), c.L, h, kb.data(), vb.data());
      for (int64_t i = 0; i < int64_t(na) * c.D; ++i) {
        EXPECT_NEAR(ka[i], kb[i], tol * std::max(1.0f, std::abs(kb[i]))) << c.mode << " h=" << h << " i=" << i;
        EXPECT_NEAR(va[i], vb[i], tol * std::max(1.0f, std::abs(vb[i])));
      }
    }
    // The spare block (id 0) nobody owns is untouched.
    EXPECT_TRUE(std::equal(a.kbuf.begin(), a.kbuf.begin() + a.kv.block_stride() * dtype_size(c.dtype), before.begin()));
  }
}

// The whole per-layer pipeline, every mode: optimized scores (sgemm, f32) + optimized
// compaction against the naive one (dense attention matrix in double + explicit-set selection +
// per-pair merges), for MHA and GQA, odd lengths, several images, both score sources. Random
// continuous inputs keep the rankings free of near-ties, so both keep the same sets.
TEST(LookMCompact, EveryModeEndToEndMatchesTheNaivePipeline) {
  struct Shape { int L, H, Hkv, D, B, prefix, images, span; };
  const Shape shapes[] = {{83, 4, 4, 16, 16, 5, 2, 30}, {157, 6, 2, 8, 8, 3, 4, 31}, {61, 7, 1, 32, 16, 0, 1, 40}};
  for (const Shape& c : shapes) {
    for (const char* mode : {"text-prior-pivot", "text-prior-avg", "text-prior-weighted", "text-prior-h2o", "pivot",
                             "avg", "weighted", "h2o"}) {
      for (LookMScores scores : {LookMScores::Full, LookMScores::Window}) {
        OneSeqCache a(c.L, c.Hkv, c.D, c.B, DType::F32, 100 + c.L), b(c.L, c.Hkv, c.D, c.B, DType::F32, 100 + c.L);
        const std::vector<float> q = random_q(c.L, c.H, c.D, 200 + c.L, 1.5f);
        LookMParams p = *look_m_mode_from_name(mode);
        p.scores = scores;
        p.window = 19;
        p.recent_ratio = 0.1;
        p.important_ratio = 0.23;
        const int first = scores == LookMScores::Full ? 0 : c.L - p.window;
        std::vector<float> so(size_t(c.Hkv) * c.L, 0.f), sr(so);
        // Optimized scores in two chunks (as prefill produces them), reference in one pass.
        const int cut = first + (c.L - first) / 2;
        accumulate_attention_scores(q.data() + size_t(first) * c.H * c.D, cut - first, c.H, a.kv, a.table.data(),
                                    first, 0.35f, so.data(), c.L);
        accumulate_attention_scores(q.data() + size_t(cut) * c.H * c.D, c.L - cut, c.H, a.kv, a.table.data(), cut,
                                    0.35f, so.data(), c.L);
        accumulate_attention_scores_ref(q.data() + size_t(first) * c.H * c.D, c.L - first, c.H, b.kv, b.table.data(),
                                        first, 0.35f, sr.data(), c.L);
        const std::vector<uint8_t> t = tags(c.L, c.prefix, c.images, c.span);
        const int32_t na = compact_sequence_kv(a.kv, a.table.data(), c.L, so.data(), c.L, t.data(), p);
        const int32_t nb = compact_sequence_kv_ref(b.kv, b.table.data(), c.L, sr.data(), c.L, t.data(), p);
        ASSERT_EQ(na, nb);
        EXPECT_EQ(na, int(0.1 * c.L) + int(0.23 * c.L)) << "budget met exactly";
        std::vector<float> ka(size_t(c.L) * c.D), kb(ka.size()), va(ka.size()), vb(ka.size());
        for (int h = 0; h < c.Hkv; ++h) {
          gather_kv_head(a.kv, a.table.data(), na, h, ka.data(), va.data());
          gather_kv_head(b.kv, b.table.data(), nb, h, kb.data(), vb.data());
          for (int64_t i = 0; i < int64_t(na) * c.D; ++i) {
            ASSERT_NEAR(ka[i], kb[i], 1e-5 * std::max(1.0f, std::abs(kb[i])))
                << mode << " " << look_m_scores_name(scores) << " L=" << c.L << " h=" << h << " i=" << i;
            ASSERT_NEAR(va[i], vb[i], 1e-5 * std::max(1.0f, std::abs(vb[i])));
          }
        }
      }
    }
  }
}

TEST(LookMParams, NamesAndBudget) {
  for (const char* n : {"text-prior-pivot", "text-prior-avg", "text-prior-weighted", "text-prior-h2o", "pivot", "avg",
                        "weighted", "h2o"}) {
    auto p = look_m_mode_from_name(n);
    ASSERT_TRUE(p) << n;
    EXPECT_EQ(look_m_mode_name(*p), n);
  }
  EXPECT_FALSE(look_m_mode_from_name("off"));
  LookMParams p;
  EXPECT_EQ(look_m_budget(p, 8192).kept(), 819 + 819);
  p.recent_ratio = 1.5;
  EXPECT_FALSE(look_m_params_error(p).empty());
}

}  // namespace
}  // namespace vlm
