// The decode forms of the mixture-of-experts block (kernels/cuda/moe/moe_decode.h) beside their
// naive references: moe_router_route_sort (router product, routing and sorting in one launch, the
// last block by an atomic ticket) against moe_router_naive (the logits) and, on its own logits,
// moe_route_sort (bitwise) and moe_route_naive + moe_sort_naive, run twice (its counter back at 0,
// the same bits); moe_pair_gate_up and moe_pair_down_combine (the combine folded into the down
// product) against their naive kernels and against the five-launch path's naive kernels
// (moe_sort, moe_grouped_naive twice, moe_combine_naive), with and without accumulate, run twice
// (deterministic: the same bits); moe_pair_down_combine_staged (3'.) against the naive kernel and
// against moe_pair_down_combine bit for bit (the same sums in the same order), T = 1, 2, 4, 8, at
// the 30B-A3B dims and tiny ones, k up to 32, I large enough that fewer columns per block fit;
// moe_pair_down_combine_bulk (3b.) against 3'. bit for bit (sm_90);
// moe_pair_gate_up_staged (2'.) likewise against the naive kernel and moe_pair_gate_up bit for bit
// (I not a multiple of its 12 columns per block, C large enough that fewer fit).
// Shapes: the 30B-A3B layer at T = 1 (E 128 for the router, top 8, C 2048, I 768), E not a
// multiple of the router's 8 rows per block, k not a multiple of the down kernel's 4 pairs, C / I
// past the 16-byte vectors' unroll, bf16 and f16. Outputs poisoned first (NaN) so an unwritten
// element fails. Skips without a GPU.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "kernels/cuda/moe/moe_cuda.h"
#include "kernels/cuda/moe/moe_decode.h"
#include "tests/kernels/cuda/cuda_test_util.h"
#include "tests/kernels/cuda/moe_test_util.h"
#include "tests/support/gpu_test.h"

