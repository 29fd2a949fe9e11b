// moe_norm_router_route_sort (kernels/cuda/moe/moe_decode.h, 1n.: the RMS pre-norm, router GEMV,
// routing and sort in one launch) against the unfused forms and the naive references:
//  - its normalized rows h_out against cuda::rms_norm's, bit for bit;
//  - its logits, choices, weights and groups against moe_router_route_sort run on rms_norm's rows,
//    bit for bit (the same product order and routing rule);
//  - the logits against moe_router_naive (1e-5), the choices and groups against moe_route_naive +
//    moe_sort_naive on its own logits (equal), the weights within 2e-6;
//  - run twice: the counter back at 0 and the same bits.
// Shapes: T = 1..8 at the 30B-A3B dims (E 128, top 8, C 2048), tiny dims (E 13, K 3, C 72: E not
// a multiple of 4 rows per block, C below one 128-thread pass of the norm), E 256 / K 32 (the
// routing's limits), C 4096 (8 norm groups per thread) and C 1288 (a partial group pass), and
// router rows repeated so that logits tie exactly (the lower expert must win), a token with a NaN
// (every choice still a valid expert, as moe_route_naive picks them), bf16 and f16.
// Outputs poisoned first (NaN / -1) so an unwritten element fails. Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cuda/moe/moe_cuda.h"
#include "kernels/cuda/moe/moe_decode.h"
#include "kernels/cuda/ops/ops_cuda.h"
#include "tests/kernels/cuda/cuda_test_util.h"
#include "tests/kernels/cuda/moe_test_util.h"
#include "tests/support/gpu_test.h"

