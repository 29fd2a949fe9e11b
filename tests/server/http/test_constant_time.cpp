#include "server/http/constant_time.h"

#include <gtest/gtest.h>

namespace vlm {
namespace {

TEST(ConstantTime, EqualsOnlyWhenEqual) {
  EXPECT_TRUE(constant_time_equals("Bearer k3y", "Bearer k3y"));
  EXPECT_TRUE(constant_time_equals("", ""));
  EXPECT_FALSE(constant_time_equals("Bearer k3z", "Bearer k3y"));
  EXPECT_FALSE(constant_time_equals("Xearer k3y", "Bearer k3y"));
  EXPECT_FALSE(constant_time_equals("Bearer k3", "Bearer k3y"));     // prefix
  EXPECT_FALSE(constant_time_equals("Bearer k3yy", "Bearer k3y"));   // longer
  EXPECT_FALSE(constant_time_equals("", "Bearer k3y"));
  EXPECT_FALSE(constant_time_equals(std::string_view("Bearer k3y\0", 11), "Bearer k3y"));
}

}  // namespace
}  // namespace vlm
