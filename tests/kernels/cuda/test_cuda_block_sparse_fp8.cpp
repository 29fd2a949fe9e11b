// Sparse prefill's GPU kernels over an FP8 E4M3 cache (--kv-cache-dtype fp8): the fixture's bf16
// cache (cuda_sparse_fixture.h) quantized per head (kernels/core/fp8.h's e4m3(x * (1 / scale)), as
// paged_kv_write stores it; NaN poison stays NaN), and
//  - paged_block_sparse_attention (the mma.sync kernel's FP8 path) against the CPU's
//    block_sparse_attention_ref over the dequantized values (byte * scale, f32): tight, the bf16
//    cache's own tolerance (the kernel rounds q and P to bf16 as over a bf16 cache; the E4M3 values
//    are exact in its bf16 tiles), with random, split (long-row) and CPU planners' plans;
//  - the same against the kernel over the unquantized bf16 cache (loose: FP8's own error, the two
//    CPU references' distance, plus the kernels' tolerance; printed);
//  - grid_last_q_probs (the grid / vertical-slash / boundary heads' estimate) over the FP8 cache
//    equal to the same over its dequantized f32 copy, bit for bit (the same f32 values, the same
//    kernel), so the device plans are the ones the dequantized values give.
// Skips with a message when no GPU is visible.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "kernels/attention/block_sparse_attention.h"
#include "kernels/core/fp8.h"
#include "kernels/cuda/sparse_estimate/grid_estimate.cuh"
#include "kernels/cuda/sparse_prefill/cuda_block_sparse.h"
#include "kernels/sparse_prefill/sparse_prefill_planner.h"
#include "tests/kernels/cuda/cuda_sparse_fixture.h"
#include "tests/support/gpu_test.h"

