// moe_decode_plan (kernels/cuda/moe/moe_limits.h): which decode forms of the GPU's mixture-of-
// experts block run for a step of T tokens (host-only logic, tested on the CPU).
#include <gtest/gtest.h>

#include "kernels/cuda/moe/moe_limits.h"

namespace vlm::testing {
namespace {

using cuda::moe_decode_plan;

TEST(MoeDecodePlan, FusedRouterUpTo8TokensPairGemvsAtOne) {
  // The 30B-A3B shape (C 2048, I 768), bf16.
  for (int64_t T = 1; T <= 12; ++T) {
    const cuda::MoeDecodePlan p = moe_decode_plan(T, 2048, 768, true, true, false);
    EXPECT_EQ(p.fused_router, T <= cuda::kMoeRouteSortMaxTokens) << T;
    EXPECT_EQ(p.pair_gemv, T <= cuda::kMoePairGemvMaxTokens) << T;
    EXPECT_TRUE(!p.pair_gemv || p.fused_router) << T;  // the pair path takes the fused router's choices
  }
  EXPECT_EQ(cuda::kMoeRouteSortMaxTokens, 8);
  EXPECT_EQ(cuda::kMoePairGemvMaxTokens, 1);  // measured: slower than the tensor-core GEMV from 2 tokens
  const cuda::MoeDecodePlan none = moe_decode_plan(0, 2048, 768, true, true, false);
  EXPECT_FALSE(none.fused_router || none.pair_gemv);
}

TEST(MoeDecodePlan, OldSwitchF32OddWidthsAndFp8RouterTakeTheFiveLaunches) {
  auto neither = [](const cuda::MoeDecodePlan& p) { return !p.fused_router && !p.pair_gemv; };
  EXPECT_TRUE(neither(moe_decode_plan(1, 2048, 768, true, true, /*old=*/true)));
  EXPECT_TRUE(neither(moe_decode_plan(1, 2048, 768, /*dt16=*/false, true, false)));
  EXPECT_TRUE(neither(moe_decode_plan(1, 2048, 768, true, /*router_in_dt=*/false, false)));
  EXPECT_TRUE(neither(moe_decode_plan(1, 2044, 768, true, true, false)));  // C % 8 != 0
  EXPECT_TRUE(neither(moe_decode_plan(1, 2048, 20, true, true, false)));   // I % 8 != 0
  EXPECT_FALSE(neither(moe_decode_plan(1, 64, 40, true, true, false)));    // the fixtures' shape
}

}  // namespace
}  // namespace vlm::testing
