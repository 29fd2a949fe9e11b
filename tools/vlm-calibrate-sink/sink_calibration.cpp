#include "tools/vlm-calibrate-sink/sink_calibration.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/core/check.h"

namespace vlm {
namespace {

// One sample as classified: margin = score - tau (predicted sink when >= 0), its label and mass.
struct Labeled {
  double margin;
  bool label;
  float mass;
};

ProxyReliability reliability(std::vector<Labeled> v) {
  ProxyReliability r;
  r.n = static_cast<int64_t>(v.size());
  double mass_skip = 0, mass_active = 0;
  for (const Labeled& s : v) {
    const bool pred = s.margin >= 0;
    (pred ? (s.label ? r.tp : r.fp) : (s.label ? r.fn : r.tn))++;
    (pred ? mass_skip : mass_active) += s.mass;
  }
  const int64_t pp = r.tp + r.fp, pos = r.tp + r.fn;
  r.precision = pp ? static_cast<double>(r.tp) / pp : 0.0;
  r.recall = pos ? static_cast<double>(r.tp) / pos : 0.0;
  r.f1 = r.precision + r.recall > 0 ? 2 * r.precision * r.recall / (r.precision + r.recall) : 0.0;
  r.oracle_rate = r.n ? static_cast<double>(pos) / r.n : 0.0;
  r.mean_mass_skipped = pp ? mass_skip / pp : 0.0;
  r.mean_mass_active = r.n - pp ? mass_active / (r.n - pp) : 0.0;
  // Average precision: walk the ranking by margin (descending); samples with equal margins
  // enter together (one precision-recall point per distinct margin).
  if (pos > 0) {
    std::sort(v.begin(), v.end(), [](const Labeled& a, const Labeled& b) { return a.margin > b.margin; });
    int64_t tp = 0, seen = 0;
    double prev_recall = 0, ap = 0;
    for (size_t i = 0; i < v.size();) {
      size_t j = i;
      while (j < v.size() && v[j].margin == v[i].margin) tp += v[j++].label;
      seen += static_cast<int64_t>(j - i);
      const double rec = static_cast<double>(tp) / pos;
      ap += (rec - prev_recall) * static_cast<double>(tp) / seen;
      prev_recall = rec;
      i = j;
    }
    r.auprc = ap;
  }
  return r;
}

// Labels of the top round(target * n) samples by mass (ties by index, deterministic).
std::vector<uint8_t> top_fraction_labels(const std::vector<SinkSample>& s, double target) {
  std::vector<size_t> idx(s.size());
  std::iota(idx.begin(), idx.end(), size_t{0});
  std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return s[a].mass > s[b].mass; });
  const size_t k = static_cast<size_t>(std::llround(target * static_cast<double>(s.size())));
  std::vector<uint8_t> label(s.size(), 0);
  for (size_t i = 0; i < k && i < idx.size(); ++i) label[idx[i]] = 1;
  return label;
}

void append_labeled(const std::vector<SinkSample>& s, double tau, const std::vector<uint8_t>* labels,
                    double oracle_mass, std::vector<Labeled>& out) {
  for (size_t i = 0; i < s.size(); ++i)
    out.push_back({static_cast<double>(s[i].score) - tau, labels ? (*labels)[i] != 0 : s[i].mass >= oracle_mass,
                   s[i].mass});
}

}  // namespace

double threshold_for_skip_ratio(std::vector<float> scores, double target) {
  VLM_CHECK(!scores.empty(), "no scores to calibrate on");
  VLM_CHECK(target >= 0 && target <= 1, "target skip ratio {} outside [0, 1]", target);
  std::sort(scores.begin(), scores.end(), std::greater<float>());
  const int64_t n = static_cast<int64_t>(scores.size());
  const int64_t k = std::llround(target * static_cast<double>(n));
  if (k <= 0) return std::nextafter(static_cast<double>(scores[0]), INFINITY);
  if (k >= n) return scores[n - 1];
  const double hi = scores[k - 1], lo = scores[k];
  if (hi > lo) return lo + (hi - lo) / 2;
  // A tie across the cut: skip the whole tie (tau = hi) or none of it (just above hi).
  const int64_t ge = std::upper_bound(scores.begin(), scores.end(), scores[k - 1], std::greater<float>()) - scores.begin();
  const int64_t gt = std::lower_bound(scores.begin(), scores.end(), scores[k - 1], std::greater<float>()) - scores.begin();
  return ge - k <= k - gt ? hi : std::nextafter(hi, INFINITY);
}

double skip_ratio_at(const std::vector<SinkSample>& samples, double tau) {
  if (samples.empty()) return 0.0;
  int64_t n = 0;
  for (const SinkSample& s : samples) n += static_cast<double>(s.score) >= tau;
  return static_cast<double>(n) / static_cast<double>(samples.size());
}

