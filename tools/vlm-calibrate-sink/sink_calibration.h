// SinkRouter threshold calibration (paper §4.2 "Threshold calibration", Appendix A) and proxy
// reliability (Appendix C), on recorded samples. No model here: vlm-calibrate-sink records the
// samples (calibration_run.h), tests plant them.
//
// A sample is one routed decision: (decode token, routed layer, kv group) with its group score
// (eq. 12, the cosine proxy aggregated over the group) and its oracle: the exact attention mass
// on the first cached token aggregated over the group the same way (min / mean / max).
//
// Calibration: at each context length L_i the threshold tau_i giving the target skip ratio
// (fraction of samples with score >= tau_i), then a least-squares cubic tau(x) in x = L / L_ref
// with L_ref = the longest calibrated length (degree min(3, points - 1)), clamped to
// [min tau_i, max tau_i] so that it never extrapolates outside the calibrated range.
//
// Oracle sink set (the binary label of Appendix C): a sample whose group mass is >= oracle_mass
// (eq. 10's alpha; default 0.5). Also reported: the oracle as the top target-fraction of the
// samples by mass (the same number of sinks as skips), where precision = recall.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/sink_router/sink_router_config.h"

namespace vlm {

struct SinkSample {
  float score = 0;  // group score, eq. 12
  float mass = 0;   // group's oracle first-token attention mass (same aggregation)
};

struct LengthSamples {
  int64_t context_len = 0;  // the prompt length the samples were decoded at
  std::vector<SinkSample> samples;
};

// The tau whose skip ratio (score >= tau) is closest to target in [0, 1]: with the scores sorted
// descending and k = round(target * n), the midpoint of the k-th and (k+1)-th scores (above the
// largest for k = 0, the smallest for k = n; ties resolved toward the closer count).
// Precondition: scores non-empty (InternalError otherwise).
double threshold_for_skip_ratio(std::vector<float> scores, double target);
double skip_ratio_at(const std::vector<SinkSample>& samples, double tau);

// Least-squares polynomial of degree min(3, n - 1) through (x[i], y[i]); coef[0..3] (unused 0).
// Preconditions: n >= 1, distinct x (InternalError otherwise).
void fit_polynomial(const std::vector<double>& x, const std::vector<double>& y, double coef[4], int* degree);

struct ProxyReliability {
  int64_t n = 0, tp = 0, fp = 0, fn = 0, tn = 0;  // prediction: score >= tau; label: the oracle
  double precision = 0, recall = 0, f1 = 0;       // 0 where undefined (no predicted / no oracle sinks)
  double auprc = 0;              // average precision of the score ranking against the labels
  double oracle_rate = 0;        // fraction of samples that are oracle sinks
  double mean_mass_skipped = 0;  // mean oracle mass of predicted sinks / of active samples
  double mean_mass_active = 0;
};
ProxyReliability proxy_reliability(const std::vector<SinkSample>& samples, double tau, double oracle_mass);
// The oracle is the top round(target * n) samples by mass.
ProxyReliability proxy_reliability_top_fraction(const std::vector<SinkSample>& samples, double tau, double target);

struct CalibrationOptions {
  double target_skip = 0.6;  // in [0, 1]
  double oracle_mass = 0.5;  // eq. 10's alpha for the oracle sink label
};

struct LengthReport {
  int64_t context_len = 0;
  int64_t num_samples = 0;
  double tau = 0;          // the per-length threshold for the target
  double skip_at_tau = 0;  // its realized skip ratio
  double tau_fit = 0;      // the fitted, clamped curve at this length
  double skip_at_fit = 0;  // the realized skip ratio under the fitted curve
  ProxyReliability at_fit;      // oracle: mass >= oracle_mass
  ProxyReliability top_at_fit;  // oracle: top target-fraction by mass
};

struct CalibrationResult {
  SinkRouterConfig config;  // base with c0..c3, length_ref, tau_min, tau_max set
  int degree = 0;
  std::vector<LengthReport> lengths;
  ProxyReliability overall;      // all lengths pooled, each under its fitted tau
  ProxyReliability overall_top;
  double max_skip_error = 0;     // max over lengths of |skip_at_fit - target|
};

// Preconditions (InternalError otherwise): at least one length, every length with samples,
// distinct lengths > 0, 0 <= target <= 1.
CalibrationResult calibrate_sink_threshold(const std::vector<LengthSamples>& data, const CalibrationOptions& opt,
                                           const SinkRouterConfig& base);

}  // namespace vlm
