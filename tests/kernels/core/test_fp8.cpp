// FP8 E4M3 on the host (kernels/core/fp8.h): every code's value, round-to-nearest-even at each
// midpoint, saturation, the per-row quantizer's scale and error bound, the block dequantizer,
// and the error of requantizing a 128x128-block checkpoint per output channel (what the GPU does
// with such checkpoints, cuda_fp8_linear.h) measured on random blocks of unequal scales.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/core/fp8.h"

namespace vlm {
namespace {

TEST(Fp8E4M3, CodesDecodeToTheirValues) {
  EXPECT_EQ(fp8_e4m3_to_f32(0x00), 0.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x01), std::ldexp(1.0f, -9));   // smallest subnormal
  EXPECT_EQ(fp8_e4m3_to_f32(0x07), 7 * std::ldexp(1.0f, -9));
  EXPECT_EQ(fp8_e4m3_to_f32(0x08), std::ldexp(1.0f, -6));   // smallest normal
  EXPECT_EQ(fp8_e4m3_to_f32(0x38), 1.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x3c), 1.5f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x7e), 448.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0xfe), -448.0f);
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32(0x7f)));
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32(0xff)));
  // Increasing over the positive codes; every finite code encodes back to itself.
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7f) == 0x7f) continue;
    const float v = fp8_e4m3_to_f32(static_cast<uint8_t>(c));
    EXPECT_EQ(f32_to_fp8_e4m3(v), c) << "code " << c;
    if (c > 0 && c < 0x7f) EXPECT_GT(v, fp8_e4m3_to_f32(static_cast<uint8_t>(c - 1))) << "code " << c;
  }
}

TEST(Fp8E4M3, RoundsToNearestEvenAndSaturates) {
  for (int c = 0; c < 0x7e; ++c) {
    const float lo = fp8_e4m3_to_f32(static_cast<uint8_t>(c)), hi = fp8_e4m3_to_f32(static_cast<uint8_t>(c + 1));
    const float mid = (lo + hi) / 2;  // exact in f32
    EXPECT_EQ(f32_to_fp8_e4m3(mid), c % 2 == 0 ? c : c + 1) << "midpoint above code " << c;
    EXPECT_EQ(f32_to_fp8_e4m3(std::nextafter(mid, 0.0f)), c) << "just below the midpoint above " << c;
    EXPECT_EQ(f32_to_fp8_e4m3(std::nextafter(mid, 1e9f)), c + 1) << "just above the midpoint above " << c;
    EXPECT_EQ(f32_to_fp8_e4m3(-mid), (c % 2 == 0 ? c : c + 1) | 0x80) << "negative midpoint above " << c;
  }
  EXPECT_EQ(f32_to_fp8_e4m3(460.0f), 0x7e);
  EXPECT_EQ(f32_to_fp8_e4m3(1e30f), 0x7e);
  EXPECT_EQ(f32_to_fp8_e4m3(-INFINITY), 0xfe);
  EXPECT_EQ(f32_to_fp8_e4m3(NAN), 0x7f);
  EXPECT_EQ(f32_to_fp8_e4m3(std::ldexp(1.0f, -11)), 0x00);  // below half the smallest subnormal
}

