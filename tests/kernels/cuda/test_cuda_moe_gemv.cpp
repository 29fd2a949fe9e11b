// The decode forms of the mixture-of-experts grouped products (kernels/cuda/moe/moe_cuda.h:
// moe_grouped_mma_gemv, the tensor-core GEMV, and moe_grouped_gemv, the warp GEMV) beside the
// naive reference and the row tiles, over groups that routing makes: random router logits through
// moe_route and moe_sort, so the experts' pair counts are what decode sees (many experts with 0
// pairs at 1 token, ~P/E each at 64 tokens, some past 32 so the tensor-core GEMV takes several
// passes), with P on both sides of the GEMV thresholds (kMoe*GemvPairsPerExpert), E not a
// multiple of 8 or 16, N not a multiple of a block's columns, K not a multiple of a 32-k chunk;
// gated (x rows through the pairs' tokens) and not (x rows = slots); bf16 and f16. Outputs are
// poisoned first (NaN) so an unwritten element fails. Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cuda/moe/moe_cuda.h"
#include "tests/kernels/cuda/cuda_test_util.h"
#include "tests/support/gpu_test.h"

namespace vlm::testing {
namespace {

class CudaMoeGemv : public ::testing::Test {
 protected:
  void SetUp() override { VLM_REQUIRE_GPU(); }
};

struct RoutedCase {
  int64_t T, E, k, N, K;
  bool gated;
};

TEST_F(CudaMoeGemv, FormsMatchNaiveOverRoutedGroups) {
  const std::vector<RoutedCase> cases = {
      {1, 128, 8, 96, 128, true},      // one token: 8 experts of 1 pair, 120 empty (P <= E: 8-pair passes)
      {12, 128, 8, 40, 96, false},     // P <= E, ungated
      {64, 128, 8, 48, 64, true},      // decode batch: ~4 pairs per expert (the 30B-A3B step)
      {64, 128, 8, 80, 96, false},     // its down product (x rows = slots)
      {5, 13, 3, 40, 40, true},        // E = 13, N past a 16-column block, K past a 32-k chunk
      {70, 13, 3, 33, 200, false},     // ~16 pairs per expert: over the warp GEMV's threshold
      {200, 7, 2, 24, 2056, true},     // ~57 pairs per expert: two passes of 32; long K
      {300, 130, 8, 64, 264, false},   // E = 130, ~18 pairs per expert
  };
  for (DType dt : {DType::BF16, DType::F16}) {
    for (const RoutedCase& c : cases) {
      const int64_t T = c.T, E = c.E, k = c.k, N = c.N, K = c.K, P = T * k, G = c.gated ? 2 : 1;
      // Routing: logits -> choices -> groups (moe_route, moe_sort; tested in test_cuda_moe.cpp).
      auto d_logits = to_device(random_vector(T * E, static_cast<uint32_t>(17 + T + E), 2.0f));
      cuda::DeviceBuffer d_expert(P * 4), d_weight(P * 4), d_meta((3 * (E + 1) + 2 * P) * 4);
      cuda::MoeSorted s;
      s.offsets = d_meta.as<int32_t>();
      s.tile_starts = s.offsets + E + 1;
      s.active = s.tile_starts + E + 1;
      s.pair_of_slot = s.active + E + 1;
      s.slot_of_pair = s.pair_of_slot + P;
      cuda::moe_route(d_logits.as<float>(), T, E, k, true, d_expert.as<int32_t>(), d_weight.as<float>(), nullptr);
      cuda::moe_sort(d_expert.as<int32_t>(), P, E, s, nullptr);
      const auto offsets = to_host<int32_t>(d_meta, E + 1);
      int64_t most = 0, empty = 0;
      for (int64_t e = 0; e < E; ++e) {
        most = std::max<int64_t>(most, offsets[e + 1] - offsets[e]);
        empty += offsets[e + 1] == offsets[e];
      }
      const int64_t rows = c.gated ? T : P;  // x rows: tokens (gated) or slots
      auto d_x = to_device(encode(random_vector(rows * K, static_cast<uint32_t>(5 + K)), dt));
      auto d_w = to_device(encode(random_vector(E * G * N * K, static_cast<uint32_t>(6 + N), 0.1f), dt));
      // 0 naive, 1 tensor-core gemv, 2 warp gemv, 3 tiles, 4 tensor-core gemv of 16 rows per block
      auto run = [&](int which) {
        cuda::DeviceBuffer d_out(P * N * dtype_size(dt));
        VLM_CUDA_CHECK(cudaMemset(d_out.get(), 0xff, d_out.bytes()));
        cuda::MoeGroupedArgs a;
        a.x = d_x.get();
        a.x_rows = c.gated ? s.pair_of_slot : nullptr;
        a.x_div = c.gated ? k : 1;
        a.w = d_w.get();
        a.out = d_out.get();
        a.offsets = s.offsets;
        a.tile_starts = s.tile_starts;
        a.active = s.active;
        a.P = P;
        a.E = E;
        a.N = N;
        a.K = K;
        a.gated = c.gated;
        a.mma_rows = which == 4 ? 16 : 32;
        if (which == 0) cuda::moe_grouped_naive(a, dt, nullptr);
        else if (which == 1 || which == 4) cuda::moe_grouped_mma_gemv(a, dt, nullptr);
        else if (which == 2) cuda::moe_grouped_gemv(a, dt, nullptr);
        else cuda::moe_grouped(a, dt, nullptr);
        return decode(to_host<uint8_t>(d_out, P * N * dtype_size(dt)), dt);
      };
      const auto naive = run(0), mma = run(1), gemv = run(2), tiles = run(3), mma16 = run(4);
      const double tol = dt == DType::BF16 ? 2e-2 : 4e-3;
      SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " T " << T << " E " << E << " k " << k << " N " << N
                                        << " K " << K << (c.gated ? " gated" : "") << ": most pairs " << most
                                        << ", empty experts " << empty);
      EXPECT_LE(rel_error(mma, naive), tol);
      EXPECT_LE(normalized_error(mma, naive), 2 * tol);
      EXPECT_LE(rel_error(gemv, naive), tol);
      EXPECT_LE(rel_error(tiles, naive), tol);
      EXPECT_EQ(mma16, mma);  // the same sums in the same order, 16 or 32 rows per block
      if (T == 1) EXPECT_EQ(empty, E - k);
      if (T == 200) EXPECT_GT(most, 32);  // the tensor-core GEMV's second pass runs
    }
  }
}

// Expert 2 of E holds all P pairs (77 when E = 5: passes of 32; 20 when E = 100: passes of 8).
void one_busy_expert(int64_t E, int rows) {
  const int64_t N = 20, K = 48, P = E > 77 ? 20 : 77;
  const DType dt = DType::BF16;
  std::vector<int32_t> offsets(E + 1, static_cast<int32_t>(P)), active(E + 1, -1);
  offsets[0] = offsets[1] = offsets[2] = 0;
  active[0] = 2;
  active[E] = 1;
  auto d_off = to_device(offsets), d_active = to_device(active);
  auto d_x = to_device(encode(random_vector(P * K, 9), dt));
  auto d_w = to_device(encode(random_vector(E * N * K, 10, 0.1f), dt));
  auto run = [&](bool naive) {
    cuda::DeviceBuffer d_out(P * N * 2);
    VLM_CUDA_CHECK(cudaMemset(d_out.get(), 0xff, d_out.bytes()));
    cuda::MoeGroupedArgs a;
    a.x = d_x.get();
    a.w = d_w.get();
    a.out = d_out.get();
    a.offsets = d_off.as<int32_t>();
    a.active = d_active.as<int32_t>();
    a.P = P;
    a.E = E;
    a.N = N;
    a.K = K;
    a.mma_rows = rows;
    (naive ? cuda::moe_grouped_naive : cuda::moe_grouped_mma_gemv)(a, dt, nullptr);
    return decode(to_host<uint8_t>(d_out, P * N * 2), dt);
  };
  const auto got = run(false), want = run(true);
  for (int64_t i = 0; i < P * N; ++i) ASSERT_NEAR(got[i], want[i], 2e-2 * (1 + std::abs(want[i]))) << i;
}

// One expert holding every pair of a long batch (passes of 32 pairs back to back; of 8 when
// P <= E), the others empty: the tensor-core GEMV against the naive product, element by element.
TEST_F(CudaMoeGemv, MmaGemvOneBusyExpert) {
  for (const int64_t E : {5, 100})
    for (const int rows : {32, 16}) {
      SCOPED_TRACE(::testing::Message() << "E " << E << " rows per block " << rows);
      one_busy_expert(E, rows);
    }
}

}  // namespace
}  // namespace vlm::testing
