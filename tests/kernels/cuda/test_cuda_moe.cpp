// The mixture-of-experts kernels (kernels/cuda/moe/moe_cuda.h), each optimized kernel against
// its naive reference and the references against host restatements: routing (softmax, top-k with
// ties to the lower expert, norm_topk, choices in expert order; NaN rows to valid experts) over
// E = 8 .. 1000 and k = 1 .. 8; sorting (offsets, tile starts, the experts with pairs, both
// permutations; pairs ascending within an expert) with experts left empty, one expert taking
// every pair, and 70,000 pairs; the one-launch route and sort against the two kernels; the grouped
// products (tensor-core tiles, per-expert warp GEMVs and tensor-core GEMVs, gated and not, bf16
// and f16) over skewed groups that cross tile edges (over routed groups: test_cuda_moe_gemv.cpp);
// the combine (16-byte and scalar paths, Write and Add); the load-time transpose. Outputs are
// poisoned first so an unwritten element fails. Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "kernels/cuda/moe/moe_cuda.h"
#include "tests/kernels/cuda/cuda_test_util.h"
#include "tests/support/gpu_test.h"

namespace vlm::testing {
namespace {

cuda::DeviceBuffer poisoned(size_t bytes) {
  cuda::DeviceBuffer b(std::max<size_t>(bytes, 4));
  VLM_CUDA_CHECK(cudaMemset(b.get(), 0xff, b.bytes()));
  return b;
}

std::vector<float> download(const cuda::DeviceBuffer& b, size_t n, DType dt) {
  return decode(to_host<uint8_t>(b, n * dtype_size(dt)), dt);
}

// The host's routing of one token (the CPU block's rule, in double): choices by expert, weights.
void host_route(const float* l, int64_t E, int64_t K, bool norm, int32_t* ex, float* wt) {
  std::vector<double> p(static_cast<size_t>(E));
  double mx = -1e300, sum = 0;
  for (int64_t e = 0; e < E; ++e) mx = std::max(mx, double(l[e]));
  for (int64_t e = 0; e < E; ++e) sum += (p[e] = std::exp(double(l[e]) - mx));
  for (double& v : p) v /= sum;
  std::vector<int32_t> order(static_cast<size_t>(E));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return p[a] > p[b]; });
  double ws = 0;
  for (int64_t j = 0; j < K; ++j) ws += p[order[j]];
  std::sort(order.begin(), order.begin() + K);
  for (int64_t j = 0; j < K; ++j) {
    ex[j] = order[j];
    wt[j] = static_cast<float>(norm ? p[order[j]] / ws : p[order[j]]);
  }
}

class CudaMoe : public ::testing::Test {
 protected:
  void SetUp() override { VLM_REQUIRE_GPU(); }
};

TEST_F(CudaMoe, RouteMatchesNaiveAndHost) {
  struct Case { int64_t T, E, K; };
  for (const Case c : {Case{1, 8, 2}, Case{67, 8, 1}, Case{33, 128, 8}, Case{5, 1000, 8}, Case{9, 8, 8}}) {
    for (bool norm : {false, true}) {
      const int64_t T = c.T, E = c.E, K = c.K;
      auto logits = random_vector(T * E, 11 + T + E, 2.0f);
      if (T > 3) std::fill(logits.begin() + 3 * E, logits.begin() + 4 * E, 0.5f);  // token 3: all tied
      auto d_l = to_device(logits);
      auto run = [&](bool naive) {
        auto d_e = poisoned(T * K * 4), d_w = poisoned(T * K * 4);
        (naive ? cuda::moe_route_naive : cuda::moe_route)(d_l.as<float>(), T, E, K, norm, d_e.as<int32_t>(),
                                                           d_w.as<float>(), nullptr);
        return std::make_pair(to_host<int32_t>(d_e, T * K), to_host<float>(d_w, T * K));
      };
      const auto fast = run(false), naive = run(true);
      std::vector<int32_t> ex(T * K);
      std::vector<float> wt(T * K);
      for (int64_t t = 0; t < T; ++t) host_route(&logits[t * E], E, K, norm, &ex[t * K], &wt[t * K]);
      SCOPED_TRACE(::testing::Message() << "T " << T << " E " << E << " K " << K << " norm " << norm);
      EXPECT_EQ(naive.first, ex);
      EXPECT_EQ(fast.first, naive.first);
      for (size_t i = 0; i < wt.size(); ++i) {
        EXPECT_NEAR(naive.second[i], wt[i], 2e-6) << i;
        EXPECT_NEAR(fast.second[i], naive.second[i], 2e-6) << i;
      }
    }
  }
}