void fit_polynomial(const std::vector<double>& x, const std::vector<double>& y, double coef[4], int* degree) {
  const size_t n = x.size();
  VLM_CHECK(n >= 1 && y.size() == n, "{} x values, {} y values", n, y.size());
  for (size_t i = 0; i < n; ++i)
    for (size_t j = i + 1; j < n; ++j) VLM_CHECK(x[i] != x[j], "duplicate x {}", x[i]);
  const int m = static_cast<int>(std::min<size_t>(4, n));  // unknowns
  *degree = m - 1;
  // Normal equations A c = b, A[r][c] = sum x^(r+c), b[r] = sum y x^r; Gaussian elimination with
  // partial pivoting (m <= 4, x in (0, 1]: well enough conditioned).
  double A[4][5] = {};
  for (size_t i = 0; i < n; ++i) {
    double pr = 1;
    for (int r = 0; r < m; ++r, pr *= x[i]) {
      double pc = 1;
      for (int c = 0; c < m; ++c, pc *= x[i]) A[r][c] += pr * pc;
      A[r][m] += pr * y[i];
    }
  }
  for (int c = 0; c < m; ++c) {
    int piv = c;
    for (int r = c + 1; r < m; ++r)
      if (std::abs(A[r][c]) > std::abs(A[piv][c])) piv = r;
    std::swap(A[c], A[piv]);
    VLM_CHECK(A[c][c] != 0, "singular fit");
    for (int r = 0; r < m; ++r) {
      if (r == c) continue;
      const double f = A[r][c] / A[c][c];
      for (int k = c; k <= m; ++k) A[r][k] -= f * A[c][k];
    }
  }
  for (int i = 0; i < 4; ++i) coef[i] = i < m ? A[i][m] / A[i][i] : 0.0;
}

ProxyReliability proxy_reliability(const std::vector<SinkSample>& samples, double tau, double oracle_mass) {
  std::vector<Labeled> v;
  append_labeled(samples, tau, nullptr, oracle_mass, v);
  return reliability(std::move(v));
}

ProxyReliability proxy_reliability_top_fraction(const std::vector<SinkSample>& samples, double tau, double target) {
  const std::vector<uint8_t> labels = top_fraction_labels(samples, target);
  std::vector<Labeled> v;
  append_labeled(samples, tau, &labels, 0.0, v);
  return reliability(std::move(v));
}

CalibrationResult calibrate_sink_threshold(const std::vector<LengthSamples>& data, const CalibrationOptions& opt,
                                           const SinkRouterConfig& base) {
  VLM_CHECK(!data.empty(), "no context lengths to calibrate");
  VLM_CHECK(opt.target_skip >= 0 && opt.target_skip <= 1, "target skip ratio {} outside [0, 1]", opt.target_skip);
  CalibrationResult res;
  res.config = base;
  double length_ref = 0;
  for (const LengthSamples& d : data) {
    VLM_CHECK(d.context_len > 0 && !d.samples.empty(), "length {} with {} samples", d.context_len, d.samples.size());
    length_ref = std::max(length_ref, static_cast<double>(d.context_len));
  }
  std::vector<double> xs, taus;
  for (const LengthSamples& d : data) {
    std::vector<float> scores;
    for (const SinkSample& s : d.samples) scores.push_back(s.score);
    LengthReport r;
    r.context_len = d.context_len;
    r.num_samples = static_cast<int64_t>(d.samples.size());
    r.tau = threshold_for_skip_ratio(std::move(scores), opt.target_skip);
    r.skip_at_tau = skip_ratio_at(d.samples, r.tau);
    xs.push_back(static_cast<double>(d.context_len) / length_ref);
    taus.push_back(r.tau);
    res.lengths.push_back(r);
  }
  double c[4];
  fit_polynomial(xs, taus, c, &res.degree);
  SinkRouterConfig& cfg = res.config;
  cfg.c0 = c[0], cfg.c1 = c[1], cfg.c2 = c[2], cfg.c3 = c[3];
  cfg.length_ref = length_ref;
  cfg.tau_min = *std::min_element(taus.begin(), taus.end());
  cfg.tau_max = *std::max_element(taus.begin(), taus.end());
  std::vector<Labeled> pooled, pooled_top;
  for (size_t i = 0; i < data.size(); ++i) {
    LengthReport& r = res.lengths[i];
    r.tau_fit = cfg.threshold(data[i].context_len);
    r.skip_at_fit = skip_ratio_at(data[i].samples, r.tau_fit);
    r.at_fit = proxy_reliability(data[i].samples, r.tau_fit, opt.oracle_mass);
    r.top_at_fit = proxy_reliability_top_fraction(data[i].samples, r.tau_fit, opt.target_skip);
    res.max_skip_error = std::max(res.max_skip_error, std::abs(r.skip_at_fit - opt.target_skip));
    append_labeled(data[i].samples, r.tau_fit, nullptr, opt.oracle_mass, pooled);
    const std::vector<uint8_t> labels = top_fraction_labels(data[i].samples, opt.target_skip);
    append_labeled(data[i].samples, r.tau_fit, &labels, 0.0, pooled_top);
  }
  res.overall = reliability(std::move(pooled));
  res.overall_top = reliability(std::move(pooled_top));
  return res;
}

}  // namespace vlm
