// kernels/ops/rope.h: inv_freq per rope type against formulas computed here in double and against
// values recorded from transformers; apply() against apply_ref() bit for bit over a table of
// shapes; rotation properties.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <numbers>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/core/check.h"
#include "kernels/ops/rope.h"
#include "tests/kernels/rope_hf_golden.h"

namespace vlm {
namespace {

constexpr double kPi = std::numbers::pi;

float from_bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

std::vector<float> randn(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

RopeConfig make(RopeType type, int head_dim, double theta, int rotary_dim = 0) {
  RopeConfig c;
  c.type = type;
  c.head_dim = head_dim;
  c.rotary_dim = rotary_dim;
  c.theta = theta;
  return c;
}

RopeConfig llama3_config() {  // Llama 3.1's published rope_scaling, with head_dim 64
  RopeConfig c = make(RopeType::Llama3, 64, 500000.0);
  c.factor = 8.0;
  c.low_freq_factor = 1.0;
  c.high_freq_factor = 4.0;
  c.original_max_position = 8192;
  return c;
}

RopeConfig yarn_config() {  // Qwen2.5's long-context rope_scaling, with head_dim 64
  RopeConfig c = make(RopeType::Yarn, 64, 1e6);
  c.factor = 4.0;
  c.original_max_position = 32768;
  return c;
}

// theta^(-2i/dim) in double.
double plain_inv_freq(double theta, int dim, int i) { return std::pow(theta, -2.0 * i / dim); }

void expect_inv_freq_near(const RotaryEmbedding& rope, const std::vector<double>& want,
                          const std::string& what) {
  ASSERT_EQ(rope.inv_freq().size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(rope.inv_freq()[i], want[i], 2e-6 * want[i]) << what << " i=" << i;
}

void expect_inv_freq_bits(const RotaryEmbedding& rope, const uint32_t* golden, size_t n,
                          const std::string& what) {
  ASSERT_EQ(rope.inv_freq().size(), n) << what;
  for (size_t i = 0; i < n; ++i)
    EXPECT_EQ(rope.inv_freq()[i], from_bits(golden[i])) << what << " i=" << i;
}

TEST(Rope, InvFreqMatchesTransformersBitwise) {
  using namespace rope_golden;
  RotaryEmbedding def(make(RopeType::Default, 128, 10000.0));
  expect_inv_freq_bits(def, kDefault128InvFreq, std::size(kDefault128InvFreq), "default");
  EXPECT_EQ(def.attention_scaling(), 1.0f);

  RopeConfig lin = make(RopeType::Linear, 64, 10000.0);
  lin.factor = 2.0;
  expect_inv_freq_bits(RotaryEmbedding(lin), kLinear64InvFreq, std::size(kLinear64InvFreq),
                       "linear");

  RotaryEmbedding l3(llama3_config());
  expect_inv_freq_bits(l3, kLlama3InvFreq, std::size(kLlama3InvFreq), "llama3");
  EXPECT_EQ(l3.attention_scaling(), 1.0f);

  RotaryEmbedding yarn(yarn_config());
  expect_inv_freq_bits(yarn, kYarnInvFreq, std::size(kYarnInvFreq), "yarn");
  EXPECT_EQ(yarn.attention_scaling(), static_cast<float>(1.138629436111989));

  RopeConfig nt = yarn_config();
  nt.truncate = false;
  nt.mscale = 1.0;
  nt.mscale_all_dim = 0.5;
  RotaryEmbedding yarn_nt(nt);
  expect_inv_freq_bits(yarn_nt, kYarnNoTruncateInvFreq, std::size(kYarnNoTruncateInvFreq),
                       "yarn no truncate");
  EXPECT_EQ(yarn_nt.attention_scaling(), static_cast<float>(1.0648216253695715));
}

TEST(Rope, InvFreqDefaultAndLinearFormulas) {
  for (int dim : {128, 64, 80, 2}) {
    std::vector<double> want;
    for (int i = 0; i < dim / 2; ++i) want.push_back(plain_inv_freq(10000.0, dim, i));
    expect_inv_freq_near(RotaryEmbedding(make(RopeType::Default, dim, 10000.0)), want,
                         "default dim=" + std::to_string(dim));
  }
  // Partial rotary: the frequencies come from rotary_dim, not head_dim.
  std::vector<double> partial;
  for (int i = 0; i < 16; ++i) partial.push_back(plain_inv_freq(10000.0, 32, i));
  expect_inv_freq_near(RotaryEmbedding(make(RopeType::Default, 64, 10000.0, 32)), partial,
                       "partial 32 of 64");
  // rotary_dim 0 means the whole head.
  EXPECT_EQ(RotaryEmbedding(make(RopeType::Default, 64, 10000.0)).inv_freq().size(), 32u);

  RopeConfig lin = make(RopeType::Linear, 64, 10000.0);
  lin.factor = 2.5;
  std::vector<double> scaled;
  for (int i = 0; i < 32; ++i) scaled.push_back(plain_inv_freq(10000.0, 64, i) / 2.5);
  expect_inv_freq_near(RotaryEmbedding(lin), scaled, "linear");
}

TEST(Rope, InvFreqLlama3Formula) {
  const RopeConfig c = llama3_config();
  const double low_wavelen = 8192.0 / 1.0, high_wavelen = 8192.0 / 4.0;
  std::vector<double> want;
  int num_high = 0, num_medium = 0, num_low = 0;
  for (int i = 0; i < 32; ++i) {
    const double f = plain_inv_freq(c.theta, 64, i);
    const double wavelen = 2 * kPi / f;
    if (wavelen < high_wavelen) {  // high frequency: kept
      want.push_back(f);
      ++num_high;
    } else if (wavelen > low_wavelen) {  // low frequency: divided by the factor
      want.push_back(f / 8.0);
      ++num_low;
    } else {  // in between: blended
      const double s = (8192.0 / wavelen - 1.0) / (4.0 - 1.0);
      want.push_back((1 - s) * f / 8.0 + s * f);
      ++num_medium;
    }
  }
  // All three bands occur for this config (i = 15..17 are medium), so each branch is tested.
  EXPECT_EQ(num_medium, 3);
  EXPECT_GT(num_high, 0);
  EXPECT_GT(num_low, 0);
  expect_inv_freq_near(RotaryEmbedding(c), want, "llama3");
}

// YaRN inv_freq computed here from the paper's formulas, as transformers applies them.
std::vector<double> yarn_want(const RopeConfig& c, double* low_out, double* high_out) {
  const int dim = c.rotary_dim ? c.rotary_dim : c.head_dim;
  auto correction_dim = [&](double rotations) {
    return dim * std::log(c.original_max_position / (rotations * 2 * kPi)) / (2 * std::log(c.theta));
  };
  double low = correction_dim(c.beta_fast), high = correction_dim(c.beta_slow);
  if (c.truncate) low = std::floor(low), high = std::ceil(high);
  low = std::max(low, 0.0);
  high = std::min(high, dim - 1.0);
  *low_out = low;
  *high_out = high;
  std::vector<double> want;
  for (int i = 0; i < dim / 2; ++i) {
    const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
    const double f = plain_inv_freq(c.theta, dim, i);
    want.push_back(f / c.factor * ramp + f * (1 - ramp));  // extrapolate below low
  }
  return want;
}

TEST(Rope, InvFreqYarnFormula) {
  double low = 0, high = 0;
  const RopeConfig c = yarn_config();
  const std::vector<double> want = yarn_want(c, &low, &high);
  // d(32) = 64 ln(32768 / 64 pi) / (2 ln 1e6) = 11.80 -> 11; d(1) = 19.83 -> 20.
  EXPECT_EQ(low, 11.0);
  EXPECT_EQ(high, 20.0);
  RotaryEmbedding rope(c);
  expect_inv_freq_near(rope, want, "yarn");
  // Below `low` the frequencies are kept (extrapolated), above `high` divided by the factor.
  EXPECT_NEAR(rope.inv_freq()[5], plain_inv_freq(1e6, 64, 5), 1e-6 * rope.inv_freq()[5]);
  EXPECT_NEAR(rope.inv_freq()[31], plain_inv_freq(1e6, 64, 31) / 4.0, 1e-6 * rope.inv_freq()[31]);
  EXPECT_NEAR(rope.attention_scaling(), 0.1 * std::log(4.0) + 1.0, 1e-7);

  RopeConfig nt = c;
  nt.truncate = false;
  const std::vector<double> want_nt = yarn_want(nt, &low, &high);
  EXPECT_NEAR(low, 11.7979, 1e-3);
  EXPECT_NEAR(high, 19.8261, 1e-3);
  expect_inv_freq_near(RotaryEmbedding(nt), want_nt, "yarn no truncate");
}

TEST(Rope, YarnAttentionFactor) {
  auto factor_of = [](double factor, double attention, double mscale, double all_dim) {
    RopeConfig c = yarn_config();
    c.factor = factor;
    c.attention_factor = attention;
    c.mscale = mscale;
    c.mscale_all_dim = all_dim;
    return RotaryEmbedding(c).attention_scaling();
  };
  const double l4 = std::log(4.0);
  EXPECT_NEAR(factor_of(4, 0, 0, 0), 0.1 * l4 + 1, 1e-7);
  EXPECT_EQ(factor_of(4, 0.75, 0, 0), 0.75f);                                   // configured
  EXPECT_NEAR(factor_of(4, 0, 1.0, 0.5), (0.1 * l4 + 1) / (0.05 * l4 + 1), 1e-7);  // DeepSeek
  EXPECT_EQ(factor_of(4, 0, 0.707, 0.707), 1.0f);  // equal mscales cancel
  EXPECT_NEAR(factor_of(4, 0, 0.707, 0), 0.1 * l4 + 1, 1e-7);  // mscale alone is ignored
  EXPECT_EQ(factor_of(1, 0, 0, 0), 1.0f);                      // no scaling at factor <= 1
}

TEST(Rope, ApplyMatchesTransformersOutput) {
  // The input of tools/fixtures/rope_golden.py: x[h, s, d] = ((j*37) % 101 - 50) / 16,
  // j = (h*5 + s)*64 + d; head 0 only. Our layout is [T, H, D].
  RotaryEmbedding rope(yarn_config());
  const int D = 64, T = 5;
  const int32_t positions[T] = {0, 1, 7, 1000, 131071};
  std::vector<float> q(T * D);
  for (int s = 0; s < T; ++s)
    for (int d = 0; d < D; ++d) q[s * D + d] = static_cast<float>(((s * D + d) * 37 % 101 - 50) / 16.0);
  rope.apply(q.data(), 1, nullptr, 0, positions, T);
  int exact = 0;
  for (int i = 0; i < T * D; ++i) {
    const float want = from_bits(rope_golden::kYarnQHead0[i]);
    // Only cos/sin may differ, by an ulp: PyTorch's f32 cos/sin against our rounded double ones.
    EXPECT_NEAR(q[i], want, 3e-7 * std::max(1.0f, std::fabs(want))) << i;
    exact += q[i] == want;
  }
  EXPECT_GT(exact, T * D * 9 / 10);
}

TEST(Rope, ApplyMatchesRefBitwise) {
  struct Heads { int64_t q, k; };
  const Heads heads[] = {{1, 1}, {3, 1}, {7, 7}, {14, 2}, {32, 8}};
  struct Dims { int head, rotary; };
  const Dims dims[] = {{64, 64}, {128, 128}, {80, 40}, {96, 64}, {2, 2}};
  std::vector<RopeConfig> configs;
  for (const Dims& d : dims) {
    for (RopeType t : {RopeType::Default, RopeType::Linear, RopeType::Llama3, RopeType::Yarn}) {
      RopeConfig c = t == RopeType::Llama3 ? llama3_config()
                     : t == RopeType::Yarn ? yarn_config()
                                           : make(t, 0, 10000.0);
      if (t == RopeType::Linear) c.factor = 3.0;
      c.head_dim = d.head;
      c.rotary_dim = d.rotary;
      configs.push_back(c);
    }
  }
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> pos_dist(0, 200000);
  for (const RopeConfig& c : configs) {
    RotaryEmbedding rope(c);
    for (const Heads& h : heads) {
      for (int64_t T : {1, 2, 5, 33}) {
        std::vector<int32_t> pos(static_cast<size_t>(T));
        for (auto& p : pos) p = pos_dist(rng);
        pos[0] = 0;
        std::vector<float> q = randn(T * h.q * c.head_dim, 11), k = randn(T * h.k * c.head_dim, 12);
        std::vector<float> q_ref = q, k_ref = k;
        rope.apply(q.data(), h.q, k.data(), h.k, pos.data(), T);
        rope.apply_ref(q_ref.data(), h.q, k_ref.data(), h.k, pos.data(), T);
        const std::string what = std::string(rope_type_name(c.type)) + " D=" +
                                 std::to_string(c.head_dim) + "/" + std::to_string(c.rotary_dim) +
                                 " H=" + std::to_string(h.q) + "/" + std::to_string(h.k) +
                                 " T=" + std::to_string(T);
        ASSERT_EQ(0, std::memcmp(q.data(), q_ref.data(), q.size() * 4)) << "q " << what;
        ASSERT_EQ(0, std::memcmp(k.data(), k_ref.data(), k.size() * 4)) << "k " << what;
        // The cached-table path gives the same bits.
        const int R = c.rotary_dim;
        std::vector<float> table(static_cast<size_t>(T * R));
        rope.cos_sin_table(pos.data(), T, table.data());
        std::vector<float> q_c = randn(T * h.q * c.head_dim, 11), k_c = randn(T * h.k * c.head_dim, 12);
        rope.apply_cached(q_c.data(), h.q, k_c.data(), h.k, table.data(), T);
        ASSERT_EQ(0, std::memcmp(q_c.data(), q_ref.data(), q.size() * 4)) << "cached q " << what;
        ASSERT_EQ(0, std::memcmp(k_c.data(), k_ref.data(), k.size() * 4)) << "cached k " << what;
      }
    }
  }
}

TEST(Rope, RotationProperties) {
  for (RopeConfig c : {make(RopeType::Default, 80, 10000.0, 48), llama3_config(), yarn_config()}) {
    RotaryEmbedding rope(c);
    const int D = c.head_dim, R = c.rotary_dim ? c.rotary_dim : D, half = R / 2, H = 3, T = 4;
    const int32_t pos[T] = {0, 1, 4097, 123456};
    const std::vector<float> x = randn(T * H * D, 21);
    std::vector<float> y = x;
    rope.apply(y.data(), H, nullptr, 0, pos, T);
    const double scale = rope.attention_scaling();
    for (int t = 0; t < T; ++t) {
      for (int h = 0; h < H; ++h) {
        const float* a = x.data() + (t * H + h) * D;
        const float* b = y.data() + (t * H + h) * D;
        if (pos[t] == 0 && scale == 1.0) {  // position 0 is the identity, bit for bit
          EXPECT_EQ(0, std::memcmp(a, b, D * 4)) << rope_type_name(c.type);
        }
        for (int i = 0; i < half; ++i) {  // each pair keeps its norm (times the scaling)
          const double n0 = std::hypot(a[i], a[i + half]), n1 = std::hypot(b[i], b[i + half]);
          EXPECT_NEAR(n1, n0 * scale, 1e-6 * (n0 + 1e-3)) << rope_type_name(c.type) << " i=" << i;
        }
        for (int i = R; i < D; ++i) EXPECT_EQ(a[i], b[i]) << "pass-through dim " << i;
      }
    }
  }
}

TEST(Rope, MatchesExplicitRotationInDouble) {
  RotaryEmbedding rope(llama3_config());
  const int D = 64, half = 32;
  const int32_t p = 777;
  const std::vector<float> x = randn(D, 31);
  std::vector<float> y = x;
  rope.apply(y.data(), 1, nullptr, 0, &p, 1);
  for (int i = 0; i < half; ++i) {
    const double angle = static_cast<float>(p) * rope.inv_freq()[i];  // f32 angle, as HF
    const double c = std::cos(angle), s = std::sin(angle);
    const double tol = 1e-6 * (std::fabs(x[i]) + std::fabs(x[i + half])) + 1e-7;
    EXPECT_NEAR(y[i], x[i] * c - x[i + half] * s, tol) << i;
    EXPECT_NEAR(y[i + half], x[i + half] * c + x[i] * s, tol) << i;
  }
}

TEST(Rope, ScoresDependOnlyOnRelativePosition) {
  // <R(m) q, R(n) k> == <R(m + s) q, R(n + s) k>: the point of rotary embeddings.
  RotaryEmbedding rope(make(RopeType::Default, 64, 10000.0));
  const std::vector<float> q0 = randn(64, 41), k0 = randn(64, 42);
  auto score = [&](int32_t m, int32_t n) {
    std::vector<float> q = q0, k = k0;
    rope.apply(q.data(), 1, nullptr, 0, &m, 1);
    rope.apply(k.data(), 1, nullptr, 0, &n, 1);
    double dot = 0;
    for (int i = 0; i < 64; ++i) dot += static_cast<double>(q[i]) * k[i];
    return dot;
  };
  double norms = 0;
  for (int i = 0; i < 64; ++i) norms += std::fabs(q0[i] * k0[i]);
  for (auto [m, n, s] : {std::tuple{5, 2, 10}, std::tuple{0, 9, 100}, std::tuple{30, 30, 7}}) {
    EXPECT_NEAR(score(m, n), score(m + s, n + s), 1e-4 * norms) << m << " " << n << " " << s;
  }
  EXPECT_GT(std::fabs(score(5, 2) - score(5, 3)), 1e-3 * norms);  // and on the distance
}

TEST(Rope, RejectsBadConfigs) {
  EXPECT_THROW(RotaryEmbedding(make(RopeType::Default, 0, 10000.0)), InternalError);
  EXPECT_THROW(RotaryEmbedding(make(RopeType::Default, 64, 10000.0, 33)), InternalError);
  EXPECT_THROW(RotaryEmbedding(make(RopeType::Default, 64, 10000.0, 66)), InternalError);
  RopeConfig no_orig = llama3_config();
  no_orig.original_max_position = 0;
  EXPECT_THROW(RotaryEmbedding{no_orig}, InternalError);
  RopeConfig bad_bands = llama3_config();
  bad_bands.high_freq_factor = 1.0;
  EXPECT_THROW(RotaryEmbedding{bad_bands}, InternalError);
  RopeConfig yarn_no_orig = yarn_config();
  yarn_no_orig.original_max_position = 0;
  EXPECT_THROW(RotaryEmbedding{yarn_no_orig}, InternalError);
}

}  // namespace
}  // namespace vlm