// A row of NaN logits (or all -inf: softmax 0/0) still routes to valid experts (the lowest
// ones), never past E: the sort indexes by the choices.
TEST_F(CudaMoe, RouteOfNanRowsChoosesValidExperts) {
  const int64_t T = 2, E = 8, K = 2;
  std::vector<float> logits(T * E, std::nanf(""));
  std::fill(logits.begin() + E, logits.end(), -INFINITY);
  auto d_l = to_device(logits);
  for (bool naive : {false, true}) {
    auto d_e = poisoned(T * K * 4), d_w = poisoned(T * K * 4);
    (naive ? cuda::moe_route_naive : cuda::moe_route)(d_l.as<float>(), T, E, K, true, d_e.as<int32_t>(),
                                                       d_w.as<float>(), nullptr);
    EXPECT_EQ(to_host<int32_t>(d_e, T * K), (std::vector<int32_t>{0, 1, 0, 1})) << (naive ? "naive" : "fast");
  }
}

// Runs moe_sort (or the naive one) on `expert` and returns offsets, tile starts, the active
// experts and both permutations (one vector, in that order; unwritten entries poisoned: -1).
// which: 0 moe_sort, 1 moe_sort_naive, 2 moe_sort_per_expert.
std::vector<int32_t> sorted_of(const std::vector<int32_t>& expert, int64_t E, int which) {
  const int64_t P = static_cast<int64_t>(expert.size());
  auto d_x = to_device(expert);
  auto d_meta = poisoned((3 * (E + 1) + 2 * P) * 4);
  cuda::MoeSorted s;
  s.offsets = d_meta.as<int32_t>();
  s.tile_starts = s.offsets + E + 1;
  s.active = s.tile_starts + E + 1;
  s.pair_of_slot = s.active + E + 1;
  s.slot_of_pair = s.pair_of_slot + P;
  (which == 1 ? cuda::moe_sort_naive : which == 2 ? cuda::moe_sort_per_expert : cuda::moe_sort)(d_x.as<int32_t>(), P,
                                                                                                E, s, nullptr);
  return to_host<int32_t>(d_meta, 3 * (E + 1) + 2 * P);
}