namespace vlm::testing {
namespace {

class CudaMoeDecode : public ::testing::Test {
 protected:
  void SetUp() override { VLM_REQUIRE_GPU(); }
};

using Sorted = MoeSortedBuffers;

std::vector<uint32_t> bits(const std::vector<float>& v) { return float_bits(v); }

struct RouterCase {
  int64_t T, E, K, C;
};

TEST_F(CudaMoeDecode, RouterRouteSortMatchesNaive) {
  const std::vector<RouterCase> cases = {
      {1, 128, 8, 2048},  // the 30B-A3B decode step
      {8, 128, 8, 2048},  // kMoeRouteSortMaxTokens
      {3, 13, 3, 72},     // E not a multiple of 8 rows per block; C not a multiple of 32 vectors
      {5, 130, 8, 1288},  // the last block partly empty; C past one unrolled pass
  };
  for (DType dt : {DType::BF16, DType::F16}) {
    for (const RouterCase& c : cases) {
      const int64_t T = c.T, E = c.E, K = c.K, C = c.C, P = T * K;
      SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " T " << T << " E " << E << " K " << K << " C " << C);
      auto d_h = to_device(encode(random_vector(T * C, static_cast<uint32_t>(3 + T + C)), dt));
      auto d_w = to_device(encode(random_vector(E * C, static_cast<uint32_t>(4 + E), 0.05f), dt));
      cuda::DeviceBuffer d_counter(4);
      VLM_CUDA_CHECK(cudaMemset(d_counter.get(), 0, 4));
      auto fused = [&](cuda::DeviceBuffer& logits, cuda::DeviceBuffer& expert, cuda::DeviceBuffer& weight,
                       Sorted& sorted) {
        VLM_CUDA_CHECK(cudaMemset(logits.get(), 0xff, logits.bytes()));
        VLM_CUDA_CHECK(cudaMemset(expert.get(), 0xff, expert.bytes()));
        VLM_CUDA_CHECK(cudaMemset(weight.get(), 0xff, weight.bytes()));
        cuda::moe_router_route_sort(d_h.get(), d_w.get(), dt, T, E, C, K, true, logits.as<float>(),
                                    expert.as<int32_t>(), weight.as<float>(), sorted.s, d_counter.as<uint32_t>(),
                                    nullptr);
      };
      cuda::DeviceBuffer l1(T * E * 4), e1(P * 4), w1(P * 4), l2(T * E * 4), e2(P * 4), w2(P * 4);
      Sorted s1(E, P), s2(E, P);
      fused(l1, e1, w1, s1);
      EXPECT_EQ(to_host<uint32_t>(d_counter, 1)[0], 0u);  // back at 0 for the next call
      fused(l2, e2, w2, s2);
      EXPECT_EQ(to_host<uint32_t>(d_counter, 1)[0], 0u);
      const auto logits = to_host<float>(l1, T * E);
      EXPECT_EQ(bits(to_host<float>(l2, T * E)), bits(logits));  // the second call: the same bits
      EXPECT_EQ(to_host<int32_t>(e2, P), to_host<int32_t>(e1, P));
      EXPECT_EQ(bits(to_host<float>(w2, P)), bits(to_host<float>(w1, P)));
      EXPECT_EQ(s2.host(E, P), s1.host(E, P));

      // The product against the naive one (f32 sums of the same products in another order).
      cuda::DeviceBuffer ln(T * E * 4);
      cuda::moe_router_naive(d_h.get(), d_w.get(), dt, T, E, C, ln.as<float>(), nullptr);
      EXPECT_LE(normalized_error(logits, to_host<float>(ln, T * E)), 1e-5);
      // Routing and sorting of the fused kernel's own logits: moe_route_sort (the same routing
      // code) gives the same bits; the naive kernels the same choices and groups, the weights
      // within 2e-6 (their softmax sums in another order).
      cuda::DeviceBuffer eo(P * 4), wo(P * 4), en(P * 4), wn(P * 4);
      Sorted so(E, P), sn(E, P);
      cuda::moe_route_sort(l1.as<float>(), T, E, K, true, eo.as<int32_t>(), wo.as<float>(), so.s, nullptr);
      cuda::moe_route_naive(l1.as<float>(), T, E, K, true, en.as<int32_t>(), wn.as<float>(), nullptr);
      cuda::moe_sort_naive(en.as<int32_t>(), P, E, sn.s, nullptr);
      const auto w_fused = to_host<float>(w1, P), w_naive = to_host<float>(wn, P);
      EXPECT_EQ(to_host<int32_t>(e1, P), to_host<int32_t>(eo, P));
      EXPECT_EQ(bits(w_fused), bits(to_host<float>(wo, P)));
      EXPECT_EQ(s1.host(E, P), so.host(E, P));
      EXPECT_EQ(to_host<int32_t>(e1, P), to_host<int32_t>(en, P));
      EXPECT_EQ(s1.host(E, P), sn.host(E, P));
      for (int64_t i = 0; i < P; ++i) EXPECT_NEAR(w_fused[i], w_naive[i], 2e-6) << i;
    }
  }
}

struct PairCase {
  int64_t T, E, K, I, C;
};

TEST_F(CudaMoeDecode, PairGemvsMatchNaiveAndTheFiveLaunchPath) {
  const std::vector<PairCase> cases = {
      {1, 12, 8, 768, 2048},   // the 30B-A3B decode step's C, I, k (12 experts: the host's random weights)
      {4, 128, 8, 96, 128},    // experts shared by tokens (the kernels take them; the plan runs T = 1 only)
      {3, 13, 3, 40, 200},     // k not a multiple of 4 pairs; I of 5 vectors
      {2, 7, 6, 1032, 2056},   // I, C past one unrolled pass of 16-byte vectors
  };
  for (DType dt : {DType::BF16, DType::F16}) {
    for (const PairCase& c : cases) {
      const int64_t T = c.T, E = c.E, K = c.K, I = c.I, C = c.C, P = T * K;
      const size_t esz = dtype_size(dt);
      SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " T " << T << " E " << E << " K " << K << " I " << I
                                        << " C " << C);
      // Routing (moe_route, moe_sort: tested in test_cuda_moe.cpp).
      auto d_logits = to_device(random_vector(T * E, static_cast<uint32_t>(21 + T + E), 2.0f));
      cuda::DeviceBuffer d_expert(P * 4), d_weight(P * 4);
      Sorted sorted(E, P);
      cuda::moe_route(d_logits.as<float>(), T, E, K, true, d_expert.as<int32_t>(), d_weight.as<float>(), nullptr);
      cuda::moe_sort(d_expert.as<int32_t>(), P, E, sorted.s, nullptr);
      const auto* expert = d_expert.as<int32_t>();
      const auto* weight = d_weight.as<float>();
      auto d_h = to_device(encode(random_vector(T * C, static_cast<uint32_t>(5 + C)), dt));
      auto d_gu = to_device(encode(random_vector(E * 2 * I * C, static_cast<uint32_t>(6 + I), 0.05f), dt));
      auto d_dn = to_device(encode(random_vector(E * C * I, static_cast<uint32_t>(7 + I), 0.05f), dt));
      const auto y0 = random_vector(T * C, static_cast<uint32_t>(8 + T));  // the residual

      // Gate|up, pair order.
      auto gate_up = [&](bool naive, cuda::DeviceBuffer& act) {
        VLM_CUDA_CHECK(cudaMemset(act.get(), 0xff, act.bytes()));
        (naive ? cuda::moe_pair_gate_up_naive : cuda::moe_pair_gate_up)(d_h.get(), d_gu.get(), expert, dt, T, K, I,
                                                                         C, act.get(), nullptr);
        return decode(to_host<uint8_t>(act, P * I * esz), dt);
      };
      cuda::DeviceBuffer act_fast(P * I * esz), act_naive(P * I * esz), act_again(P * I * esz);
      const auto a_fast = gate_up(false, act_fast), a_naive = gate_up(true, act_naive);
      const auto a_again = gate_up(false, act_again);
      const double tol = dt == DType::BF16 ? 2e-2 : 4e-3;
      EXPECT_LE(rel_error(a_fast, a_naive), tol);
      EXPECT_LE(normalized_error(a_fast, a_naive), 2 * tol);
      EXPECT_EQ(bits(a_again), bits(a_fast));

      // Down with the combine, on the same act (the naive one's) so only the down kernel differs.
      auto down = [&](bool naive, bool accumulate) {
        cuda::DeviceBuffer y = to_device(accumulate ? y0 : std::vector<float>(T * C, NAN));
        (naive ? cuda::moe_pair_down_combine_naive : cuda::moe_pair_down_combine)(
            act_naive.get(), d_dn.get(), expert, weight, dt, T, K, C, I, y.as<float>(), accumulate, nullptr);
        return to_host<float>(y, T * C);
      };
      for (bool accumulate : {false, true}) {
        SCOPED_TRACE(accumulate ? "accumulate" : "overwrite");
        const auto y_fast = down(false, accumulate), y_naive = down(true, accumulate);
        EXPECT_LE(rel_error(y_fast, y_naive), tol);
        EXPECT_LE(normalized_error(y_fast, y_naive), 2 * tol);
        EXPECT_EQ(bits(down(false, accumulate)), bits(y_fast));  // deterministic: the same bits run to run

        // The five-launch path's naive kernels (slot order, the combine apart) give the same sums.
        cuda::MoeGroupedArgs gu;
        gu.x = d_h.get();
        gu.x_rows = sorted.s.pair_of_slot;
        gu.x_div = K;
        gu.w = d_gu.get();
        cuda::DeviceBuffer act_slots(P * I * esz), out_slots(P * C * esz);
        gu.out = act_slots.get();
        gu.offsets = sorted.s.offsets;
        gu.tile_starts = sorted.s.tile_starts;
        gu.active = sorted.s.active;
        gu.P = P;
        gu.E = E;
        gu.N = I;
        gu.K = C;
        gu.gated = true;
        cuda::MoeGroupedArgs dn = gu;
        dn.x = act_slots.get();
        dn.x_rows = nullptr;
        dn.x_div = 1;
        dn.w = d_dn.get();
        dn.out = out_slots.get();
        dn.N = C;
        dn.K = I;
        dn.gated = false;
        cuda::moe_grouped_naive(gu, dt, nullptr);
        cuda::moe_grouped_naive(dn, dt, nullptr);
        cuda::DeviceBuffer y_old = to_device(accumulate ? y0 : std::vector<float>(T * C, NAN));
        cuda::moe_combine_naive(out_slots.get(), dt, sorted.s.slot_of_pair, weight, y_old.as<float>(), accumulate, T,
                                K, C, nullptr);
        EXPECT_LE(normalized_error(y_naive, to_host<float>(y_old, T * C)), 1e-6);
        // act in slot order is the pair-order act permuted.
        const auto slots = decode(to_host<uint8_t>(act_slots, P * I * esz), dt);
        const auto slot_of_pair = to_host<int32_t>(sorted.meta, 3 * (E + 1) + 2 * P);
        for (int64_t p = 0; p < P; ++p) {
          const int64_t r = slot_of_pair[3 * (E + 1) + P + p];
          ASSERT_EQ(bits(std::vector<float>(slots.begin() + r * I, slots.begin() + (r + 1) * I)),
                    bits(std::vector<float>(a_naive.begin() + p * I, a_naive.begin() + (p + 1) * I)))
              << "pair " << p;
        }
      }
    }
  }
}

