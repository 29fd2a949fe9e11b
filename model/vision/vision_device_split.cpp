#include "model/vision/vision_device_split.h"

#include "kernels/core/check.h"

namespace vlm {

std::vector<size_t> split_units_over_devices(std::span<const int64_t> costs, int n) {
  VLM_CHECK(n >= 1, "{} devices", n);
  // prefix[i]: the cost of units [0, i).
  std::vector<int64_t> prefix(costs.size() + 1, 0);
  for (size_t i = 0; i < costs.size(); ++i) {
    VLM_CHECK(costs[i] >= 0, "unit {} of cost {}", i, costs[i]);
    prefix[i + 1] = prefix[i] + costs[i];
  }
  const int64_t total = prefix.back();
  std::vector<size_t> b(static_cast<size_t>(n) + 1, 0);
  b[static_cast<size_t>(n)] = costs.size();
  for (int d = 1; d < n; ++d) {
    const size_t lo = b[static_cast<size_t>(d) - 1];
    // The even share's end, d * total / n, compared as prefix * n against d * total (exact:
    // costs are patch counts, far below 2^63 / n).
    const int64_t target = total * d;
    size_t i = lo;
    while (i < costs.size() && prefix[i] * n < target) ++i;
    // prefix[i] * n >= target (or i == size): take i - 1 when its prefix is nearer (ties: earlier).
    if (i > lo) {
      const int64_t over = prefix[i] * n - target;
      const int64_t under = target - prefix[i - 1] * n;
      if (under <= over) --i;
    }
    b[static_cast<size_t>(d)] = i;
  }
  return b;
}

}  // namespace vlm