TEST_F(CudaMoe, SortMatchesNaiveAndGroupsPairsByExpert) {
  struct Case { int64_t P, E; int skew; };  // skew 0: uniform; 1: every pair to expert E-1; 2: even experts only
  // P >= kMoeSortChunk (1024) runs the chunked sort: one chunk (1024, 2047), a last chunk
  // longer than the others (70000, 5000), every pair to one expert over 64 chunks (65536).
  for (const Case c : {Case{1, 8, 0}, Case{16, 8, 2}, Case{513, 8, 0}, Case{300, 128, 1}, Case{70000, 128, 0},
                       Case{4096, 1, 0}, Case{999, 1000, 2}, Case{1024, 1000, 0}, Case{2047, 1024, 2},
                       Case{65536, 128, 1}, Case{65536, 128, 0}, Case{5000, 3, 0}}) {
    std::mt19937 rng(static_cast<uint32_t>(c.P + c.E));
    std::vector<int32_t> expert(c.P);
    for (int32_t& e : expert) {
      e = static_cast<int32_t>(rng() % c.E);
      if (c.skew == 1) e = static_cast<int32_t>(c.E - 1);
      if (c.skew == 2) e -= e % 2;
    }
    const auto fast = sorted_of(expert, c.E, 0), naive = sorted_of(expert, c.E, 1);
    SCOPED_TRACE(::testing::Message() << "P " << c.P << " E " << c.E << " skew " << c.skew);
    EXPECT_EQ(fast, naive);
    EXPECT_EQ(sorted_of(expert, c.E, 2), naive);
    // The host's grouping: counts, stable order.
    const int32_t* off = naive.data();
    const int32_t* tiles = off + c.E + 1;
    const int32_t* active = tiles + c.E + 1;
    const int32_t* pos = active + c.E + 1;
    const int32_t* slot = pos + c.P;
    std::vector<int32_t> want_off(c.E + 1, 0);
    for (int32_t e : expert) ++want_off[e + 1];
    int32_t want_tiles = 0;
    for (int64_t e = 0; e < c.E; ++e) {
      EXPECT_EQ(tiles[e], want_tiles) << e;
      want_tiles += (want_off[e + 1] + cuda::kMoeTileRows - 1) / cuda::kMoeTileRows;
      want_off[e + 1] += want_off[e];
    }
    EXPECT_EQ(tiles[c.E], want_tiles);
    EXPECT_LE(want_tiles, cuda::moe_max_tiles(c.P, c.E));
    EXPECT_EQ(std::vector<int32_t>(off, off + c.E + 1), want_off);
    std::vector<int32_t> want_active;
    for (int64_t e = 0; e < c.E; ++e)
      if (want_off[e + 1] > want_off[e]) want_active.push_back(static_cast<int32_t>(e));
    ASSERT_EQ(active[c.E], static_cast<int32_t>(want_active.size()));
    EXPECT_EQ(std::vector<int32_t>(active, active + want_active.size()), want_active);
    std::vector<int32_t> fill(want_off.begin(), want_off.end() - 1);
    for (int64_t i = 0; i < c.P; ++i) {
      const int32_t r = fill[expert[i]]++;
      ASSERT_EQ(pos[r], i) << "slot " << r;
      ASSERT_EQ(slot[i], r) << "pair " << i;
    }
  }
}

// moe_route_sort (one block for T <= kMoeRouteSortMaxTokens, else the two kernels) gives what moe_route then
// moe_sort give, bit for bit, and the naive pair agrees on the choices and the groups: tokens 1 ..
// 8 (the one-block path) and past the one-block limit, E not a multiple of 32, E past
// the block's threads (several experts per thread in the scan), all-tied and NaN rows.
TEST_F(CudaMoe, RouteSortMatchesRouteThenSort) {
  struct Case { int64_t T, E, K; };
  for (const Case c : {Case{1, 128, 8}, Case{64, 128, 8}, Case{37, 13, 3}, Case{64, 1000, 8}, Case{63, 8, 8},
                       Case{65, 128, 8}, Case{2, 1, 1}, Case{8, 128, 8}, Case{8, 1000, 8}, Case{7, 13, 3},
                       Case{6, 8, 8}}) {
    const int64_t T = c.T, E = c.E, K = c.K, P = T * K;
    auto logits = random_vector(T * E, static_cast<uint32_t>(31 + T + E), 2.0f);
    if (T > 3) std::fill(logits.begin() + 2 * E, logits.begin() + 3 * E, 0.25f);       // token 2: all tied
    if (T > 5) std::fill(logits.begin() + 4 * E, logits.begin() + 5 * E, std::nanf(""));  // token 4: NaN
    auto d_l = to_device(logits);
    auto run = [&](int which) {  // 0 moe_route_sort, 1 moe_route + moe_sort, 2 naive
      auto d_e = poisoned(P * 4), d_w = poisoned(P * 4), d_meta = poisoned((3 * (E + 1) + 2 * P) * 4);
      cuda::MoeSorted s;
      s.offsets = d_meta.as<int32_t>();
      s.tile_starts = s.offsets + E + 1;
      s.active = s.tile_starts + E + 1;
      s.pair_of_slot = s.active + E + 1;
      s.slot_of_pair = s.pair_of_slot + P;
      if (which == 0) {
        cuda::moe_route_sort(d_l.as<float>(), T, E, K, true, d_e.as<int32_t>(), d_w.as<float>(), s, nullptr);
      } else {
        (which == 1 ? cuda::moe_route : cuda::moe_route_naive)(d_l.as<float>(), T, E, K, true, d_e.as<int32_t>(),
                                                               d_w.as<float>(), nullptr);
        (which == 1 ? cuda::moe_sort : cuda::moe_sort_naive)(d_e.as<int32_t>(), P, E, s, nullptr);
      }
      auto meta = to_host<int32_t>(d_meta, 3 * (E + 1) + 2 * P);
      auto ex = to_host<int32_t>(d_e, P);
      meta.insert(meta.end(), ex.begin(), ex.end());
      return std::make_pair(meta, to_host<float>(d_w, P));
    };
    const auto fused = run(0), two = run(1), naive = run(2);
    SCOPED_TRACE(::testing::Message() << "T " << T << " E " << E << " K " << K);
    EXPECT_EQ(fused.first, two.first);
    EXPECT_EQ(fused.second, two.second);  // the same routing code: bitwise
    EXPECT_EQ(fused.first, naive.first);
    for (int64_t i = 0; i < P; ++i) EXPECT_NEAR(fused.second[i], naive.second[i], 2e-6) << i;
  }
}

