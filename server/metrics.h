// Prometheus text exposition (format 0.0.4): counters, gauges and histograms with labels.
// Families are declared once (name, help, type, histogram buckets); samples are keyed by label
// sets. Thread-safe: updates and render() may run on any thread.
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace vlm {

using Labels = std::vector<std::pair<std::string, std::string>>;

class MetricsRegistry {
 public:
  enum class Type { Counter, Gauge, Histogram };

  // Declares a family; declaring a name twice with another type or buckets is an InternalError.
  void declare(const std::string& name, Type type, const std::string& help,
               std::vector<double> buckets = {});

  void inc(const std::string& name, const Labels& labels = {}, double delta = 1.0);  // counter
  void set(const std::string& name, double value, const Labels& labels = {});        // gauge
  void observe(const std::string& name, double value, const Labels& labels = {});    // histogram

  // Current value of a counter or gauge sample (0 if never set); for tests and dashboards.
  double value(const std::string& name, const Labels& labels = {}) const;
  std::string render() const;

  // Bucket layouts in seconds.
  static std::vector<double> latency_buckets();   // 1 ms .. 2 h
  static std::vector<double> token_latency_buckets();  // 1 ms .. 80 s

 private:
  struct HistogramData {
    std::vector<double> counts;  // per bucket (non-cumulative)
    double sum = 0;
    double count = 0;
  };
  struct Family {
    Type type;
    std::string help;
    std::vector<double> buckets;
    std::map<std::string, double> values;           // rendered labels -> value
    std::map<std::string, HistogramData> histograms;
  };
  Family& family(const std::string& name, Type type);
  const Family* find(const std::string& name) const;

  mutable std::mutex mu_;
  std::map<std::string, Family> families_;
};

}  // namespace vlm
