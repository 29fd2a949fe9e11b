#include "tools/vlm-bench/arrival_schedule.h"

#include <algorithm>
#include <random>

namespace vlm::bench {

std::vector<double> arrival_schedule(int num_requests, double rate, double burstiness, uint64_t seed) {
  std::vector<double> t(static_cast<size_t>(std::max(0, num_requests)), 0.0);
  if (rate <= 0.0 || t.empty()) return t;
  std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ull);
  std::gamma_distribution<double> gap(burstiness, 1.0 / (rate * burstiness));
  double now = 0.0;
  for (double& x : t) {
    now += gap(rng);
    x = now;
  }
  const double target = static_cast<double>(num_requests) / rate;
  if (t.back() > 0.0) {
    const double scale = target / t.back();
    for (double& x : t) x *= scale;
  }
  return t;
}

}  // namespace vlm::bench