// A grouped product's inputs: experts of `counts` pairs, x rows through a permutation.
struct GroupedCase {
  int64_t E, N, K, x_div;
  std::vector<int32_t> counts;
  bool gated;
};

TEST_F(CudaMoe, GroupedProductsMatchNaiveAndHost) {
  const std::vector<GroupedCase> cases = {
      {8, 40, 64, 2, {1, 0, 3, 0, 0, 2, 1, 1}, true},              // decode-like, empty experts
      {8, 96, 200, 2, {150, 0, 128, 129, 1, 0, 7, 33}, true},      // tiles: full, one past, partial
      {8, 64, 40, 1, {0, 129, 2, 0, 0, 0, 0, 5}, false},           // down: x rows = slots
      {4, 128, 96, 8, {70, 9, 0, 40}, true},                       // two column tiles, K = 3 steps
      {3, 33, 16, 1, {3, 1, 2}, false},                            // N not a multiple of 64 or 8
      {5, 200, 40, 1, {300, 0, 129, 128, 1}, false},               // 2 column tiles, K past a 32-step
      {2, 72, 2056, 4, {257, 3}, true},                            // long K, 3 row tiles
  };
  for (DType dt : {DType::BF16, DType::F16}) {
    for (const GroupedCase& g : cases) {
      const int64_t E = g.E, N = g.N, K = g.K, G = g.gated ? 2 : 1;
      std::vector<int32_t> offsets(E + 1, 0);
      for (int64_t e = 0; e < E; ++e) offsets[e + 1] = offsets[e] + g.counts[e];
      const int64_t P = offsets[E];
      const int64_t rows = g.x_div > 1 ? P / g.x_div + 1 : P;  // x rows (tokens when x_div = top-k)
      const auto x = round_to(random_vector(std::max<int64_t>(rows, 1) * K, 5 + K), dt);
      const auto w = round_to(random_vector(E * G * N * K, 6 + N, 0.1f), dt);
      std::vector<int32_t> x_rows(P), expert(P), tiles(E + 1, 0), active(E + 1, -1);
      int32_t busy = 0;
      for (int64_t e = 0; e < E; ++e)
        if (g.counts[e] > 0) active[busy++] = static_cast<int32_t>(e);
      active[E] = busy;
      std::mt19937 rng(3);
      for (int64_t r = 0; r < P; ++r) x_rows[r] = static_cast<int32_t>(rng() % (rows * g.x_div));
      for (int64_t e = 0; e < E; ++e) {
        for (int32_t r = offsets[e]; r < offsets[e + 1]; ++r) expert[r] = static_cast<int32_t>(e);
        tiles[e + 1] = tiles[e] + (g.counts[e] + cuda::kMoeTileRows - 1) / cuda::kMoeTileRows;
      }
      auto d_x = to_device(encode(x, dt)), d_w = to_device(encode(w, dt));
      auto d_off = to_device(offsets), d_tiles = to_device(tiles), d_rows = to_device(x_rows);
      auto d_active = to_device(active);
      // 0 tiles (v2), 1 gemv, 2 naive, 3 tensor-core gemv, 4 tiles old, 5 tiles v2c, 6 tiles v3
      auto run = [&](int which) {
        auto d_out = poisoned(P * N * dtype_size(dt));
        cuda::MoeGroupedArgs a;
        a.x = d_x.get();
        a.x_rows = g.x_div > 1 ? d_rows.as<int32_t>() : nullptr;
        a.x_div = g.x_div;
        a.w = d_w.get();
        a.out = d_out.get();
        a.offsets = d_off.as<int32_t>();
        a.tile_starts = d_tiles.as<int32_t>();
        a.active = d_active.as<int32_t>();
        a.P = P;
        a.E = E;
        a.N = N;
        a.K = K;
        a.gated = g.gated;
        a.tile_form = which == 4   ? cuda::kMoeTilesOld
                      : which == 5 ? cuda::kMoeTilesV2c
                      : which == 6 ? cuda::kMoeTilesV3
                                   : cuda::kMoeTilesV2;
        if (which == 0 || which >= 4) cuda::moe_grouped(a, dt, nullptr);
        else if (which == 1) cuda::moe_grouped_gemv(a, dt, nullptr);
        else if (which == 3) cuda::moe_grouped_mma_gemv(a, dt, nullptr);
        else cuda::moe_grouped_naive(a, dt, nullptr);
        return download(d_out, P * N, dt);
      };
      const auto tiles_out = run(0), gemv_out = run(1), naive = run(2), mma_out = run(3), tiles2 = run(4);
      const auto tiles_v2c = run(5), tiles_v3 = run(6);
      std::vector<float> want(P * N);
      for (int64_t r = 0; r < P; ++r) {
        const int64_t e = expert[r], xr = g.x_div > 1 ? x_rows[r] / g.x_div : r;
        for (int64_t n = 0; n < N; ++n) {
          double a = 0, b = 0;
          for (int64_t k = 0; k < K; ++k) {
            a += double(x[xr * K + k]) * w[((e * G) * N + n) * K + k];
            if (g.gated) b += double(x[xr * K + k]) * w[((e * G + 1) * N + n) * K + k];
          }
          want[r * N + n] = static_cast<float>(g.gated ? a / (1 + std::exp(-a)) * b : a);
        }
      }
      const double tol = dt == DType::BF16 ? 2e-2 : 4e-3;
      SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " E " << E << " N " << N << " K " << K << " P " << P
                                        << (g.gated ? " gated" : ""));
      EXPECT_LE(rel_error(naive, want), tol);
      EXPECT_LE(rel_error(tiles_out, naive), tol);
      EXPECT_LE(rel_error(gemv_out, naive), tol);
      EXPECT_LE(rel_error(mma_out, naive), tol);
      EXPECT_EQ(tiles2, tiles_out);  // the same products in the same order: every tile form
      EXPECT_EQ(tiles_v2c, tiles_out);
      EXPECT_EQ(tiles_v3, tiles_out);
    }
  }
}

