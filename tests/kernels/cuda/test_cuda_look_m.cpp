// LOOK-M on the GPU (kernels/cuda/kv_compression) against the CPU's kernels/kv_compression on the
// same paged caches: the importance scores (window rows and full scores over chunks, added into
// earlier sums) within f32 rounding, and the compacted caches (every merge, with and without the
// text prior, MHA and GQA, f32/bf16/f16 caches, odd lengths and block sizes) within the CPU
// tests' tolerance (1e-5 f32, 1e-2 relative 16-bit), slots past the kept count untouched.
// Skips with a message when no GPU is visible.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/cuda/kv_compression/cuda_look_m.h"
#include "kernels/kv_compression/attention_scores.h"
#include "kernels/kv_compression/kv_compaction.h"
#include "kernels/kv_compression/look_m_params.h"
#include "kernels/kv_compression/token_selection.h"
#include "tests/kernels/cuda/cuda_test_util.h"
#include "tests/support/gpu_test.h"

namespace vlm {
namespace {

using testing::to_device;
using testing::to_host;

static_assert(static_cast<int>(KVMerge::None) == 0 && static_cast<int>(KVMerge::Average) == 1 &&
              static_cast<int>(KVMerge::Pivot) == 2 && static_cast<int>(KVMerge::Weighted) == 3,
              "kernels/cuda/kv_compression/cuda_look_m.cu switches on these values");

// One sequence's cache of L tokens in shuffled blocks (block 0 spare), random K/V, on the host
// and on the device.
struct SeqCache {
  std::vector<uint8_t> kbuf, vbuf;
  PagedKVLayer kv;
  std::vector<int32_t> table;
  cuda::DeviceBuffer dk, dv, dtable;
  PagedKVLayer dkv;
  SeqCache(int L, int Hkv, int D, int B, DType dt, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd;
    const int nb = (L + B - 1) / B;
    kv = PagedKVLayer{nullptr, nullptr, dt, nb + 1, B, Hkv, D};
    const size_t elems = size_t(kv.num_blocks) * kv.block_stride();
    std::vector<float> x(elems);
    for (float& e : x) e = nd(rng);
    kbuf = testing::encode(x, dt);
    for (float& e : x) e = nd(rng);
    vbuf = testing::encode(x, dt);
    kv.k = kbuf.data();
    kv.v = vbuf.data();
    table.resize(nb);
    std::iota(table.begin(), table.end(), 1);
    std::shuffle(table.begin(), table.end(), rng);
    dk = to_device(kbuf);
    dv = to_device(vbuf);
    dtable = to_device(table);
    dkv = kv;
    dkv.k = dk.get();
    dkv.v = dv.get();
  }
};

struct Case { int L, H, Hkv, D, B; DType dt; };
const Case kCases[] = {{37, 4, 4, 16, 16, DType::F32},  {300, 8, 2, 64, 16, DType::F32}, {129, 6, 3, 64, 32, DType::BF16},
                       {777, 28, 4, 128, 16, DType::BF16}, {200, 14, 2, 64, 16, DType::F16}, {250, 4, 1, 24, 8, DType::F32}};

TEST(CudaLookM, ScoresMatchTheCpuOverChunksAndWindows) {
  VLM_REQUIRE_GPU();
  for (const Case& c : kCases) {
    SCOPED_TRACE(::testing::Message() << "L=" << c.L << " H=" << c.H << " D=" << c.D << " " << dtype_name(c.dt));
    SeqCache sc(c.L, c.Hkv, c.D, c.B, c.dt, 3 + c.L);
    const std::vector<float> q = testing::random_vector(size_t(c.L) * c.H * c.D, 9 + c.L, 1.5f);
    const float scale = 1.0f / std::sqrt(float(c.D));
    // Full scores in three chunks, then a window of 64 rows added on top (as two layers' worth).
    const int cuts[] = {0, c.L / 3, c.L / 2 + 1, c.L};
    std::vector<float> cpu(size_t(c.Hkv) * c.L, 0.25f);
    cuda::DeviceBuffer dq = to_device(q), dscores = to_device(cpu),
                       stats(cuda::look_m_row_stats_bytes(c.L, c.H, c.L));
    auto both = [&](int first, int R) {
      accumulate_attention_scores(q.data() + size_t(first) * c.H * c.D, R, c.H, sc.kv, sc.table.data(), first, scale,
                                  cpu.data(), c.L);
      cuda::look_m_accumulate_scores(dq.as<float>() + size_t(first) * c.H * c.D, DType::F32, R, c.H, sc.dkv,
                                     sc.dtable.as<int32_t>(), first, scale, stats.get(), dscores.as<float>(), c.L,
                                     nullptr);
    };
    for (int i = 0; i < 3; ++i) both(cuts[i], cuts[i + 1] - cuts[i]);
    const int W = std::min(64, c.L);
    both(c.L - W, W);
    const std::vector<float> gpu = to_host<float>(dscores, cpu.size());
    double worst = 0;
    for (size_t i = 0; i < cpu.size(); ++i)
      worst = std::max(worst, std::abs(double(gpu[i]) - cpu[i]) / std::max(1.0, std::abs(double(cpu[i]))));
    EXPECT_LE(worst, 2e-5);
  }
}

TEST(CudaLookM, CompactedCachesMatchTheCpu) {
  VLM_REQUIRE_GPU();
  int n = 0;
  for (const Case& c : kCases)
    for (const char* mode : {"text-prior-pivot", "text-prior-avg", "text-prior-weighted", "text-prior-h2o", "pivot",
                             "weighted"}) {
      SCOPED_TRACE(::testing::Message() << "L=" << c.L << " Hkv=" << c.Hkv << " D=" << c.D << " " << dtype_name(c.dt)
                                      << " " << mode);
      const LookMParams p = *look_m_mode_from_name(mode);
      SeqCache sc(c.L, c.Hkv, c.D, c.B, c.dt, 50 + c.L + n++);
      // Scores (the CPU's, from random queries) and tags: text, an image span, text.
      const std::vector<float> q = testing::random_vector(size_t(c.L) * c.H * c.D, 7 + c.L, 1.5f);
      std::vector<float> scores(size_t(c.Hkv) * c.L, 0.f);
      accumulate_attention_scores(q.data(), c.L, c.H, sc.kv, sc.table.data(), 0, 0.3f, scores.data(), c.L);
      std::vector<uint8_t> is_text(c.L, 1);
      for (int j = c.L / 5; j < c.L * 3 / 5; ++j) is_text[j] = 0;
      // GPU: kept sets on the host (select_kept_tokens), merge and compaction on the device.
      const LookMBudget budget = look_m_budget(p, c.L);
      const int32_t C = budget.kept();
      ASSERT_LT(C, c.L);
      std::vector<int32_t> kept;
      for (int h = 0; h < c.Hkv; ++h) {
        const auto k = select_kept_tokens(scores.data() + size_t(h) * c.L, is_text.data(), c.L, p, budget);
        kept.insert(kept.end(), k.begin(), k.end());
      }
      cuda::DeviceBuffer dkept = to_device(kept), ws(cuda::look_m_compact_workspace_bytes(c.L, C, c.Hkv, c.D));
      cuda::look_m_compact(sc.dkv, sc.dtable.as<int32_t>(), c.L, dkept.as<int32_t>(), C, p.merge, ws.get(), nullptr);
      // CPU on its own copy.
      const int32_t nc = compact_sequence_kv(sc.kv, sc.table.data(), c.L, scores.data(), c.L, is_text.data(), p);
      ASSERT_EQ(nc, C);
      std::vector<uint8_t> gk = to_host<uint8_t>(sc.dk, sc.kbuf.size()), gv = to_host<uint8_t>(sc.dv, sc.vbuf.size());
      PagedKVLayer gkv = sc.kv;
      gkv.k = gk.data();
      gkv.v = gv.data();
      const double tol = c.dt == DType::F32 ? 1e-5 : 1e-2;
      std::vector<float> ka(size_t(c.L) * c.D), kb(ka.size()), va(ka.size()), vb(ka.size());
      int bad = 0;
      for (int h = 0; h < c.Hkv; ++h) {
        gather_kv_head(gkv, sc.table.data(), c.L, h, ka.data(), va.data());
        gather_kv_head(sc.kv, sc.table.data(), c.L, h, kb.data(), vb.data());
        for (int64_t i = 0; i < int64_t(c.L) * c.D; ++i) {  // kept slots merged; the rest as before on both
          bad += std::abs(ka[i] - kb[i]) > tol * std::max(1.0f, std::abs(kb[i]));
          bad += std::abs(va[i] - vb[i]) > tol * std::max(1.0f, std::abs(vb[i]));
        }
      }
      EXPECT_EQ(bad, 0);
      // The spare block 0 is untouched.
      const size_t spare = size_t(sc.kv.block_stride()) * dtype_size(c.dt);
      EXPECT_TRUE(std::equal(gk.begin(), gk.begin() + spare, sc.kbuf.begin()));
    }
}

// The tensor-core search (16-bit caches, D 64/128) against the f32 CUDA-core search (the naive
// reference) and a double-precision host search: the same kept index for every evicted position
// except at a near tie (the chosen key's exact cosine within 1e-5 of the best: f32 rounding, the
// contract in cuda_look_m.h; the count is printed, expected 0 on these shapes), cosines within 1e-3.
TEST(CudaLookM, TensorCoreSearchMatchesTheF32Search) {
  VLM_REQUIRE_GPU();
  const Case cases[] = {{129, 6, 3, 64, 32, DType::BF16}, {777, 28, 4, 128, 16, DType::BF16},
                        {200, 14, 2, 64, 16, DType::F16}, {3001, 28, 4, 128, 16, DType::BF16}};
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "L=" << c.L << " D=" << c.D << " " << dtype_name(c.dt));
    SeqCache sc(c.L, c.Hkv, c.D, c.B, c.dt, 900 + c.L);
    const LookMParams p;  // 10 % recent + 10 % important
    const LookMBudget budget = look_m_budget(p, c.L);
    const int32_t C = budget.kept();
    std::mt19937 rng(c.L);
    std::vector<int32_t> kept;  // [Hkv, C]: a random important set + the recent window
    for (int h = 0; h < c.Hkv; ++h) {
      std::vector<int32_t> cand(c.L - budget.recent);
      std::iota(cand.begin(), cand.end(), 0);
      std::shuffle(cand.begin(), cand.end(), rng);
      std::vector<int32_t> k(cand.begin(), cand.begin() + budget.important);
      std::sort(k.begin(), k.end());
      for (int j = c.L - budget.recent; j < c.L; ++j) k.push_back(j);
      ASSERT_EQ(int32_t(k.size()), C);
      kept.insert(kept.end(), k.begin(), k.end());
    }
    cuda::DeviceBuffer dkept = to_device(kept), ws(cuda::look_m_compact_workspace_bytes(c.L, C, c.Hkv, c.D));
    cuda::DeviceBuffer da(size_t(c.Hkv) * c.L * 4), dw(size_t(c.Hkv) * c.L * 4);
    // 0: Auto (wgmma on an sm_90 GPU at D 128, else mma.sync), 1: F32, 2: mma.sync.
    const cuda::LookMSearch how[3] = {cuda::LookMSearch::Auto, cuda::LookMSearch::F32, cuda::LookMSearch::MmaSync};
    std::vector<int32_t> arg[3];
    std::vector<float> w[3];
    for (int i = 0; i < 3; ++i) {
      cuda::look_m_nearest_kept(sc.dkv, sc.dtable.as<int32_t>(), c.L, dkept.as<int32_t>(), C, how[i], ws.get(),
                                da.as<int32_t>(), dw.as<float>(), nullptr);
      arg[i] = to_host<int32_t>(da, size_t(c.Hkv) * c.L);
      w[i] = to_host<float>(dw, size_t(c.Hkv) * c.L);
    }
    std::vector<float> kh(size_t(c.L) * c.D), vh(kh.size());
    int differ = 0, near_ties = 0, bad = 0, checked = 0;
    for (int h = 0; h < c.Hkv; ++h) {
      gather_kv_head(sc.kv, sc.table.data(), c.L, h, kh.data(), vh.data());
      std::vector<uint8_t> is_kept(c.L, 0);
      for (int i = 0; i < C; ++i) is_kept[kept[size_t(h) * C + i]] = 1;
      std::vector<double> norm(c.L, 0.0);
      for (int pos = 0; pos < c.L; ++pos) {
        for (int d = 0; d < c.D; ++d) norm[pos] += double(kh[size_t(pos) * c.D + d]) * kh[size_t(pos) * c.D + d];
        norm[pos] = std::sqrt(norm[pos]);
      }
      for (int e = 0; e < c.L; ++e) {
        if (is_kept[e]) continue;
        const size_t i = size_t(h) * c.L + e;
        ++checked;
        EXPECT_NEAR(w[0][i], w[1][i], 1e-3);
        EXPECT_NEAR(w[2][i], w[1][i], 1e-3);
        double best = -2;
        int bc = 0;
        std::vector<double> cs(C);
        for (int j = 0; j < C; ++j) {
          const int pos = kept[size_t(h) * C + j];
          double dot = 0;
          for (int d = 0; d < c.D; ++d) dot += double(kh[size_t(e) * c.D + d]) * kh[size_t(pos) * c.D + d];
          cs[j] = dot / (norm[e] * norm[pos]);
          if (cs[j] > best) best = cs[j], bc = j;
        }
        // A different choice is allowed only at a near tie (f32 rounding of the cosines); counted.
        for (int k = 0; k < 3; ++k)
          if (arg[k][i] != bc) {
            ++near_ties;
            bad += arg[k][i] < 0 || arg[k][i] >= C || best - cs[arg[k][i]] > 1e-5;
          }
        differ += (arg[0][i] != arg[1][i]) + (arg[2][i] != arg[1][i]);
      }
    }
    EXPECT_GT(checked, 0);
    EXPECT_EQ(bad, 0);
    EXPECT_LE(differ, near_ties);
    std::printf("L=%d: %d evicted rows, tensor-core (Auto, mma.sync) vs f32 choices differ at %d, near ties (< 1e-5) %d\n", c.L, checked,
                differ, near_ties);
  }
}

