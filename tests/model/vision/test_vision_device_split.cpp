// split_units_over_devices (the data-parallel media encoder's assignment, host logic): contiguous
// runs covering every unit once, in order, balanced to about one unit of the even share, the
// same cuts for the same costs; one device takes everything; more devices than units.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "model/vision/vision_device_split.h"

namespace vlm::testing {
namespace {

int64_t run_cost(const std::vector<int64_t>& costs, size_t a, size_t b) {
  int64_t c = 0;
  for (size_t i = a; i < b; ++i) c += costs[i];
  return c;
}

TEST(VisionDeviceSplit, EqualGroupsOfA64FrameVideoSplitEvenly) {
  // 64 frames of 448x448 (Qwen2-VL: 32 temporal groups of 1024 patches) in groups of 4096: 8 units.
  const std::vector<int64_t> costs(8, 4096);
  EXPECT_EQ(split_units_over_devices(costs, 2), (std::vector<size_t>{0, 4, 8}));
  EXPECT_EQ(split_units_over_devices(costs, 4), (std::vector<size_t>{0, 2, 4, 6, 8}));
  EXPECT_EQ(split_units_over_devices(costs, 1), (std::vector<size_t>{0, 8}));
  EXPECT_EQ(split_units_over_devices(costs, 3), (std::vector<size_t>{0, 3, 5, 8}));
}

TEST(VisionDeviceSplit, UnequalUnitsCutAtTheNearestBoundary) {
  // Total 1000: the even halves end at 500; after 100 + 300 = 400, 400 + 50 = 450, 450 + 400 = 850:
  // the cut after 450 (50 short) beats the one after 850.
  const std::vector<int64_t> costs = {100, 300, 50, 400, 150};
  EXPECT_EQ(split_units_over_devices(costs, 2), (std::vector<size_t>{0, 3, 5}));
  // One big unit: it goes whole to one device, the other gets the rest.
  const std::vector<int64_t> big = {10, 1000, 10};
  const std::vector<size_t> b = split_units_over_devices(big, 2);
  EXPECT_EQ(b.front(), 0u);
  EXPECT_EQ(b.back(), 3u);
  EXPECT_TRUE(b[1] == 1 || b[1] == 2) << b[1];
}

TEST(VisionDeviceSplit, MoreDevicesThanUnitsLeavesSomeIdle) {
  const std::vector<int64_t> costs = {5, 7};
  const std::vector<size_t> b = split_units_over_devices(costs, 4);
  ASSERT_EQ(b.size(), 5u);
  EXPECT_EQ(b.front(), 0u);
  EXPECT_EQ(b.back(), 2u);
  int busy = 0;
  for (size_t d = 0; d < 4; ++d) busy += b[d + 1] > b[d];
  EXPECT_EQ(busy, 2);
  EXPECT_EQ(split_units_over_devices(std::vector<int64_t>{}, 3), (std::vector<size_t>{0, 0, 0, 0}));
}

TEST(VisionDeviceSplit, RandomCostsGiveContiguousBalancedDeterministicRuns) {
  std::mt19937 g(3);
  for (int trial = 0; trial < 200; ++trial) {
    const size_t n_units = 1 + g() % 40;
    const int n = 1 + static_cast<int>(g() % 6);
    std::vector<int64_t> costs(n_units);
    int64_t biggest = 0, total = 0;
    for (int64_t& c : costs) {
      c = 1 + static_cast<int64_t>(g() % 5000);
      biggest = std::max(biggest, c);
      total += c;
    }
    const std::vector<size_t> b = split_units_over_devices(costs, n);
    ASSERT_EQ(b.size(), static_cast<size_t>(n) + 1);
    EXPECT_EQ(b.front(), 0u);
    EXPECT_EQ(b.back(), n_units);
    for (int d = 0; d < n; ++d) {
      ASSERT_LE(b[d], b[d + 1]) << "trial " << trial;
      // Cut d + 1 is within one unit of the even share's end.
      if (d + 1 < n) {
        const double even_end = static_cast<double>(total) * (d + 1) / n;
        EXPECT_LE(std::abs(static_cast<double>(run_cost(costs, 0, b[d + 1])) - even_end), biggest)
            << "trial " << trial << " cut " << d + 1;
      }
    }
    EXPECT_EQ(split_units_over_devices(costs, n), b);
  }
}

}  // namespace
}  // namespace vlm::testing
