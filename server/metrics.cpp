#include "server/metrics.h"

#include <cmath>
#include <fmt/format.h>

#include "kernels/core/check.h"

namespace vlm {
namespace {

std::string escape(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

// {a="1",b="2"} or "" (label order as given; callers use a fixed order per family).
std::string render_labels(const Labels& labels, const std::string& extra = "") {
  if (labels.empty() && extra.empty()) return "";
  std::string s = "{";
  for (const auto& [k, v] : labels) s += (s.size() > 1 ? "," : "") + k + "=\"" + escape(v) + "\"";
  if (!extra.empty()) s += (s.size() > 1 ? "," : "") + extra;
  return s + "}";
}

std::string number(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  if (v == std::floor(v) && std::fabs(v) < 1e15) return fmt::format("{:.1f}", v);
  return fmt::format("{}", v);
}

const char* type_name(MetricsRegistry::Type t) {
  switch (t) {
    case MetricsRegistry::Type::Counter: return "counter";
    case MetricsRegistry::Type::Gauge: return "gauge";
    case MetricsRegistry::Type::Histogram: return "histogram";
  }
  return "untyped";
}

}  // namespace

void MetricsRegistry::declare(const std::string& name, Type type, const std::string& help,
                              std::vector<double> buckets) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = families_.find(name);
  if (it != families_.end()) {
    VLM_CHECK(it->second.type == type && it->second.buckets == buckets, "metric {} declared twice differently", name);
    return;
  }
  VLM_CHECK(type != Type::Histogram || !buckets.empty(), "histogram {} needs buckets", name);
  for (size_t i = 1; i < buckets.size(); ++i) VLM_CHECK(buckets[i] > buckets[i - 1], "histogram {}: buckets not increasing", name);
  families_[name] = Family{type, help, std::move(buckets), {}, {}};
}

MetricsRegistry::Family& MetricsRegistry::family(const std::string& name, Type type) {
  auto it = families_.find(name);
  VLM_CHECK(it != families_.end(), "metric {} not declared", name);
  VLM_CHECK(it->second.type == type, "metric {} is a {}, used as a {}", name, type_name(it->second.type), type_name(type));
  return it->second;
}

const MetricsRegistry::Family* MetricsRegistry::find(const std::string& name) const {
  auto it = families_.find(name);
  return it == families_.end() ? nullptr : &it->second;
}

void MetricsRegistry::inc(const std::string& name, const Labels& labels, double delta) {
  VLM_CHECK(delta >= 0, "counter {} decremented", name);
  std::lock_guard<std::mutex> lock(mu_);
  family(name, Type::Counter).values[render_labels(labels)] += delta;
}

void MetricsRegistry::set(const std::string& name, double value, const Labels& labels) {
  std::lock_guard<std::mutex> lock(mu_);
  family(name, Type::Gauge).values[render_labels(labels)] = value;
}

void MetricsRegistry::observe(const std::string& name, double value, const Labels& labels) {
  std::lock_guard<std::mutex> lock(mu_);
  Family& f = family(name, Type::Histogram);
  HistogramData& h = f.histograms[render_labels(labels)];
  if (h.counts.empty()) h.counts.assign(f.buckets.size(), 0);
  for (size_t i = 0; i < f.buckets.size(); ++i)
    if (value <= f.buckets[i]) {
      ++h.counts[i];
      break;
    }
  h.sum += value;
  ++h.count;
}

double MetricsRegistry::value(const std::string& name, const Labels& labels) const {
  std::lock_guard<std::mutex> lock(mu_);
  const Family* f = find(name);
  if (!f) return 0;
  auto it = f->values.find(render_labels(labels));
  return it == f->values.end() ? 0 : it->second;
}

std::string MetricsRegistry::render() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  for (const auto& [name, f] : families_) {
    out += "# HELP " + name + " " + f.help + "\n# TYPE " + name + " " + type_name(f.type) + "\n";
    if (f.type != Type::Histogram) {
      for (const auto& [labels, v] : f.values) out += name + labels + " " + number(v) + "\n";
      continue;
    }
    for (const auto& [labels, h] : f.histograms) {
      // labels is "{...}" or ""; add le="..." inside.
      const std::string inner = labels.empty() ? "" : labels.substr(1, labels.size() - 2);
      auto with_le = [&](const std::string& le) {
        return "{" + inner + (inner.empty() ? "" : ",") + "le=\"" + le + "\"}";
      };
      double cumulative = 0;
      for (size_t i = 0; i < f.buckets.size(); ++i) {
        cumulative += h.counts[i];
        out += name + "_bucket" + with_le(number(f.buckets[i])) + " " + number(cumulative) + "\n";
      }
      out += name + "_bucket" + with_le("+Inf") + " " + number(h.count) + "\n";
      out += name + "_sum" + labels + " " + number(h.sum) + "\n";
      out += name + "_count" + labels + " " + number(h.count) + "\n";
    }
  }
  return out;
}

std::vector<double> MetricsRegistry::latency_buckets() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
          10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0, 7200.0};
}

std::vector<double> MetricsRegistry::token_latency_buckets() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
          10.0, 20.0, 40.0, 80.0};
}

}  // namespace vlm