// The tensor-core score passes (bf16/f16 queries and caches) against the f32 kernels and the CPU on
// the same 16-bit inputs (full scores over chunks, then a window on top), and the kept sets the
// tensor-core scores give: the CPU's set except where the CPU's own scores nearly tie (counted).
TEST(CudaLookM, TensorCoreScoresMatchTheF32ScoresAndTheCpu) {
  VLM_REQUIRE_GPU();
  const Case cases[] = {{129, 6, 3, 64, 32, DType::BF16}, {777, 28, 4, 128, 16, DType::BF16},
                        {200, 14, 2, 64, 16, DType::F16}, {3001, 28, 4, 128, 16, DType::BF16}};
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "L=" << c.L << " H=" << c.H << " D=" << c.D << " " << dtype_name(c.dt));
    SeqCache sc(c.L, c.Hkv, c.D, c.B, c.dt, 5 + c.L);
    const std::vector<uint8_t> q16 = testing::encode(testing::random_vector(size_t(c.L) * c.H * c.D, 11 + c.L, 1.5f), c.dt);
    const std::vector<float> q = testing::decode(q16, c.dt);  // [L, H, D], the same values in f32
    const float scale = 1.0f / std::sqrt(float(c.D));
    const int cuts[] = {0, c.L / 3, c.L / 2 + 1, c.L};
    std::vector<float> cpu(size_t(c.Hkv) * c.L, 0.0f);
    cuda::DeviceBuffer dq = to_device(q16), dmma = to_device(cpu), df32 = to_device(cpu),
                       stats(cuda::look_m_row_stats_bytes(c.L, c.H, c.L));
    const size_t row = size_t(c.H) * c.D * dtype_size(c.dt);
    auto all = [&](int first, int R) {
      accumulate_attention_scores(q.data() + size_t(first) * c.H * c.D, R, c.H, sc.kv, sc.table.data(), first, scale,
                                  cpu.data(), c.L);
      for (int i = 0; i < 2; ++i)
        cuda::look_m_accumulate_scores(dq.as<uint8_t>() + first * row, c.dt, R, c.H, sc.dkv, sc.dtable.as<int32_t>(),
                                       first, scale, stats.get(), (i == 0 ? dmma : df32).as<float>(), c.L, nullptr,
                                       i == 0 ? cuda::LookMSearch::Auto : cuda::LookMSearch::F32);
    };
    for (int i = 0; i < 3; ++i) all(cuts[i], cuts[i + 1] - cuts[i]);
    const int W = std::min(64, c.L);
    all(c.L - W, W);
    const std::vector<float> mma = to_host<float>(dmma, cpu.size()), f32 = to_host<float>(df32, cpu.size());
    double worst_f32 = 0, worst_cpu = 0;
    for (size_t i = 0; i < cpu.size(); ++i) {
      worst_f32 = std::max(worst_f32, std::abs(double(mma[i]) - f32[i]) / std::max(1.0, std::abs(double(f32[i]))));
      worst_cpu = std::max(worst_cpu, std::abs(double(mma[i]) - cpu[i]) / std::max(1.0, std::abs(double(cpu[i]))));
    }
    EXPECT_LE(worst_f32, 2e-5);
    EXPECT_LE(worst_cpu, 2e-5);
    // Kept sets (text prior over an image span) from the tensor-core scores against the CPU's.
    const LookMParams p;
    const LookMBudget budget = look_m_budget(p, c.L);
    std::vector<uint8_t> is_text(c.L, 1);
    for (int j = c.L / 10; j < c.L * 9 / 10; ++j) is_text[j] = 0;
    int differ = 0, far = 0;
    for (int h = 0; h < c.Hkv; ++h) {
      const float* sc_cpu = cpu.data() + size_t(h) * c.L;
      const auto want = select_kept_tokens(sc_cpu, is_text.data(), c.L, p, budget);
      const auto got = select_kept_tokens(mma.data() + size_t(h) * c.L, is_text.data(), c.L, p, budget);
      std::vector<int32_t> d;
      std::set_symmetric_difference(want.begin(), want.end(), got.begin(), got.end(), std::back_inserter(d));
      differ += int(d.size());
      // A swapped position must sit at the CPU's boundary: within 1e-5 of a position the other side chose.
      for (int32_t j : d)
        far += std::none_of(d.begin(), d.end(), [&](int32_t o) {
          return o != j && is_text[o] == is_text[j] && std::abs(sc_cpu[o] - sc_cpu[j]) <= 1e-5f * std::abs(sc_cpu[j]);
        });
    }
    EXPECT_EQ(far, 0);
    std::printf("L=%d: tensor-core scores rel diff %.2e vs f32, %.2e vs CPU; kept positions differing from the CPU's %d\n",
                c.L, worst_f32, worst_cpu, differ);
  }
}

