// SinkRouter calibration math (tools/vlm-calibrate-sink/sink_calibration.h) and its recording run:
// the per-length threshold hits the target skip ratio, the polynomial fit recovers known curves,
// precision / recall / average precision match hand counts, and on planted inputs at several
// lengths (tests/support/planted_sinks.h) the fitted tau(L) recovers the target skip ratio within
// 5 points on fresh inputs for targets 0.4 / 0.6 / 0.8.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/core/check.h"
#include "kernels/sink_router/first_token_kv.h"
#include "kernels/sink_router/first_token_mass.h"
#include "kernels/sink_router/sink_routing.h"
#include "tests/support/decoder_harness.h"
#include "tests/support/planted_sinks.h"
#include "tools/vlm-calibrate-sink/calibration_run.h"
#include "tools/vlm-calibrate-sink/sink_calibration.h"

namespace vlm::testing {
namespace {

TEST(SinkCalibration, ThresholdHitsTheTargetCount) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> uni(-1, 1);
  std::vector<SinkSample> s(1000);
  std::vector<float> scores;
  for (auto& x : s) scores.push_back(x.score = uni(rng));
  for (double t : {0.0, 0.1, 0.4, 0.6, 0.8, 0.999, 1.0}) {
    const double tau = threshold_for_skip_ratio(scores, t);
    EXPECT_DOUBLE_EQ(skip_ratio_at(s, tau), std::round(t * 1000) / 1000) << "target " << t;
  }
  // Ties across the cut: all of the tie or none of it, whichever is closer.
  const std::vector<float> tied = {0.9f, 0.5f, 0.5f, 0.5f, 0.1f};
  std::vector<SinkSample> ts;
  for (float x : tied) ts.push_back({x, 0});
  EXPECT_DOUBLE_EQ(skip_ratio_at(ts, threshold_for_skip_ratio(tied, 0.6)), 0.8);  // k = 3: 4 beats 1
  EXPECT_DOUBLE_EQ(skip_ratio_at(ts, threshold_for_skip_ratio(tied, 0.4)), 0.2);  // k = 2: 1 ties 4, fewer wins
  EXPECT_THROW(threshold_for_skip_ratio({}, 0.5), InternalError);
  EXPECT_THROW(threshold_for_skip_ratio({0.1f}, 1.5), InternalError);
}

TEST(SinkCalibration, PolynomialFitRecoversKnownCurves) {
  const double c[4] = {0.3, 0.8, -1.1, 0.4};
  std::vector<double> x, y;
  for (double xi : {0.125, 0.25, 0.5, 0.75, 1.0}) {
    x.push_back(xi);
    y.push_back(c[0] + xi * (c[1] + xi * (c[2] + xi * c[3])));
  }
  double got[4];
  int degree = 0;
  fit_polynomial(x, y, got, &degree);
  EXPECT_EQ(degree, 3);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(got[i], c[i], 1e-9) << i;
  fit_polynomial({0.5, 1.0}, {0.2, 0.4}, got, &degree);  // two points: the line through them
  EXPECT_EQ(degree, 1);
  EXPECT_NEAR(got[0], 0.0, 1e-12);
  EXPECT_NEAR(got[1], 0.4, 1e-12);
  EXPECT_EQ(got[2], 0.0);
  fit_polynomial({1.0}, {0.7}, got, &degree);
  EXPECT_EQ(degree, 0);
  EXPECT_NEAR(got[0], 0.7, 1e-12);
  EXPECT_THROW(fit_polynomial({0.5, 0.5}, {0.1, 0.2}, got, &degree), InternalError);
}

TEST(SinkCalibration, PrecisionRecallAndAveragePrecisionByHand) {
  // Labels (mass >= 0.5): 1, 0, 1, 0. tau 0.75 predicts the first two.
  const std::vector<SinkSample> s = {{0.9f, 0.8f}, {0.8f, 0.2f}, {0.7f, 0.6f}, {0.1f, 0.1f}};
  const ProxyReliability r = proxy_reliability(s, 0.75, 0.5);
  EXPECT_EQ(r.tp, 1);
  EXPECT_EQ(r.fp, 1);
  EXPECT_EQ(r.fn, 1);
  EXPECT_EQ(r.tn, 1);
  EXPECT_DOUBLE_EQ(r.precision, 0.5);
  EXPECT_DOUBLE_EQ(r.recall, 0.5);
  EXPECT_DOUBLE_EQ(r.f1, 0.5);
  EXPECT_NEAR(r.auprc, 0.5 * 1.0 + 0.5 * 2.0 / 3.0, 1e-12);  // hits at ranks 1 and 3
  EXPECT_DOUBLE_EQ(r.oracle_rate, 0.5);
  EXPECT_NEAR(r.mean_mass_skipped, 0.5, 1e-7);
  EXPECT_NEAR(r.mean_mass_active, 0.35, 1e-7);
  // Top-fraction oracle with target 0.5: the two largest masses (0.8, 0.6) are the sinks.
  const ProxyReliability t = proxy_reliability_top_fraction(s, 0.75, 0.5);
  EXPECT_EQ(t.tp, 1);
  EXPECT_DOUBLE_EQ(t.precision, t.recall);
}

// Planted inputs (tests/support/planted_sinks.h): rows of 4 kv groups x 2 heads (D = 16) against
// one cache of L tokens whose first token is a sink; each (row, group) is aligned with its
// anchor with a strength alpha drawn by `draw` (which may depend on L).
template <typename Draw>
LengthSamples planted_samples(int L, int rows, uint32_t seed, bool with_mass, float anchor_norm, Draw draw) {
  const int Hkv = 4, G = 2, H = Hkv * G, D = 16;
  PlantedCache pc(Hkv, D, 16, L, seed, anchor_norm);
  std::mt19937 rng(seed + 1);
  std::vector<float> ak(Hkv * D), av(Hkv * D), scores(Hkv), mass(H), gm(Hkv);
  load_first_token_kv(pc.kv, pc.table[0], ak.data(), av.data());
  LengthSamples out;
  out.context_len = L;
  for (int r = 0; r < rows; ++r) {
    std::vector<float> alpha(Hkv);
    for (auto& a : alpha) a = draw(rng);
    const std::vector<float> q = pc.query(G, alpha, rng);
    sink_group_scores(q.data(), H, ak.data(), Hkv, D, SinkAggregation::Min, scores.data());
    if (with_mass) {
      first_token_attention_mass(q.data(), H, pc.kv, pc.table.data(), L, 0.25f, mass.data());
      aggregate_group_mass(mass.data(), H, Hkv, SinkAggregation::Min, gm.data());
    }
    for (int g = 0; g < Hkv; ++g) out.samples.push_back({scores[g], with_mass ? gm[g] : 0.0f});
  }
  return out;
}

// alpha ~ U(0, amax(L)) with amax rising then falling with L: the operating point moves
// non-monotonically with length, as in the paper's Appendix A, so one tau would not do.
TEST(SinkCalibration, RecoversTargetSkipOnPlantedInputsAtSeveralLengths) {
  const std::vector<int> lengths = {128, 256, 512, 1024, 2048};
  std::vector<LengthSamples> calib, fresh;
  for (size_t i = 0; i < lengths.size(); ++i) {
    const double x = lengths[i] / 2048.0;
    std::uniform_real_distribution<float> uni(0.0f, static_cast<float>(1.0 + 12.0 * x * (1.0 - x)));
    calib.push_back(planted_samples(lengths[i], 400, 10 + static_cast<uint32_t>(i), true, 4.0f, uni));
    fresh.push_back(planted_samples(lengths[i], 400, 90 + static_cast<uint32_t>(i), false, 4.0f, uni));
  }
  for (double target : {0.4, 0.6, 0.8}) {
    CalibrationOptions opt;
    opt.target_skip = target;
    const CalibrationResult res = calibrate_sink_threshold(calib, opt, SinkRouterConfig{});
    EXPECT_EQ(res.degree, 3);
    EXPECT_EQ(res.config.length_ref, 2048.0);
    for (size_t i = 0; i < lengths.size(); ++i) {
      const LengthReport& r = res.lengths[i];
      SCOPED_TRACE(::testing::Message() << "target " << target << " L " << lengths[i]);
      EXPECT_NEAR(r.skip_at_tau, target, 1.0 / 1600 + 1e-12);  // per-length threshold: exact count
      EXPECT_NEAR(r.skip_at_fit, target, 0.05);
      const double fresh_skip = skip_ratio_at(fresh[i].samples, res.config.threshold(lengths[i]));
      EXPECT_NEAR(fresh_skip, target, 0.05) << "fresh inputs";
      // The proxy ranks the planted sinks first: skipped groups carry more first-token mass,
      // (nearly) every oracle sink is skipped, and the ranking beats chance (AUPRC = oracle rate).
      EXPECT_GT(r.at_fit.mean_mass_skipped, r.at_fit.mean_mass_active);
      if (r.at_fit.oracle_rate > 0) {
        EXPECT_GE(r.at_fit.recall, 0.95);
        EXPECT_GE(r.at_fit.auprc, 2 * r.at_fit.oracle_rate);
      }
      std::printf("  target %.1f L %5d tau %.4f fit %.4f skip@fit %.4f fresh %.4f P %.3f R %.3f AUPRC %.3f oracle %.3f\n",
                  target, lengths[i], r.tau, r.tau_fit, r.skip_at_fit, fresh_skip, r.at_fit.precision,
                  r.at_fit.recall, r.at_fit.auprc, r.at_fit.oracle_rate);
    }
    // The planted operating point peaks mid-range: so does the threshold.
    EXPECT_GT(res.lengths[3].tau, res.lengths[0].tau);
    EXPECT_GT(res.lengths[3].tau, res.lengths[4].tau);
  }
}

// Two populations: half of the (row, group) pairs are planted sinks (alpha = 6: cosine near 1,
// first-token mass near 1), half are not (alpha ~ U(0, 0.5)). Calibrated for a 0.5 skip ratio,
// the proxy's skipped set is the oracle's (mass >= 0.5) with precision and recall >= 0.95.
TEST(SinkCalibration, ProxyFindsPlantedSinksWithHighPrecisionAndRecall) {
  std::vector<LengthSamples> calib;
  uint32_t seed = 200;
  for (int L : {100, 400, 1600}) {
    std::uniform_real_distribution<float> low(0.0f, 0.5f);
    int n = 0;  // every other (row, group) pair is planted: exactly half
    calib.push_back(planted_samples(L, 150, seed++, true, 6.0f,
                                    [&](std::mt19937& rng) { return n++ % 2 ? 6.0f : low(rng); }));
  }
  CalibrationOptions opt;
  opt.target_skip = 0.5;
  const CalibrationResult res = calibrate_sink_threshold(calib, opt, SinkRouterConfig{});
  for (const LengthReport& r : res.lengths) {
    SCOPED_TRACE(::testing::Message() << "L " << r.context_len);
    EXPECT_NEAR(r.at_fit.oracle_rate, 0.5, 0.02);
    EXPECT_GE(r.at_fit.precision, 0.95);
    EXPECT_GE(r.at_fit.recall, 0.95);
    EXPECT_GE(r.at_fit.auprc, 0.95);
    EXPECT_GE(r.top_at_fit.precision, 0.95);
    EXPECT_GT(r.at_fit.mean_mass_skipped, 0.9);
    EXPECT_LT(r.at_fit.mean_mass_active, 0.1);
  }
  EXPECT_GE(res.overall.f1, 0.95);
}

TEST(SinkCalibration, FitPromptToLengthKeepsTheFirstTokenOnce) {
  EXPECT_EQ(fit_prompt_to_length({7, 1, 2, 3}, 9), (std::vector<int32_t>{7, 1, 2, 3, 1, 2, 3, 1, 2}));
  EXPECT_EQ(fit_prompt_to_length({7, 1, 2, 3}, 2), (std::vector<int32_t>{7, 1}));
  EXPECT_THROW(fit_prompt_to_length({7}, 4), InternalError);
}

// The recording run on a fixture model: one sample per (prompt, decode step, routed layer, kv
// group), scores are cosines, masses probabilities; the exact decode is not disturbed (the
// greedy tokens do not depend on the recording).
TEST(SinkCalibration, RecordsEveryRoutedGroupOfTheFixtureDecode) {
  auto dec = LlmDecoder::load(fixture_model_dir("qwen2_tiny"));  // 3 layers, Hkv 2
  const std::vector<std::vector<int32_t>> prompts = {{1, 5, 9, 33, 70}, {2, 100, 200}};
  CalibrationRunOptions opt;
  opt.lengths = {40, 100};
  opt.decode_steps = 3;
  opt.prefill_chunk = 32;
  for (int dense : {2, 0}) {
    opt.num_dense_layers = dense;
    const auto data = record_sink_samples(*dec, prompts, opt);
    ASSERT_EQ(data.size(), 2u);
    for (size_t i = 0; i < data.size(); ++i) {
      EXPECT_EQ(data[i].context_len, opt.lengths[i]);
      EXPECT_EQ(static_cast<int>(data[i].samples.size()), 2 * 3 * (3 - dense) * 2);
      for (const SinkSample& s : data[i].samples) {
        EXPECT_GE(s.score, -1.0f - 1e-5f);
        EXPECT_LE(s.score, 1.0f + 1e-5f);
        EXPECT_GE(s.mass, 0.0f);
        EXPECT_LE(s.mass, 1.0f);
      }
    }
  }
}

}  // namespace
}  // namespace vlm::testing