TEST(Fp8E4M3, RowQuantizerScalesEachRowToItsMaximum) {
  const int64_t N = 5, K = 300;
  std::mt19937 rng(3);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> w(N * K);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) w[n * K + k] = n == 2 ? 0.0f : d(rng) * std::ldexp(1.0f, static_cast<int>(3 * n) - 6);
  std::vector<uint8_t> q(N * K);
  std::vector<float> scale(N), back(N * K);
  quantize_fp8_rows(w.data(), N, K, q.data(), scale.data());
  dequantize_fp8_rows(q.data(), scale.data(), N, K, back.data());
  for (int64_t n = 0; n < N; ++n) {
    float amax = 0;
    for (int64_t k = 0; k < K; ++k) amax = std::max(amax, std::fabs(w[n * K + k]));
    if (n == 2) {
      EXPECT_EQ(scale[n], 1.0f);
      for (int64_t k = 0; k < K; ++k) EXPECT_EQ(back[n * K + k], 0.0f);
      continue;
    }
    EXPECT_EQ(scale[n], amax / 448.0f) << "row " << n;
    bool hit_max = false;
    for (int64_t k = 0; k < K; ++k) {
      const float x = w[n * K + k], y = back[n * K + k];
      hit_max |= (q[n * K + k] & 0x7f) == 0x7e;
      // Half a unit in the last place: 2^-4 relative for normal values, 2^-10 * scale below 2^-6.
      EXPECT_LE(std::fabs(y - x), std::max(std::fabs(x) * 0.0625f, scale[n] * std::ldexp(1.0f, -10)) * 1.0001f)
          << "row " << n << " k " << k;
    }
    EXPECT_TRUE(hit_max) << "row " << n << ": its largest element is 448 * scale";
  }
}

TEST(Fp8E4M3, BlockDequantizationUsesEachBlocksScale) {
  const int64_t N = 3, K = 5, bn = 2, bk = 2;  // blocks [2, 3] (the last ones partial)
  std::vector<uint8_t> q(N * K);
  for (int64_t i = 0; i < N * K; ++i) q[i] = static_cast<uint8_t>(0x30 + i);
  const std::vector<float> s = {1.0f, 2.0f, 4.0f, 0.5f, 0.25f, 8.0f};
  std::vector<float> out(N * K);
  dequantize_fp8_blocks(q.data(), s.data(), bn, bk, N, K, out.data());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k)
      EXPECT_EQ(out[n * K + k], fp8_e4m3_to_f32(q[n * K + k]) * s[(n / 2) * 3 + k / 2]) << n << "," << k;
}

// A 128x128-block checkpoint requantized per output channel (the GPU's choice): the error against
// the stored (exact) values, per row relative to the row's largest value. Blocks along a row get
// scales 2^0 .. 2^-6 apart, so small blocks fall to coarser steps of the row's scale.
TEST(Fp8E4M3, BlockToChannelRequantizationError) {
  const int64_t N = 256, K = 512, b = 128;
  std::mt19937 rng(11);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::uniform_int_distribution<int> e(-6, 0);
  const int64_t NB = N / b, KB = K / b;
  std::vector<float> bs(NB * KB);
  for (float& x : bs) x = std::ldexp(1.0f, e(rng)) / 448.0f;
  std::vector<uint8_t> q(N * K);
  for (uint8_t& x : q) x = f32_to_fp8_e4m3(d(rng) * 100.0f);
  std::vector<float> exact(N * K), back(N * K), scale(N);
  dequantize_fp8_blocks(q.data(), bs.data(), b, b, N, K, exact.data());
  std::vector<uint8_t> q2(N * K);
  quantize_fp8_rows(exact.data(), N, K, q2.data(), scale.data());
  dequantize_fp8_rows(q2.data(), scale.data(), N, K, back.data());
  double worst = 0, sum_sq = 0, ref_sq = 0;
  for (int64_t n = 0; n < N; ++n) {
    float amax = 0;
    for (int64_t k = 0; k < K; ++k) amax = std::max(amax, std::fabs(exact[n * K + k]));
    for (int64_t k = 0; k < K; ++k) {
      const double err = std::fabs(double(back[n * K + k]) - exact[n * K + k]);
      worst = std::max(worst, err / amax);
      sum_sq += err * err;
      ref_sq += double(exact[n * K + k]) * exact[n * K + k];
    }
  }
  const double rel_rms = std::sqrt(sum_sq / ref_sq);
  std::printf("[ fp8 block->channel ] max error / row max %.4g, relative RMS error %.4g\n", worst, rel_rms);
  // Half an E4M3 step of the row's largest binade at most (2^-4 of 448 * scale relative to the row max).
  EXPECT_LE(worst, 0.0625);
  EXPECT_LE(rel_rms, 0.05);
  EXPECT_GT(rel_rms, 0.0);  // the requantization is not free: the figure above is a real error
}

}  // namespace
}  // namespace vlm