TEST_F(CudaMoe, NaiveGroupedProductIsExactInF32) {
  const int64_t E = 3, N = 7, K = 13;
  const std::vector<int32_t> offsets = {0, 2, 2, 5};
  const int64_t P = 5;
  const auto x = random_vector(P * K, 1), w = random_vector(E * 2 * N * K, 2, 0.3f);
  auto d_x = to_device(x), d_w = to_device(w), d_off = to_device(offsets);
  auto d_out = poisoned(P * N * 4);
  cuda::MoeGroupedArgs a;
  a.x = d_x.get();
  a.w = d_w.get();
  a.out = d_out.get();
  a.offsets = d_off.as<int32_t>();
  a.P = P;
  a.E = E;
  a.N = N;
  a.K = K;
  a.gated = true;
  cuda::moe_grouped_naive(a, DType::F32, nullptr);
  const auto got = to_host<float>(d_out, P * N);
  for (int64_t r = 0; r < P; ++r) {
    const int64_t e = r < 2 ? 0 : 2;
    for (int64_t n = 0; n < N; ++n) {
      double g = 0, u = 0;
      for (int64_t k = 0; k < K; ++k) g += double(x[r * K + k]) * w[(e * 2 * N + n) * K + k],
                                      u += double(x[r * K + k]) * w[(e * 2 * N + N + n) * K + k];
      EXPECT_NEAR(got[r * N + n], g / (1 + std::exp(-g)) * u, 1e-5 * (1 + std::abs(g * u))) << r << " " << n;
    }
  }
}

