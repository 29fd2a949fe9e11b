// SinkRouter on the GPU (kernels/cuda/sink_router + the group skip of paged_decode_attention)
// against the CPU's kernels/sink_router on the same inputs:
//  - the anchors gathered from the cache equal load_first_token_kv's;
//  - the group scores equal sink_group_scores bit for bit and the skip decisions equal
//    sink_route_groups(score, SinkRouterConfig::threshold(ctx)) for min/mean/max and tau(L)
//    cubics (so the decisions are identical, not just close), both with gathered anchors and
//    with the one-launch sink_route_from_cache, and with sink_route_from_stores reading one layer
//    of per-sequence anchor stores filled by sink_capture_anchors (NaN in their other layers);
//  - the group-skipping decode reads nothing of a sink group: those groups' blocks (K and V) are
//    poisoned with NaN, their heads get the surrogate exactly, and the active heads match
//    group_skip_decode_ref within the CPU tests' bound (1e-5) on an f32 cache and the dense GPU
//    kernel's tolerance on bf16/f16 caches (one and many splits, partly and wholly skipped rows).
// An FP8 cache (--kv-cache-dtype fp8: E4M3 bytes, per-head scales) is checked the same way
// against the CPU over its dequantized values (anchors and scores bit for bit; the decode within
// the bf16 tolerance).
// Skips with a message when no GPU is visible.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/attention/paged_kv.h"
#include "kernels/core/fp8.h"
#include "kernels/cuda/attention/cuda_attention.h"
#include "kernels/cuda/sink_router/cuda_sink_router.h"
#include "kernels/sink_router/first_token_kv.h"
#include "kernels/sink_router/group_skip_decode.h"
#include "kernels/sink_router/sink_routing.h"
#include "tests/kernels/cuda/cuda_test_util.h"
#include "tests/support/gpu_test.h"

namespace vlm {
namespace {

using testing::to_device;
using testing::to_host;

// S decode sequences over one paged layer (shuffled blocks, a spare block), cache dtype dt;
// queries [S, H, D] f32 whose group g of sequence s leans towards the sequence's first key with a
// random strength (so groups route and others do not).
struct GpuDecodeSetup {
  int H, Hkv, D, B;
  DType dt;
  std::vector<int> ctx;
  int max_blocks = 0, total = 1;
  std::vector<uint8_t> kbuf, vbuf;
  PagedKVLayer kv;  // host
  std::vector<int32_t> tables;
  std::vector<float> q;

