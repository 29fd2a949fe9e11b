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

TEST(MoeDecodePlan, NormRouterOnlyWithTheFusedRouterAndFusableNorm) {
  for (int64_t T = 0; T <= 12; ++T) {
    const cuda::MoeDecodePlan on = moe_decode_plan(T, 2048, 768, true, true, false, /*norm_fusable=*/true);
    EXPECT_EQ(on.norm_router, on.fused_router) << T;
    EXPECT_FALSE(moe_decode_plan(T, 2048, 768, true, true, false, /*norm_fusable=*/false).norm_router) << T;
    EXPECT_FALSE(moe_decode_plan(T, 2048, 768, true, true, /*old=*/true, true).norm_router) << T;
  }
  EXPECT_TRUE(cuda::kMoeNormRouterDefault);  // measured faster (session 19, call D); VLM_MOE_NORM_ROUTER=0 turns it off
}

TEST(MoeDecodePlan, NormRouterShapes) {
  EXPECT_TRUE(cuda::moe_norm_router_shape_ok(1, 128, 2048, 8));   // the 30B-A3B decode step
  EXPECT_TRUE(cuda::moe_norm_router_shape_ok(8, 128, 2048, 8));   // 32 KB of normalized rows
  EXPECT_TRUE(cuda::moe_norm_router_shape_ok(5, 256, 4096, 32));  // the limits: E 256, C 4096, 40 KB
  EXPECT_FALSE(cuda::moe_norm_router_shape_ok(0, 128, 2048, 8));
  EXPECT_FALSE(cuda::moe_norm_router_shape_ok(9, 128, 2048, 8));
  EXPECT_FALSE(cuda::moe_norm_router_shape_ok(1, 257, 2048, 8));
  EXPECT_FALSE(cuda::moe_norm_router_shape_ok(1, 128, 4104, 8));
  EXPECT_FALSE(cuda::moe_norm_router_shape_ok(6, 128, 4096, 8));  // 48 KB of rows
  EXPECT_FALSE(cuda::moe_norm_router_shape_ok(1, 128, 2044, 8));
  EXPECT_FALSE(cuda::moe_norm_router_shape_ok(1, 8, 2048, 9));    // K > E
  EXPECT_FALSE(cuda::moe_norm_router_shape_ok(1, 128, 2048, 33));
}

}  // namespace
}  // namespace vlm::testing