// The device's kept-token choice against select_kept_tokens: every segment's set equal, with many
// exact ties (scores quantized to a few values, -0 beside +0), text prior and sinks, and budgets
// from one token to most of the prompt.
TEST(CudaLookM, DeviceSelectionMatchesTheCpu) {
  VLM_REQUIRE_GPU();
  struct Sel { int L, segments, M, N, levels; const char* mode; };
  const Sel cases[] = {{37, 3, 3, 3, 4, "text-prior-pivot"}, {1000, 8, 100, 100, 7, "pivot"},
                       {1000, 5, 0, 1, 2, "text-prior-h2o"},   {4097, 4, 409, 409, 1000000, "weighted"},
                       {300, 6, 10, 280, 3, "avg"},              {20000, 2, 2000, 2000, 50, "text-prior-avg"}};
  for (const Sel& c : cases) {
    SCOPED_TRACE(::testing::Message() << "L=" << c.L << " M=" << c.M << " N=" << c.N << " " << c.mode);
    const LookMParams p = *look_m_mode_from_name(c.mode);
    std::mt19937 rng(c.L + c.N);
    std::uniform_int_distribution<int> level(0, c.levels - 1);
    std::vector<float> scores(size_t(c.segments) * c.L);
    for (float& x : scores) {
      const int v = level(rng);
      x = v == 0 ? (rng() % 2 ? -0.0f : 0.0f) : float(v - c.levels / 2) * 0.125f;
    }
    std::vector<uint8_t> is_text(c.L, 1);
    for (int j = c.L / 4; j < c.L * 3 / 4; ++j) is_text[j] = rng() % 10 == 0;  // text interleaved in media
    cuda::DeviceBuffer ds = to_device(scores), dt = to_device(is_text), dk(size_t(c.segments) * (c.M + c.N) * 4);
    cuda::look_m_select_kept(ds.as<float>(), c.L, c.segments, dt.as<uint8_t>(), c.L, c.M, c.N, p.text_prior,
                             p.num_sink_tokens, dk.as<int32_t>(), nullptr);
    const std::vector<int32_t> got = to_host<int32_t>(dk, size_t(c.segments) * (c.M + c.N));
    const LookMBudget budget{c.M, c.N};
    for (int i = 0; i < c.segments; ++i) {
      const auto want = select_kept_tokens(scores.data() + size_t(i) * c.L, is_text.data(), c.L, p, budget);
      ASSERT_EQ(want.size(), size_t(c.M + c.N));
      EXPECT_TRUE(std::equal(want.begin(), want.end(), got.begin() + size_t(i) * (c.M + c.N))) << "segment " << i;
    }
  }
}

}  // namespace
}  // namespace vlm