TEST_F(CudaMoe, CombineMatchesNaiveAndHost) {
  for (DType dt : {DType::BF16, DType::F32}) {
    // K = 11: the 16-byte form's loads in two batches (8 + 3); shift 1: y not 16-byte aligned.
    for (int64_t C : {64, 20}) {
      for (int cfg = 0; cfg < 8; ++cfg) {
        const bool acc = (cfg & 1) != 0;
        const int64_t K = (cfg & 2) != 0 ? 11 : 3, shift = (cfg >> 2) & 1, T = 37, P = T * K;
        const auto out = round_to(random_vector(P * C, 4), dt);
        const auto wt = random_vector(P, 5, 0.5f), y0 = random_vector(T * C, 6);
        std::vector<int32_t> slot(P);
        std::iota(slot.begin(), slot.end(), 0);
        std::shuffle(slot.begin(), slot.end(), std::mt19937(7));
        auto d_out = to_device(encode(out, dt)), d_wt = to_device(wt), d_slot = to_device(slot);
        auto run = [&](bool naive) {
          std::vector<float> y_init(shift, 0.f);
          y_init.insert(y_init.end(), y0.begin(), y0.end());
          auto d_y = acc ? to_device(y_init) : poisoned((T * C + shift) * 4);
          (naive ? cuda::moe_combine_naive : cuda::moe_combine)(d_out.get(), dt, d_slot.as<int32_t>(), d_wt.as<float>(),
                                                                 d_y.as<float>() + shift, acc, T, K, C, nullptr);
          const auto all = to_host<float>(d_y, T * C + shift);
          return std::vector<float>(all.begin() + shift, all.end());
        };
        const auto fast = run(false), naive = run(true);
        std::vector<float> want(T * C);
        for (int64_t t = 0; t < T; ++t)
          for (int64_t c = 0; c < C; ++c) {
            double s = 0;
            for (int64_t j = 0; j < K; ++j) s += double(out[slot[t * K + j] * C + c]) * wt[t * K + j];
            want[t * C + c] = static_cast<float>((acc ? y0[t * C + c] : 0.0) + s);
          }
        SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " C " << C << " K " << K << " shift " << shift
                                          << " acc " << acc);
        EXPECT_LE(rel_error(naive, want), 1e-6);
        EXPECT_LE(rel_error(fast, naive), 1e-6);
      }
    }
  }
}

TEST_F(CudaMoe, TransposeSlicesMatchesHost) {
  for (DType dt : {DType::BF16, DType::F32}) {
    const int64_t E = 3, R = 70, Cc = 45;
    const auto src = round_to(random_vector(E * R * Cc, 8), dt);
    auto d_src = to_device(encode(src, dt));
    auto d_dst = poisoned(E * R * Cc * dtype_size(dt));
    cuda::moe_transpose_slices(d_src.get(), d_dst.get(), E, R, Cc, dt, nullptr);
    const auto got = download(d_dst, E * R * Cc, dt);
    for (int64_t e = 0; e < E; ++e)
      for (int64_t r = 0; r < R; ++r)
        for (int64_t c = 0; c < Cc; ++c)
          ASSERT_EQ(got[(e * Cc + c) * R + r], src[(e * R + r) * Cc + c]) << e << " " << r << " " << c;
  }
}

}  // namespace
}  // namespace vlm::testing