namespace vlm::testing {
namespace {

class CudaMoeNormRouter : public ::testing::Test {
 protected:
  void SetUp() override { VLM_REQUIRE_GPU(); }
};

using Sorted = MoeSortedBuffers;

std::vector<uint32_t> bits(const std::vector<float>& v) { return float_bits(v); }

struct Case {
  int64_t T, E, K, C;
  int64_t distinct_rows;  // router row e = row e % distinct_rows (ties when < E)
  bool nan_token = false;  // x[0, 0] NaN: token 0's logits all NaN (every probability kNan)
};

// The outputs of one routing form.
struct Outs {
  cuda::DeviceBuffer h, logits, expert, weight;
  Sorted sorted;
  Outs(int64_t T, int64_t E, int64_t K, int64_t C)
      : h(T * C * 2), logits(T * E * 4), expert(T * K * 4), weight(T * K * 4), sorted(E, T * K) {
    VLM_CUDA_CHECK(cudaMemset(h.get(), 0xff, h.bytes()));
    VLM_CUDA_CHECK(cudaMemset(logits.get(), 0xff, logits.bytes()));
    VLM_CUDA_CHECK(cudaMemset(expert.get(), 0xff, expert.bytes()));
    VLM_CUDA_CHECK(cudaMemset(weight.get(), 0xff, weight.bytes()));
  }
};

TEST_F(CudaMoeNormRouter, MatchesNormThenFusedRouterAndNaive) {
  std::vector<Case> cases;
  for (int64_t T = 1; T <= 8; ++T) cases.push_back({T, 128, 8, 2048, 128});  // the 30B-A3B decode step
  for (int64_t T : {1, 3, 8}) cases.push_back({T, 13, 3, 72, 13});          // tiny dims
  cases.push_back({2, 256, 32, 512, 256});                                   // E and K at the routing's limits
  cases.push_back({5, 64, 8, 4096, 64});                                     // C at the norm's limit
  cases.push_back({4, 130, 8, 1288, 130});                                   // a partial last block and norm pass
  cases.push_back({1, 128, 8, 2048, 5});                                     // ties: 5 distinct rows
  cases.push_back({6, 40, 6, 256, 3});                                       // ties, several tokens
  cases.push_back({2, 128, 8, 2048, 128, true});                             // a NaN row: valid choices
  const float eps = 1e-6f;
  for (DType dt : {DType::BF16, DType::F16}) {
    for (const Case& c : cases) {
      const int64_t T = c.T, E = c.E, K = c.K, C = c.C, P = T * K;
      SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " T " << T << " E " << E << " K " << K << " C " << C
                                        << " distinct " << c.distinct_rows);
      ASSERT_TRUE(cuda::moe_norm_router_supported(T, E, C, K, dt));
      std::vector<float> x = random_vector(T * C, static_cast<uint32_t>(7 + T + C), 3.f);  // [T, C] f32
      if (c.nan_token) x[0] = std::nanf("");
      auto d_x = to_device(x);
      std::vector<float> g = random_vector(C, static_cast<uint32_t>(11 + C), 0.5f);
      for (float& v : g) v += 1.f;
      auto d_g = to_device(g);
      const std::vector<float> rows = random_vector(c.distinct_rows * C, static_cast<uint32_t>(5 + E), 0.05f);
      std::vector<float> w(E * C);
      for (int64_t e = 0; e < E; ++e)
        std::memcpy(&w[e * C], &rows[(e % c.distinct_rows) * C], C * sizeof(float));
      auto d_w = to_device(encode(w, dt));
      cuda::DeviceBuffer d_counter(4), d_counter2(4);
      VLM_CUDA_CHECK(cudaMemset(d_counter.get(), 0, 4));
      VLM_CUDA_CHECK(cudaMemset(d_counter2.get(), 0, 4));

      auto fused = [&](Outs& o) {
        cuda::moe_norm_router_route_sort(d_x.as<float>(), d_g.as<float>(), eps, o.h.get(), d_w.get(), dt, T, E, C, K,
                                         true, o.logits.as<float>(), o.expert.as<int32_t>(), o.weight.as<float>(),
                                         o.sorted.s, d_counter.as<uint32_t>(), nullptr);
      };
      Outs a(T, E, K, C), b(T, E, K, C), r(T, E, K, C);
      fused(a);
      EXPECT_EQ(to_host<uint32_t>(d_counter, 1)[0], 0u);  // back at 0 for the next call
      fused(b);
      EXPECT_EQ(to_host<uint32_t>(d_counter, 1)[0], 0u);
      // The unfused forms: rms_norm, then moe_router_route_sort on its rows.
      cuda::rms_norm(d_x.as<float>(), nullptr, d_g.as<float>(), eps, nullptr, T, C, r.h.get(), dt, nullptr);
      cuda::moe_router_route_sort(r.h.get(), d_w.get(), dt, T, E, C, K, true, r.logits.as<float>(),
                                  r.expert.as<int32_t>(), r.weight.as<float>(), r.sorted.s,
                                  d_counter2.as<uint32_t>(), nullptr);
      const auto h = to_host<uint16_t>(a.h, T * C);
      const auto logits = to_host<float>(a.logits, T * E);
      const auto ex = to_host<int32_t>(a.expert, P);
      const auto wt = to_host<float>(a.weight, P);
      const auto groups = a.sorted.host(E, P);
      EXPECT_EQ(h, to_host<uint16_t>(r.h, T * C));
      EXPECT_EQ(bits(logits), bits(to_host<float>(r.logits, T * E)));
      EXPECT_EQ(ex, to_host<int32_t>(r.expert, P));
      EXPECT_EQ(bits(wt), bits(to_host<float>(r.weight, P)));
      EXPECT_EQ(groups, r.sorted.host(E, P));
      // The second call: the same bits.
      EXPECT_EQ(to_host<uint16_t>(b.h, T * C), h);
      EXPECT_EQ(bits(to_host<float>(b.logits, T * E)), bits(logits));
      EXPECT_EQ(to_host<int32_t>(b.expert, P), ex);
      EXPECT_EQ(bits(to_host<float>(b.weight, P)), bits(wt));
      EXPECT_EQ(b.sorted.host(E, P), groups);
      // Without the sort (sorted.offsets null: the pair path): the same choices, weights, logits
      // and rows, the counter back at 0.
      Outs u(T, E, K, C);
      cuda::moe_norm_router_route_sort(d_x.as<float>(), d_g.as<float>(), eps, u.h.get(), d_w.get(), dt, T, E, C, K,
                                       true, u.logits.as<float>(), u.expert.as<int32_t>(), u.weight.as<float>(),
                                       cuda::MoeSorted{}, d_counter.as<uint32_t>(), nullptr);
      EXPECT_EQ(to_host<uint32_t>(d_counter, 1)[0], 0u);
      EXPECT_EQ(to_host<uint16_t>(u.h, T * C), h);
      EXPECT_EQ(bits(to_host<float>(u.logits, T * E)), bits(logits));
      EXPECT_EQ(to_host<int32_t>(u.expert, P), ex);
      EXPECT_EQ(bits(to_host<float>(u.weight, P)), bits(wt));
      fused(b);  // and the counter works for the next call with the sort
      EXPECT_EQ(b.sorted.host(E, P), groups);
      EXPECT_EQ(to_host<uint32_t>(d_counter, 1)[0], 0u);

      // The naive references on the fused kernel's rows and logits.
      cuda::DeviceBuffer ln(T * E * 4), en(P * 4), wn(P * 4);
      cuda::moe_router_naive(a.h.get(), d_w.get(), dt, T, E, C, ln.as<float>(), nullptr);
      if (!c.nan_token) {
        EXPECT_LE(normalized_error(logits, to_host<float>(ln, T * E)), 1e-5);
      }
      Sorted sn(E, P);
      cuda::moe_route_naive(a.logits.as<float>(), T, E, K, true, en.as<int32_t>(), wn.as<float>(), nullptr);
      cuda::moe_sort_naive(en.as<int32_t>(), P, E, sn.s, nullptr);
      EXPECT_EQ(ex, to_host<int32_t>(en, P));
      EXPECT_EQ(groups, sn.host(E, P));
      const auto w_naive = to_host<float>(wn, P);
      for (int64_t i = 0; i < P; ++i) EXPECT_NEAR(wt[i], w_naive[i], 2e-6) << i;
    }
  }
}

TEST_F(CudaMoeNormRouter, SupportedShapes) {
  EXPECT_TRUE(cuda::moe_norm_router_supported(1, 128, 2048, 8, DType::BF16));
  EXPECT_TRUE(cuda::moe_norm_router_supported(8, 128, 2048, 8, DType::F16));
  EXPECT_FALSE(cuda::moe_norm_router_supported(9, 128, 2048, 8, DType::BF16));   // T > 8
  EXPECT_FALSE(cuda::moe_norm_router_supported(1, 257, 2048, 8, DType::BF16));   // E > 256
  EXPECT_FALSE(cuda::moe_norm_router_supported(1, 128, 4104, 8, DType::BF16));   // C > 4096
  EXPECT_FALSE(cuda::moe_norm_router_supported(8, 128, 4096, 8, DType::BF16));   // 64 KB of rows
  EXPECT_FALSE(cuda::moe_norm_router_supported(1, 128, 2044, 8, DType::BF16));   // C % 8
  EXPECT_FALSE(cuda::moe_norm_router_supported(1, 128, 2048, 8, DType::F32));
}

}  // namespace
}  // namespace vlm::testing