struct StagedCase {
  int64_t T, E, K, I, C;
};

// The staged down+combine (3'.) against the naive reference (tolerance) and session 18's form (3.)
// bit for bit, overwrite and accumulate, twice (the same bits); the bulk-copy form (3b.) against
// 3'. bit for bit, twice.
TEST_F(CudaMoeDecode, PairDownStagedMatchesNaiveAndV1) {
  const std::vector<StagedCase> cases = {
      // The 30B-A3B decode step's C, I, k (16 experts, not 128: the host's random weights):
      {1, 16, 8, 768, 2048},   // 8 columns per block, 256 blocks
      {2, 16, 8, 768, 2048},   // tokens sharing experts
      {4, 16, 8, 768, 2048},
      {8, 16, 8, 768, 2048},   // kMoeRouteSortMaxTokens
      {1, 12, 8, 64, 48},      // tiny
      {8, 16, 4, 40, 200},     // I of 5 vectors (lanes past I8 idle), C of 25 blocks
      {3, 40, 32, 64, 64},     // k = 32: each warp sums 4 pairs
      {2, 13, 3, 1032, 2056},  // I past 32 vectors per lane pass; 8 columns still fit
      {2, 10, 6, 1032, 136},   // 6 x 9 x 1032 x 2 B > 110,592: 4 columns per block
      {1, 10, 8, 2048, 64},    // 2 columns per block
      {1, 40, 32, 768, 16},    // 32 x 3 x 768 x 2 B > 110,592: 1 column per block
      {1, 64, 2, 1536, 256},   // top 2 of 64, I 1536 (Qwen3-235B-A22B's)
      {1, 8, 8, 776, 4096},    // I of 97 vectors (odd), C 4096
      {2, 8, 2, 1544, 72},     // I of 193 vectors, C of 9 blocks (the last one of 8 columns)
      {1, 128, 8, 64, 2056},   // E 128, 257 blocks (C / 8 odd)
  };
  // The 30B-A3B step: 8 columns per block, 256 blocks, two per SM (one wave on an H200's 132 SMs).
  const cuda::MoeStagedShape sh = cuda::moe_pair_down_staged_shape(1, 8, 2048, 768, DType::BF16);
  EXPECT_EQ(sh.rows, 8);
  EXPECT_EQ(sh.blocks, 256);
  EXPECT_EQ(sh.blocks_per_sm, 2);
  int dev = 0, major = 0;
  VLM_CUDA_CHECK(cudaGetDevice(&dev));
  VLM_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  const bool sm90 = major >= 9;
  for (DType dt : {DType::BF16, DType::F16}) {
    for (const StagedCase& c : cases) {
      const int64_t T = c.T, E = c.E, K = c.K, I = c.I, C = c.C, P = T * K;
      SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " T " << T << " E " << E << " K " << K << " I " << I
                                        << " C " << C);
      ASSERT_TRUE(cuda::moe_pair_down_staged_supported(K, I));
      EXPECT_GE(cuda::moe_pair_down_staged_shape(T, K, C, I, dt).blocks_per_sm, 1);
      const bool bulk = cuda::moe_pair_down_bulk_supported(K, I);  // false below sm_90 only
      EXPECT_EQ(bulk, sm90);
      auto d_logits = to_device(random_vector(T * E, static_cast<uint32_t>(41 + T + E + K), 2.0f));
      cuda::DeviceBuffer d_expert(P * 4), d_weight(P * 4);
      cuda::moe_route(d_logits.as<float>(), T, E, K, true, d_expert.as<int32_t>(), d_weight.as<float>(), nullptr);
      auto d_act = to_device(encode(random_vector(P * I, static_cast<uint32_t>(43 + I)), dt));
      auto d_dn = to_device(encode(random_vector(E * C * I, static_cast<uint32_t>(47 + C), 0.05f), dt));
      const auto y0 = random_vector(T * C, static_cast<uint32_t>(53 + T));
      using DownFn = void (*)(const void*, const void*, const int32_t*, const float*, DType, int64_t, int64_t, int64_t,
                              int64_t, float*, bool, cudaStream_t);
      auto down = [&](DownFn f, bool accumulate) {
        cuda::DeviceBuffer y = to_device(accumulate ? y0 : std::vector<float>(T * C, NAN));
        f(d_act.get(), d_dn.get(), d_expert.as<int32_t>(), d_weight.as<float>(), dt, T, K, C, I, y.as<float>(),
          accumulate, nullptr);
        return to_host<float>(y, T * C);
      };
      const double tol = dt == DType::BF16 ? 2e-2 : 4e-3;
      for (bool accumulate : {false, true}) {
        SCOPED_TRACE(accumulate ? "accumulate" : "overwrite");
        const auto y_staged = down(cuda::moe_pair_down_combine_staged, accumulate);
        const auto y_naive = down(cuda::moe_pair_down_combine_naive, accumulate);
        const auto y_v1 = down(cuda::moe_pair_down_combine, accumulate);
        EXPECT_LE(rel_error(y_staged, y_naive), tol);
        EXPECT_LE(normalized_error(y_staged, y_naive), 2 * tol);
        EXPECT_EQ(bits(y_staged), bits(y_v1));  // the same sums in the same order as 3.
        EXPECT_EQ(bits(down(cuda::moe_pair_down_combine_staged, accumulate)), bits(y_staged));
        // 3b. (bulk copies): 3'.'s sums in 3'.'s order, so 3'.'s bits, twice.
        if (bulk) {
          EXPECT_EQ(bits(down(cuda::moe_pair_down_combine_bulk, accumulate)), bits(y_staged));
          EXPECT_EQ(bits(down(cuda::moe_pair_down_combine_bulk, accumulate)), bits(y_staged));
        }
      }
    }
  }
}