  GpuDecodeSetup(int H_, int Hkv_, int D_, int B_, DType dt_, std::vector<int> ctx_, uint32_t seed)
      : H(H_), Hkv(Hkv_), D(D_), B(B_), dt(dt_), ctx(std::move(ctx_)) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd;
    std::uniform_real_distribution<float> uni(0.f, 3.f);
    for (int c : ctx) {
      max_blocks = std::max(max_blocks, (c + B - 1) / B);
      total += (c + B - 1) / B;
    }
    kv = PagedKVLayer{nullptr, nullptr, dt, total, B, Hkv, D};
    kbuf.assign(size_t(total) * kv.block_stride() * dtype_size(dt), 0);
    vbuf.assign(kbuf.size(), 0);
    kv.k = kbuf.data();
    kv.v = vbuf.data();
    std::vector<int32_t> perm(total);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    tables.assign(size_t(S()) * max_blocks, -1);
    const int G = H / Hkv;
    q.resize(size_t(S()) * H * D);
    for (int s = 0, next = 0; s < S(); ++s) {
      std::vector<float> k(size_t(ctx[s]) * Hkv * D), v(k.size());
      for (auto& x : k) x = nd(rng);
      for (auto& x : v) x = nd(rng);
      std::vector<int32_t> slots(ctx[s]);
      for (int j = 0; j < (ctx[s] + B - 1) / B; ++j) tables[size_t(s) * max_blocks + j] = perm[next++];
      for (int j = 0; j < ctx[s]; ++j) slots[j] = tables[size_t(s) * max_blocks + j / B] * B + j % B;
      write_kv(kv, k.data(), v.data(), slots.data(), ctx[s]);
      for (int g = 0; g < Hkv; ++g) {
        const float alpha = uni(rng);
        for (int i = 0; i < G; ++i)
          for (int d = 0; d < D; ++d)
            q[(size_t(s) * H + g * G + i) * D + d] = alpha * k[size_t(g) * D + d] + nd(rng);
      }
    }
  }
  int S() const { return int(ctx.size()); }
  // NaN over kv head g of every block of sequence s (host copy; upload after).
  void poison(int s, int g) {
    const int64_t esz = int64_t(dtype_size(dt));
    for (int j = 0; j < (ctx[s] + B - 1) / B; ++j) {
      const int64_t e = tables[size_t(s) * max_blocks + j] * kv.block_stride() + g * kv.head_stride();
      std::memset(kbuf.data() + e * esz, 0xff, size_t(kv.head_stride() * esz));  // NaN in every dtype
      std::memset(vbuf.data() + e * esz, 0xff, size_t(kv.head_stride() * esz));
      if (!k8.empty()) {  // E4M3 NaN
        std::memset(k8.data() + e, 0xff, size_t(kv.head_stride()));
        std::memset(v8.data() + e, 0xff, size_t(kv.head_stride()));
      }
    }
  }
  // An F32 setup as an FP8 cache: k8/v8 the E4M3 bytes under per-head scales (1.0 on odd heads,
  // 1/32 on even ones), and the host cache (what the CPU references read) their dequantized values.
  void to_fp8() {
    ASSERT_EQ(dt, DType::F32);
    ks.resize(Hkv);
    vs.resize(Hkv);
    for (int h = 0; h < Hkv; ++h) ks[h] = vs[h] = h % 2 ? 1.0f : 1.0f / 32;
    const int64_t n = kv.num_blocks * kv.block_stride();
    k8.resize(size_t(n));
    v8.resize(size_t(n));
    float* k = reinterpret_cast<float*>(kbuf.data());
    float* v = reinterpret_cast<float*>(vbuf.data());
    for (int64_t i = 0; i < n; ++i) {
      const int h = int(i / kv.head_stride() % Hkv);
      k8[size_t(i)] = f32_to_fp8_e4m3(k[i] * (1.0f / ks[h]));
      v8[size_t(i)] = f32_to_fp8_e4m3(v[i] * (1.0f / vs[h]));
      k[i] = fp8_e4m3_to_f32(k8[size_t(i)]) * ks[h];
      v[i] = fp8_e4m3_to_f32(v8[size_t(i)]) * vs[h];
    }
  }
  std::vector<uint8_t> k8, v8;  // FP8 (to_fp8): the device cache's bytes
  std::vector<float> ks, vs;    // and its scales [Hkv]
};

// The device copy of a setup and its decode batch.
struct DeviceDecode {
  cuda::DeviceBuffer k, v, tables, ctx, ks, vs;
  PagedKVLayer kv;
  cuda::CudaAttentionBatch batch;
  explicit DeviceDecode(const GpuDecodeSetup& st)
      : k(to_device(st.k8.empty() ? st.kbuf : st.k8)), v(to_device(st.k8.empty() ? st.vbuf : st.v8)),
        tables(to_device(st.tables)), ctx(to_device(st.ctx)) {
    kv = st.kv;
    kv.k = k.get();
    kv.v = v.get();
    if (!st.k8.empty()) {  // the FP8 cache
      ks = to_device(st.ks);
      vs = to_device(st.vs);
      kv.dtype = DType::F8_E4M3;
      kv.k_scale = ks.as<float>();
      kv.v_scale = vs.as<float>();
    }
    batch.num_seqs = st.S();
    batch.context_lens = ctx.as<int32_t>();
    batch.block_tables = tables.as<int32_t>();
    batch.max_blocks_per_seq = st.max_blocks;
    batch.max_q_len = 1;
    batch.max_context_len = *std::max_element(st.ctx.begin(), st.ctx.end());
  }
};

TEST(CudaSinkRouter, AnchorsAndDecisionsEqualTheCpus) {
  VLM_REQUIRE_GPU();
  struct Shape { int H, Hkv, D, B; DType dt; std::vector<int> ctx; bool fp8 = false; };
  const std::vector<Shape> shapes = {{28, 4, 128, 16, DType::BF16, {1, 300, 5000, 17, 40000}},
                                     {14, 2, 64, 16, DType::F32, {33, 2049, 7}},
                                     {8, 1, 64, 32, DType::F16, {513, 90}},
                                     {12, 4, 40, 8, DType::F32, {99, 250}},
                                     {28, 4, 128, 16, DType::F32, {1, 300, 5000, 17}, true}};  // FP8 cache
  // tau(L): a constant, and a cubic clamped on both sides.
  std::vector<SinkRouterConfig> configs(6);
  for (int i = 0; i < 6; ++i) {
    configs[i].aggregation = i % 3 == 0 ? SinkAggregation::Min : i % 3 == 1 ? SinkAggregation::Mean : SinkAggregation::Max;
    if (i >= 3) {
      configs[i].c0 = 0.4, configs[i].c1 = 0.3, configs[i].c2 = -0.05, configs[i].c3 = 0.01;
      configs[i].length_ref = 1000, configs[i].tau_min = 0.3, configs[i].tau_max = 0.9;
    } else {
      configs[i].c0 = 0.45;
    }
  }
  uint32_t seed = 11;
  int64_t decisions = 0, skipped = 0;
  for (const Shape& sh : shapes) {
    GpuDecodeSetup st(sh.H, sh.Hkv, sh.D, sh.B, sh.dt, sh.ctx, seed++);
    if (sh.fp8) st.to_fp8();
    DeviceDecode dev(st);
    const int S = st.S(), Hkv = sh.Hkv, D = sh.D;
    cuda::DeviceBuffer dq = to_device(st.q), ak(size_t(S) * Hkv * D * 4), av(size_t(S) * Hkv * D * 4),
                       scores(size_t(S) * Hkv * 4), skip(size_t(S) * Hkv), count(size_t(S) * 4);
    cuda::sink_gather_anchors(dev.kv, dev.batch.block_tables, st.max_blocks, S, ak.as<float>(), av.as<float>(), nullptr);
    const auto gk = to_host<float>(ak, size_t(S) * Hkv * D), gv = to_host<float>(av, size_t(S) * Hkv * D);
    std::vector<float> ck(size_t(S) * Hkv * D), cv(ck.size());
    for (int s = 0; s < S; ++s)
      load_first_token_kv(st.kv, st.tables[size_t(s) * st.max_blocks], ck.data() + size_t(s) * Hkv * D,
                          cv.data() + size_t(s) * Hkv * D);
    ASSERT_EQ(gk, ck);
    ASSERT_EQ(gv, cv);
    // Per-sequence stores [2, 3 layers, Hkv, D], layer 1 captured, NaN elsewhere.
    constexpr int kLayers = 3, kLayer = 1;
    std::vector<cuda::DeviceBuffer> stores;
    std::vector<const float*> ptrs;
    for (int s = 0; s < S; ++s) {
      stores.emplace_back(size_t(2) * kLayers * Hkv * D * 4);
      VLM_CUDA_CHECK(cudaMemset(stores.back().get(), 0xff, stores.back().bytes()));
      cuda::sink_capture_anchors(dev.kv, dev.batch.block_tables + int64_t(s) * st.max_blocks, kLayer, kLayers,
                                 stores.back().as<float>(), nullptr);
      ptrs.push_back(stores.back().as<float>());
    }
    const cuda::DeviceBuffer dptrs = to_device(ptrs);
    for (const SinkRouterConfig& cfg : configs) {
      SCOPED_TRACE(::testing::Message() << "H=" << sh.H << " D=" << D << " agg=" << sink_aggregation_name(cfg.aggregation)
                                      << " c1=" << cfg.c1);
      VLM_CUDA_CHECK(cudaMemset(count.get(), 0, count.bytes()));
      cuda::sink_route_groups(dq.get(), DType::F32, sh.H, ak.as<float>(), Hkv, D, dev.batch.context_lens, nullptr, S, cfg,
                              scores.as<float>(), skip.as<uint8_t>(), count.as<int32_t>(), nullptr);
      const auto gs = to_host<float>(scores, size_t(S) * Hkv);
      const auto gf = to_host<uint8_t>(skip, size_t(S) * Hkv);
      const auto gc = to_host<int32_t>(count, size_t(S));
      // The decode step's one-launch form (anchors read from the cache) decides the same.
      VLM_CUDA_CHECK(cudaMemset(av.get(), 0, av.bytes()));
      cuda::sink_route_from_cache(dq.get(), DType::F32, sh.H, dev.kv, dev.batch.block_tables, st.max_blocks,
                                  dev.batch.context_lens, nullptr, S, cfg, scores.as<float>(), skip.as<uint8_t>(),
                                  nullptr, av.as<float>(), nullptr);
      EXPECT_EQ(to_host<float>(scores, size_t(S) * Hkv), gs);
      EXPECT_EQ(to_host<uint8_t>(skip, size_t(S) * Hkv), gf);
      EXPECT_EQ(to_host<float>(av, size_t(S) * Hkv * D), cv);
      // The decode step's form since the anchors live in stores captured at the end of prefill.
      VLM_CUDA_CHECK(cudaMemset(av.get(), 0, av.bytes()));
      cuda::sink_route_from_stores(dq.get(), DType::F32, sh.H, dptrs.as<const float* const>(), kLayer, kLayers, Hkv, D,
                                   dev.batch.context_lens, nullptr, S, cfg, scores.as<float>(), skip.as<uint8_t>(),
                                   nullptr, av.as<float>(), nullptr);
      EXPECT_EQ(to_host<float>(scores, size_t(S) * Hkv), gs);
      EXPECT_EQ(to_host<uint8_t>(skip, size_t(S) * Hkv), gf);
      EXPECT_EQ(to_host<float>(av, size_t(S) * Hkv * D), cv);
      for (int s = 0; s < S; ++s) {
        float cs[64];
        uint8_t cf[64];
        sink_group_scores(st.q.data() + size_t(s) * sh.H * D, sh.H, ck.data() + size_t(s) * Hkv * D, Hkv, D,
                          cfg.aggregation, cs);
        const int n = sink_route_groups(cs, Hkv, cfg.threshold(st.ctx[s]), cf);
        for (int g = 0; g < Hkv; ++g) {
          EXPECT_EQ(gs[size_t(s) * Hkv + g], cs[g]) << "s=" << s << " g=" << g;  // bit for bit
          EXPECT_EQ(gf[size_t(s) * Hkv + g], cf[g]) << "s=" << s << " g=" << g;
        }
        EXPECT_EQ(gc[s], n);
        decisions += Hkv;
        skipped += n;
      }
    }
  }
  // The inputs exercise both outcomes.
  EXPECT_GT(skipped, decisions / 10);
  EXPECT_LT(skipped, decisions * 9 / 10);
  // routed[] off for a sequence: no group of it is skipped.
  GpuDecodeSetup st(8, 2, 64, 16, DType::F32, {100, 200}, 5);
  DeviceDecode dev(st);
  SinkRouterConfig all;
  all.tau_min = all.tau_max = all.c0 = -1.0;  // every routed group is a sink
  cuda::DeviceBuffer dq = to_device(st.q), ak(2 * 2 * 64 * 4), skip(4), routed = to_device(std::vector<uint8_t>{0, 1});
  cuda::sink_gather_anchors(dev.kv, dev.batch.block_tables, st.max_blocks, 2, ak.as<float>(), nullptr, nullptr);
  cuda::sink_route_groups(dq.get(), DType::F32, 8, ak.as<float>(), 2, 64, dev.batch.context_lens, routed.as<uint8_t>(),
                          2, all, nullptr, skip.as<uint8_t>(), nullptr, nullptr);
  EXPECT_EQ(to_host<uint8_t>(skip, 4), (std::vector<uint8_t>{0, 0, 1, 1}));
}

// Group-skipping decode with poisoned sink groups against the CPU reference.
// fp8: dt must be F32; the device cache is FP8 (GpuDecodeSetup::to_fp8), the CPU reads its values.
void check_skip_decode(int H, int Hkv, int D, DType dt, DType act, const std::vector<int>& ctx, bool surrogate,
                       uint32_t seed, bool fp8 = false) {
  SCOPED_TRACE(::testing::Message() << "H=" << H << " Hkv=" << Hkv << " D=" << D << " cache="
                                  << (fp8 ? "F8_E4M3" : dtype_name(dt)) << " act=" << dtype_name(act)
                                  << " ctx0=" << ctx[0] << " surrogate=" << surrogate);
  GpuDecodeSetup st(H, Hkv, D, 16, dt, ctx, seed);
  if (fp8) st.to_fp8();
  const int S = st.S(), G = H / Hkv;
  std::mt19937 rng(seed);
  std::vector<uint8_t> skip(size_t(S) * Hkv);
  for (auto& x : skip) x = rng() % 10 < 6;  // ~60 % sink groups
  skip[0] = 1;
  std::fill(skip.end() - Hkv, skip.end(), 1);  // the last sequence wholly skipped
  if (S > 1) skip[Hkv] = 0;
  std::vector<float> sur(size_t(S) * Hkv * D);
  for (size_t i = 0; i < sur.size(); ++i) sur[i] = 0.25f * float(int(i % 13) - 6);  // exact in bf16
  // Queries rounded through the activation dtype, so the CPU sees the GPU's inputs.
  st.q = testing::round_to(st.q, act);
  std::vector<float> qf = st.q;
  for (int s = 0; s < S; ++s)
    for (int g = 0; g < Hkv; ++g)
      if (skip[size_t(s) * Hkv + g]) st.poison(s, g);
  // CPU reference on the poisoned cache (it skips the same groups).
  std::vector<int32_t> rows(S);
  std::iota(rows.begin(), rows.end(), 0);
  const DecodeBatch cb{S, rows.data(), st.ctx.data(), st.tables.data(), st.max_blocks};
  const float scale = 1.0f / std::sqrt(float(D));
  std::vector<float> ref(qf.size());
  group_skip_decode_ref(qf.data(), H, st.kv, cb, skip.data(), surrogate ? sur.data() : nullptr, scale, ref.data());

  DeviceDecode dev(st);
  cuda::DeviceBuffer dq = to_device(testing::encode(qf, act)), dskip = to_device(skip), dsur = to_device(sur),
                     out(qf.size() * dtype_size(act)),
                     ws(cuda::paged_decode_workspace_bytes(S, H, Hkv, D, dev.batch.max_context_len));
  dev.batch.group_skip = dskip.as<uint8_t>();
  dev.batch.group_surrogate = surrogate ? dsur.as<float>() : nullptr;
  // Tolerance: the CPU tests' 1e-5 on an f32 cache (f32 activations); the dense GPU kernel's
  // normalized bound (test_cuda_attention) on 16-bit caches.
  const bool exact = dt == DType::F32 && act == DType::F32 && !fp8;
  const double tol = exact ? 1e-5 : dt == DType::F16 ? 4e-3 : 2e-2;  // FP8: bf16 mma over its exact values
  double mag = 1e-30;
  for (float x : ref) mag = std::max(mag, double(std::abs(x)));
  // The reduce kernel, then the reduce merged into the split kernel (counters: twice, each call
  // leaving them 0 for the next).
  cuda::DeviceBuffer counters(size_t(S) * Hkv * 4);
  VLM_CUDA_CHECK(cudaMemset(counters.get(), 0, counters.bytes()));
  // An FP8 cache: each decode form (set_fp8_kv_decode_form: v2, v1, v3, v4), the form restored after.
  struct FormGuard {
    int before;
    ~FormGuard() { cuda::set_fp8_kv_decode_form(before); }
  } guard{cuda::set_fp8_kv_decode_form(0)};
  for (int form : fp8 ? std::vector<int>{2, 1, 3, 4} : std::vector<int>{0}) {
    for (int merged = 0; merged < 2; ++merged) {
      if (form != 0) cuda::set_fp8_kv_decode_form(form);
      SCOPED_TRACE(std::string(merged ? "merged reduce" : "reduce kernel") + " fp8 form " + std::to_string(form));
      VLM_CUDA_CHECK(cudaMemset(out.get(), 0x7f, out.bytes()));
      for (int rep = 0; rep <= merged; ++rep)
        cuda::paged_decode_attention(dq.get(), act, H, dev.kv, dev.batch, scale, out.get(), ws.get(), nullptr,
                                     merged ? counters.as<int32_t>() : nullptr);
      const std::vector<float> got = testing::decode(to_host<uint8_t>(out, out.bytes()), act);
      double err = 0;
      for (int s = 0; s < S; ++s)
        for (int h = 0; h < H; ++h) {
          const size_t o = (size_t(s) * H + h) * D;
          const bool sk = skip[size_t(s) * Hkv + h / G];
          for (int d = 0; d < D; ++d) {
            ASSERT_TRUE(std::isfinite(got[o + d])) << "s=" << s << " h=" << h;  // a poisoned read shows as NaN
            if (sk) ASSERT_EQ(got[o + d], surrogate ? sur[(size_t(s) * Hkv + h / G) * D + d] : 0.f);
            else err = std::max(err, std::abs(double(got[o + d]) - ref[o + d]));
          }
        }
      EXPECT_LE(exact ? err : err / mag, tol);
      const std::vector<int32_t> left = to_host<int32_t>(counters, size_t(S) * Hkv);
      EXPECT_EQ(std::count(left.begin(), left.end(), 0), S * Hkv) << "counters not back to 0";
    }
  }
}

TEST(CudaSinkRouter, SkippedGroupsNeverReadTheirCache) {
  VLM_REQUIRE_GPU();
  uint32_t seed = 70;
  for (bool sur : {false, true}) {
    check_skip_decode(28, 4, 128, DType::BF16, DType::BF16, {5000, 130, 20000, 64}, sur, seed++);  // many splits
    check_skip_decode(28, 4, 128, DType::BF16, DType::F32, {1, 17}, sur, seed++);                  // one split
    // One long sequence: its active groups take the sink groups' CTAs (finer partitions).
    check_skip_decode(28, 4, 128, DType::BF16, DType::BF16, {40000, 50}, sur, seed++);
    check_skip_decode(14, 2, 64, DType::F16, DType::F16, {3000, 700}, sur, seed++);
    check_skip_decode(14, 2, 64, DType::F32, DType::F32, {2049, 33, 400}, sur, seed++);             // f32 path
    check_skip_decode(8, 1, 128, DType::F32, DType::F32, {700, 90}, sur, seed++);
    // FP8 caches (the dequantized values on the CPU)
    check_skip_decode(28, 4, 128, DType::F32, DType::BF16, {5000, 130, 20000, 64}, sur, seed++, true);
    check_skip_decode(14, 2, 64, DType::F32, DType::BF16, {3000, 700}, sur, seed++, true);
  }
}

}  // namespace
}  // namespace vlm
