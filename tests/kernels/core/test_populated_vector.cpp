// resize_populated: the vector it leaves is what v.resize(n) gives (n zeros), for sizes under and
// over the populate threshold, odd sizes (a piece ending mid-page), with a pool and without; and
// it refuses a vector that is not empty.
#include <gtest/gtest.h>

#include <algorithm>

#include "kernels/core/check.h"
#include "kernels/core/populated_vector.h"
#include "kernels/core/thread_pool.h"

namespace vlm {
namespace {

TEST(PopulatedVector, SameAsResizeWithAndWithoutAPool) {
  ThreadPool pool(3);
  for (const size_t n : {size_t{0}, size_t{1}, size_t{1000}, (size_t{4} << 20) / 4 - 1, (size_t{24} << 20) / 4 + 12345}) {
    for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
      std::vector<float> v;
      resize_populated(v, n, p);
      ASSERT_EQ(v.size(), n);
      EXPECT_TRUE(std::all_of(v.begin(), v.end(), [](float x) { return x == 0.0f; })) << n;
      for (size_t i = 0; i < n; i += 4096) v[i] = static_cast<float>(i);  // writable everywhere
      for (size_t i = 0; i < n; i += 4096) EXPECT_EQ(v[i], static_cast<float>(i));
    }
  }
}

TEST(PopulatedVector, RefusesAVectorThatIsNotEmpty) {
  std::vector<float> v(3);
  EXPECT_THROW(resize_populated(v, 10, nullptr), InternalError);
}

}  // namespace
}  // namespace vlm
