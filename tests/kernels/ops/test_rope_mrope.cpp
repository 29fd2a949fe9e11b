// kernels/ops/rope.h, M-RoPE: cos_sin_table_mrope() against a naive per-element loop written
// from the formulas (the contiguous Qwen2-VL sections and the interleaved Qwen3-VL mapping of
// transformers' apply_interleaved_mrope), bit for bit, for the released [24, 20, 20] / [16, 24,
// 24] sections and tiny ones; the two layouts differ; bad sections are refused.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <vector>

#include "kernels/ops/rope.h"

namespace vlm {
namespace {

RopeConfig mrope_config(int head_dim, double theta, std::vector<int> sections, bool interleaved) {
  RopeConfig c;
  c.head_dim = head_dim;
  c.theta = theta;
  c.mrope_section = std::move(sections);
  c.mrope_interleaved = interleaved;
  return c;
}

// The axis of frequency j written straight from the formulas (RopeConfig::mrope_interleaved):
// interleaved - transformers starts from the t frequencies and overwrites slice(1, 3*s1, 3) with
// h and slice(2, 3*s2, 3) with w; contiguous - [0, s0) t, [s0, s0+s1) h, the rest w.
int naive_axis(const std::vector<int>& s, int j, bool interleaved) {
  if (interleaved) {
    int axis = 0;
    for (int k = 1; k < 3 * s[1]; k += 3)
      if (k == j) axis = 1;
    for (int k = 2; k < 3 * s[2]; k += 3)
      if (k == j) axis = 2;
    return axis;
  }
  int end = 0;
  for (int a = 0; a < 3; ++a) {
    end += s[static_cast<size_t>(a)];
    if (j < end) return a;
  }
  return 2;
}

// table[t, 0:half] = cos, [half:2 half] = sin of f32(pos[axis]) * inv_freq[j], each element on
// its own (the same f32 product and double trig as rope.cpp's documented arithmetic).
std::vector<float> naive_table(const RotaryEmbedding& rope, const RopeConfig& c, const std::vector<int32_t>& pos,
                               int64_t T) {
  const int half = c.head_dim / 2;
  std::vector<float> out(static_cast<size_t>(T * 2 * half));
  for (int64_t t = 0; t < T; ++t)
    for (int j = 0; j < half; ++j) {
      const int a = naive_axis(c.mrope_section, j, c.mrope_interleaved);
      const float angle = static_cast<float>(pos[static_cast<size_t>(t * 3 + a)]) * rope.inv_freq()[static_cast<size_t>(j)];
      out[static_cast<size_t>(t * 2 * half + j)] = static_cast<float>(std::cos(static_cast<double>(angle)));
      out[static_cast<size_t>(t * 2 * half + half + j)] = static_cast<float>(std::sin(static_cast<double>(angle)));
    }
  return out;
}

// Positions whose three axes all differ, so each frequency's axis shows in the table.
std::vector<int32_t> distinct_positions(int64_t T, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> d(0, 5000);
  std::vector<int32_t> p(static_cast<size_t>(3 * T));
  for (int64_t t = 0; t < T; ++t) {
    p[static_cast<size_t>(3 * t)] = d(rng);
    p[static_cast<size_t>(3 * t + 1)] = p[static_cast<size_t>(3 * t)] + 1 + d(rng) % 97;
    p[static_cast<size_t>(3 * t + 2)] = p[static_cast<size_t>(3 * t + 1)] + 1 + d(rng) % 89;
  }
  return p;
}

struct Case {
  int head_dim;
  std::vector<int> sections;
};

const std::vector<Case>& cases() {
  static const std::vector<Case> c = {
      {128, {24, 20, 20}},  // Qwen3-VL-8B / Qwen2.5-VL text
      {128, {16, 24, 24}},  // Qwen2-VL-7B
      {16, {2, 3, 3}},      // tiny
      {12, {2, 2, 2}},      // tiny, all equal
      {10, {1, 2, 2}},      // interleaved h/w slots reach past 3 * s0
      {8, {4, 0, 0}},       // text-only sections
  };
  return c;
}

TEST(RopeMrope, TableMatchesNaiveLoopBitwise) {
  constexpr int64_t T = 37;  // more than one thread-pool grain for small heads
  for (const Case& k : cases())
    for (bool inter : {false, true}) {
      const RopeConfig c = mrope_config(k.head_dim, 1e6, k.sections, inter);
      const RotaryEmbedding rope(c);
      const std::vector<int32_t> pos = distinct_positions(T, 7u + static_cast<uint32_t>(k.head_dim));
      std::vector<float> got(static_cast<size_t>(T * k.head_dim));
      rope.cos_sin_table_mrope(pos.data(), T, got.data());
      const std::vector<float> want = naive_table(rope, c, pos, T);
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_EQ(got[i], want[i]) << "head_dim " << k.head_dim << " interleaved " << inter << " element " << i;
      for (int j = 0; j < k.head_dim / 2; ++j)
        EXPECT_EQ(rope.mrope_axis(j), naive_axis(k.sections, j, inter)) << j;
    }
}

TEST(RopeMrope, InterleavedLayoutOfTheReleasedSections) {
  // [24, 20, 20] over 64 frequencies: THW repeated 20 times (j < 60), then T T T T.
  const RotaryEmbedding rope(mrope_config(128, 5e6, {24, 20, 20}, true));
  for (int j = 0; j < 60; ++j) EXPECT_EQ(rope.mrope_axis(j), j % 3) << j;
  for (int j = 60; j < 64; ++j) EXPECT_EQ(rope.mrope_axis(j), 0) << j;
  int count[3] = {0, 0, 0};
  for (int j = 0; j < 64; ++j) ++count[rope.mrope_axis(j)];
  EXPECT_EQ(count[0], 24);  // each axis keeps as many frequencies as its section
  EXPECT_EQ(count[1], 20);
  EXPECT_EQ(count[2], 20);
}

TEST(RopeMrope, ContiguousAndInterleavedDiffer) {
  const RotaryEmbedding a(mrope_config(128, 5e6, {24, 20, 20}, false));
  const RotaryEmbedding b(mrope_config(128, 5e6, {24, 20, 20}, true));
  EXPECT_EQ(a.mrope_axis(1), 0);
  EXPECT_EQ(b.mrope_axis(1), 1);
  const std::vector<int32_t> pos = distinct_positions(4, 3u);
  std::vector<float> ta(4 * 128), tb(4 * 128);
  a.cos_sin_table_mrope(pos.data(), 4, ta.data());
  b.cos_sin_table_mrope(pos.data(), 4, tb.data());
  EXPECT_NE(ta, tb);
  // With the three axes equal (text tokens) both are the 1-D table.
  const std::vector<int32_t> same = {5, 5, 5, 900, 900, 900};
  const std::vector<int32_t> flat = {5, 900};
  std::vector<float> ca(2 * 128), cb(2 * 128), c1(2 * 128);
  a.cos_sin_table_mrope(same.data(), 2, ca.data());
  b.cos_sin_table_mrope(same.data(), 2, cb.data());
  a.cos_sin_table(flat.data(), 2, c1.data());
  EXPECT_EQ(ca, c1);
  EXPECT_EQ(cb, c1);
}

TEST(RopeMrope, BadSectionsAreRefused) {
  std::vector<float> table(128);
  const std::vector<int32_t> pos = {1, 2, 3};
  const RotaryEmbedding wrong_sum(mrope_config(128, 1e6, {24, 20, 19}, true));
  EXPECT_THROW(wrong_sum.cos_sin_table_mrope(pos.data(), 1, table.data()), std::exception);
  const RotaryEmbedding two(mrope_config(128, 1e6, {32, 32}, false));
  EXPECT_THROW(two.cos_sin_table_mrope(pos.data(), 1, table.data()), std::exception);
  const RotaryEmbedding negative(mrope_config(8, 1e6, {6, -1, -1}, false));
  EXPECT_THROW(negative.cos_sin_table_mrope(pos.data(), 1, table.data()), std::exception);
}

}  // namespace
}  // namespace vlm