namespace vlm {
namespace {

using testing::Batch;
using testing::long_row_plan;
using testing::normalized_error;
using testing::random_plan;
using testing::Seq;
using testing::SplitKnob;

// The bf16 cache's tolerance in test_cuda_block_sparse.cpp (the dense kernel's, plus bf16 output rounding).
double tolerance(DType act) { return 2e-2 + (act == DType::F32 ? 0.0 : 8e-3); }

// Scales: 1.0 (vLLM's default) on even KV heads; on odd ones amax / 256 of the fixture's values
// (keys |x| <= 0.5 + structure 6.5, values |x| <= 1): a calibrated-looking scale.
float head_scale(int h, bool value) { return h % 2 == 0 ? 1.0f : (value ? 1.0f : 6.5f) / 256.f; }

// The batch's cache as FP8 bytes on the device, and its dequantized values in f32 (host and device).
struct Fp8Copy {
  std::vector<float> ks, vs, kf, vf;
  std::vector<uint8_t> k8, v8;
  cuda::DeviceBuffer dk8, dv8, dks, dvs, dkf, dvf;
  PagedKVLayer dev, host_f32, dev_f32;
  explicit Fp8Copy(const Batch& b) {
    const PagedKVLayer& s = b.host_kv;
    for (int h = 0; h < s.num_kv_heads; ++h) ks.push_back(head_scale(h, false)), vs.push_back(head_scale(h, true));
    const std::vector<float> x = testing::decode(b.hk, DType::BF16), y = testing::decode(b.hv, DType::BF16);
    k8.resize(x.size()), v8.resize(x.size()), kf.resize(x.size()), vf.resize(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      const int h = int(i % s.block_stride() / s.head_stride());
      k8[i] = f32_to_fp8_e4m3(x[i] * (1.f / ks[h]));  // NaN -> 0x7f (E4M3 NaN)
      v8[i] = f32_to_fp8_e4m3(y[i] * (1.f / vs[h]));
      kf[i] = fp8_e4m3_to_f32(k8[i]) * ks[h];
      vf[i] = fp8_e4m3_to_f32(v8[i]) * vs[h];
    }
    dk8 = testing::to_device(k8), dv8 = testing::to_device(v8), dks = testing::to_device(ks);
    dvs = testing::to_device(vs), dkf = testing::to_device(kf), dvf = testing::to_device(vf);
    dev = s;
    dev.dtype = DType::F8_E4M3;
    dev.k = dk8.get(), dev.v = dv8.get(), dev.k_scale = dks.as<float>(), dev.v_scale = dvs.as<float>();
    host_f32 = s;
    host_f32.dtype = DType::F32;
    host_f32.k = kf.data(), host_f32.v = vf.data();
    dev_f32 = host_f32;
    dev_f32.k = dkf.get(), dev_f32.v = dvf.get();
  }
};

// The block-sparse kernel over the FP8 cache (rows of unplanned sequences left at 0).
std::vector<float> sparse_fp8(Batch& b, const Fp8Copy& f, std::span<const BlockSparsePlan* const> plans) {
  cuda::CudaBlockSparsePlan plan;
  plan.upload(plans, b.cu.data(), b.H, nullptr);
  const std::vector<float> init(b.q.size(), 0.f);
  cuda::DeviceBuffer out = testing::to_device(testing::encode(init, b.act));
  cuda::paged_block_sparse_attention(b.dq.get(), b.act, b.H, f.dev, b.batch, plan, b.scale(), out.get(), nullptr);
  return testing::decode(testing::to_host<uint8_t>(out, b.q.size() * dtype_size(b.act)), b.act);
}

// The CPU reference over the dequantized values.
std::vector<float> ref_fp8(Batch& b, const Fp8Copy& f, std::span<const BlockSparsePlan* const> plans) {
  std::vector<float> out(b.q.size(), 0.f);
  block_sparse_attention_ref(b.q.data(), b.H, f.host_f32, b.cpu_batch, plans, b.scale(), out.data());
  return out;
}

void check(Batch& b, const Fp8Copy& f, std::span<const BlockSparsePlan* const> plans, const char* what) {
  const auto got = sparse_fp8(b, f, plans), ref = ref_fp8(b, f, plans), ref16 = b.cpu_ref(plans),
             got16 = b.sparse(plans);
  const double e = normalized_error(got, ref), e16 = normalized_error(got, got16), fp8_own = normalized_error(ref, ref16);
  EXPECT_LE(e, tolerance(b.act)) << what << ": vs the CPU over the dequantized cache";
  EXPECT_LE(e16, fp8_own + 2 * tolerance(b.act)) << what << ": vs the kernel over the bf16 cache";
  // The data's own FP8 sensitivity (CPU over the dequantized cache vs CPU over bf16): 0.38 on the planner's
  // tri-shape / grid plans (session 17, H200), ~0.03-0.06 on random plans; bounded only to catch broken data.
  EXPECT_LE(fp8_own, 0.5) << what << ": the FP8 rounding itself (the test's data)";
  std::printf("[ sparse fp8 ] %s: %.2e vs CPU (dequantized), %.2e vs bf16-cache kernel (references' own %.2e)\n", what,
              e, e16, fp8_own);
}

TEST(CudaBlockSparseFp8, RandomAndSplitPlansMatchTheDequantizedReference) {
  VLM_REQUIRE_GPU();
  struct C {
    std::vector<Seq> seqs;
    int H, Hkv, D;
    DType act;
  };
  const std::vector<C> cases = {{{{300, 300}, {130, 700}}, 8, 2, 128, DType::BF16},
                                {{{200, 520}, {77, 77}}, 7, 1, 64, DType::BF16},
                                {{{256, 900}}, 4, 4, 128, DType::F16},
                                {{{190, 400}}, 8, 2, 64, DType::F32}};
  uint32_t seed = 700;
  for (const C& c : cases) {
    Batch b(c.seqs, c.H, c.Hkv, c.D, c.act, seed++);
    const Fp8Copy f(b);
    std::mt19937 rng(seed);
    std::vector<BlockSparsePlan> plans;
    for (const Seq& s : c.seqs) plans.push_back(random_plan(s.q_len, s.ctx, c.H, rng, /*permute=*/true));
    std::vector<const BlockSparsePlan*> ptrs;
    for (const auto& p : plans) ptrs.push_back(&p);
    check(b, f, ptrs, "random plans");
  }
  // Long rows, split into pieces (the combine sees V's scale applied in every piece).
  Batch b({{640, 2000}}, 8, 2, 128, DType::BF16, 41);
  const Fp8Copy f(b);
  std::mt19937 rng(3);
  const BlockSparsePlan plan = long_row_plan(640, 2000, 8, rng);
  const BlockSparsePlan* ptr = &plan;
  for (const int piece : {-1, 3}) {
    SplitKnob knob(piece);
    check(b, f, {&ptr, 1}, piece < 0 ? "long rows unsplit" : "long rows, pieces of 3 tiles");
  }
}

TEST(CudaBlockSparseFp8, PlannerPlansAndGridEstimateOverFp8) {
  VLM_REQUIRE_GPU();
  const int H = 4;
  Batch b({{1300, 1300}, {400, 1700}}, H, 2, 128, DType::BF16, 78, /*structured=*/true);
  const Fp8Copy f(b);
  std::vector<SparsePrefillConfig> cfgs(3);
  cfgs[0].method = SparsePrefillMethod::TriShape;
  cfgs[0].n_local = 512;
  cfgs[1].method = SparsePrefillMethod::VerticalSlash;
  cfgs[1].vertical_size = 30;
  cfgs[1].slash_size = 100;
  cfgs[2].method = SparsePrefillMethod::Grid;
  for (const auto& cfg : cfgs) {
    std::vector<BlockSparsePlan> plans;
    for (int s = 0; s < 2; ++s) {  // planned on the dequantized values (what the GPU estimate reads)
      ChunkView cv{b.q.data() + size_t(b.cu[s]) * b.H * b.D, b.seqs[s].q_len, b.seqs[s].ctx, b.seqs[s].ctx,
                   b.tables.data() + size_t(s) * b.max_blocks, 0, nullptr, {}};
      plans.push_back(build_sparse_plan(cfg, cv, b.H, f.host_f32, b.scale()));
    }
    const BlockSparsePlan* ptrs[] = {&plans[0], &plans[1]};
    check(b, f, ptrs, sparse_prefill_method_name(cfg.method));
  }
  // The estimate's probabilities: FP8 cache == its dequantized f32 copy, bit for bit.
  for (int s = 0; s < 2; ++s) {
    cuda::GridEstimateShape sh;
    sh.num_heads = H, sh.t0 = b.cu[s], sh.q_len = b.seqs[s].q_len, sh.num_keys = b.seqs[s].ctx, sh.rows = 64;
    const size_t n = size_t(H) * sh.rows * sh.num_keys;
    cuda::DeviceBuffer p8(n * 4), pf(n * 4);
    const int32_t* table = b.dtables.as<int32_t>() + size_t(s) * b.max_blocks;
    cuda::grid_last_q_probs(b.dq.get(), b.act, f.dev, table, sh, b.scale(), p8.as<float>(), nullptr);
    cuda::grid_last_q_probs(b.dq.get(), b.act, f.dev_f32, table, sh, b.scale(), pf.as<float>(), nullptr);
    EXPECT_TRUE(testing::to_host<float>(p8, n) == testing::to_host<float>(pf, n)) << "sequence " << s;
  }
}

}  // namespace
}  // namespace vlm