// The staged gate|up (2'.) against the naive reference (tolerance) and session 18's form (2.) bit
// for bit, twice (the same bits).
TEST_F(CudaMoeDecode, PairGateUpStagedMatchesNaiveAndV1) {
  const std::vector<StagedCase> cases = {
      // The 30B-A3B decode step's C, I, k (16 experts, not 128: the host's random weights):
      {1, 16, 8, 768, 2048},   // 12 columns per block, 64 x 8 blocks
      {2, 16, 8, 768, 2048},
      {4, 16, 8, 768, 2048},
      {8, 16, 8, 768, 2048},
      {1, 12, 8, 40, 64},      // I = 40: the last block 4 of 12 columns
      {3, 40, 32, 64, 200},    // k = 32; C of 25 vectors (lanes past C8 idle)
      {2, 10, 6, 96, 2400},    // 25 x 2400 x 2 B > 110,592: 8 columns per block; C past 128 vectors
      {1, 10, 4, 24, 9000},    // 2 columns per block
  };
  for (DType dt : {DType::BF16, DType::F16}) {
    for (const StagedCase& c : cases) {
      const int64_t T = c.T, E = c.E, K = c.K, I = c.I, C = c.C, P = T * K;
      const size_t esz = dtype_size(dt);
      SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " T " << T << " E " << E << " K " << K << " I " << I
                                        << " C " << C);
      ASSERT_TRUE(cuda::moe_pair_gate_up_staged_supported(C));
      auto d_logits = to_device(random_vector(T * E, static_cast<uint32_t>(61 + T + E + K), 2.0f));
      cuda::DeviceBuffer d_expert(P * 4), d_weight(P * 4);
      cuda::moe_route(d_logits.as<float>(), T, E, K, true, d_expert.as<int32_t>(), d_weight.as<float>(), nullptr);
      auto d_h = to_device(encode(random_vector(T * C, static_cast<uint32_t>(67 + C)), dt));
      auto d_gu = to_device(encode(random_vector(E * 2 * I * C, static_cast<uint32_t>(71 + I), 0.05f), dt));
      using GateUpFn = void (*)(const void*, const void*, const int32_t*, DType, int64_t, int64_t, int64_t, int64_t,
                                void*, cudaStream_t);
      auto gate_up = [&](GateUpFn f) {
        cuda::DeviceBuffer act(P * I * esz);
        VLM_CUDA_CHECK(cudaMemset(act.get(), 0xff, act.bytes()));
        f(d_h.get(), d_gu.get(), d_expert.as<int32_t>(), dt, T, K, I, C, act.get(), nullptr);
        return decode(to_host<uint8_t>(act, P * I * esz), dt);
      };
      const auto a_staged = gate_up(cuda::moe_pair_gate_up_staged);
      const auto a_naive = gate_up(cuda::moe_pair_gate_up_naive);
      const double tol = dt == DType::BF16 ? 2e-2 : 4e-3;
      EXPECT_LE(rel_error(a_staged, a_naive), tol);
      EXPECT_LE(normalized_error(a_staged, a_naive), 2 * tol);
      EXPECT_EQ(bits(a_staged), bits(gate_up(cuda::moe_pair_gate_up)));  // the same sums in the same order as 2.
      EXPECT_EQ(bits(gate_up(cuda::moe_pair_gate_up_staged)), bits(a_staged));
    }
  }
}

}  // namespace
}  // namespace vlm::testing
