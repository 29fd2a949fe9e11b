// XAttention's estimation on the GPU (xattention_estimate.cuh, CudaXAttentionPlan) against the
// CPU's (kernels/sparse_prefill/xattention.h) on the same bf16-rounded inputs:
//  - block scores: xattn_block_scores vs xattention_block_scores (whole prompts and chunks over
//    cached context, strides 4 / 8 / 16, head sizes 64 / 128, bf16 and f32 queries: close);
//  - selection: xattn_select vs xattention_select on the same scores (the device's, and
//    quantized random scores full of ties): equal plans, thresholds below and at 1, dense tails;
//  - the whole plan: CudaXAttentionPlan's device plan vs the CPU planner's plan (block lists),
//    its attention vs the CPU reference attention of the CPU plan, the device-built view vs the
//    same plans downloaded and uploaded (its lists and pointers array by array, the upload's work
//    items and split offsets, the count accumulator, the attention bit for bit; also past one
//    CTA's sort, with the automatic split and with every long item split), threshold 1 vs the
//    dense kernel, and the error against dense at threshold 0.9 (printed with the density).
// Skips with a message when no GPU is visible.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/cuda/sparse_prefill/cuda_xattention_plan.h"
#include "kernels/cuda/sparse_prefill/grid_plan.cuh"
#include "kernels/sparse_prefill/sparse_prefill_planner.h"
#include "kernels/sparse_prefill/xattention.h"
#include "tests/kernels/cuda/cuda_sparse_fixture.h"
#include "tests/support/gpu_test.h"

namespace vlm {
namespace {

using testing::Batch;
using testing::normalized_error;

cuda::XAttnShape shape_of(const Batch& b, int s, int stride) {
  cuda::XAttnShape sh;
  sh.num_heads = b.H;
  sh.t0 = b.cu[s];
  sh.q_len = b.seqs[s].q_len;
  sh.num_keys = b.seqs[s].ctx;
  sh.stride = stride;
  return sh;
}

cuda::XAttnHeads all_heads(int H) {
  cuda::XAttnHeads hs;
  hs.n = H;
  for (int h = 0; h < H; ++h) hs.h[h] = h;
  return hs;
}

// The device scores of every head of sequence 0: [H, nqb, nkb].
std::vector<float> device_scores(const Batch& b, int stride) {
  const cuda::XAttnShape sh = shape_of(b, 0, stride);
  cuda::DeviceBuffer blk(size_t(b.H) * sh.num_qblocks() * sh.num_kblocks() * sizeof(float));
  cuda::xattn_block_scores(b.dq.get(), b.act, b.dev_kv, b.dtables.as<int32_t>(), sh, all_heads(b.H), b.scale(),
                           blk.as<float>(), nullptr);
  return testing::to_host<float>(blk, size_t(b.H) * sh.num_qblocks() * sh.num_kblocks());
}

// The host scores of head h of sequence 0 from the batch's (act-rounded, then bf16-rounded: the
// device's mma inputs) queries and the bf16 cache.
std::vector<float> host_scores(const Batch& b, int h, int stride) {
  const int q_len = b.seqs[0].q_len, N = b.seqs[0].ctx;
  std::vector<float> keys(size_t(N) * b.D);
  gather_head_keys(b.host_kv, b.tables.data(), h / (b.H / b.Hkv), N, keys.data());
  const std::vector<float> q = testing::round_to(b.q, DType::BF16);
  return xattention_block_scores(q.data(), b.H, h, q_len, keys.data(), N, b.D, b.scale(), 64, stride);
}

// xattn_select over blk [H, nqb, nkb] (host), the kept lists decoded per head.
std::vector<HeadPlan> device_select(const std::vector<float>& blk, const cuda::XAttnShape& sh, float threshold,
                                    int dense_from) {
  const int H = sh.num_heads, nqb = sh.num_qblocks(), words = sh.words();
  cuda::DeviceBuffer d = testing::to_device(blk);
  cuda::DeviceBuffer keep(size_t(H) * nqb * words * 4), counts(size_t(H) * nqb * 4);
  cuda::xattn_select(d.as<float>(), sh, all_heads(H), threshold, dense_from, keep.as<uint32_t>(),
                     counts.as<int32_t>(), nullptr);
  const auto bits = testing::to_host<uint32_t>(keep, size_t(H) * nqb * words);
  const auto n = testing::to_host<int32_t>(counts, size_t(H) * nqb);
  std::vector<HeadPlan> plans(H);
  for (int h = 0; h < H; ++h) {
    plans[h] = empty_head_plan(nqb);
    for (int I = 0; I < nqb; ++I) {
      for (int J = 0; J < words * 32; ++J)
        if (bits[(size_t(h) * nqb + I) * words + J / 32] >> (J % 32) & 1u) plans[h].blocks.push_back(J * 64);
      plans[h].block_ptr[I + 1] = static_cast<int32_t>(plans[h].blocks.size());
      EXPECT_EQ(n[h * nqb + I], plans[h].block_ptr[I + 1] - plans[h].block_ptr[I]);
    }
  }
  return plans;
}

void expect_same_selection(const std::vector<float>& blk, const cuda::XAttnShape& sh, float threshold,
                           int dense_from) {
  const int nqb = sh.num_qblocks(), nkb = sh.num_kblocks();
  const std::vector<HeadPlan> got = device_select(blk, sh, threshold, dense_from);
  for (int h = 0; h < sh.num_heads; ++h) {
    const std::vector<float> row(blk.begin() + size_t(h) * nqb * nkb, blk.begin() + size_t(h + 1) * nqb * nkb);
    const HeadPlan want = xattention_select(row, sh.q_len, sh.num_keys, 64, threshold, dense_from);
    EXPECT_EQ(got[h].block_ptr, want.block_ptr) << "head " << h << " threshold " << threshold;
    EXPECT_EQ(got[h].blocks, want.blocks) << "head " << h << " threshold " << threshold;
  }
}

struct ScoreCase {
  int q_len, ctx, D, stride;
  DType act;
  bool structured;
};

TEST(CudaXAttention, BlockScoresMatchHost) {
  VLM_REQUIRE_GPU();
  const std::vector<ScoreCase> cases = {
      {1000, 1000, 128, 8, DType::BF16, true},  {300, 1500, 128, 8, DType::BF16, true},
      {77, 77, 64, 16, DType::BF16, false},     {700, 900, 64, 4, DType::F32, false},
      {640, 2000, 128, 16, DType::F32, true},
  };
  uint32_t seed = 5;
  for (const ScoreCase& c : cases) {
    SCOPED_TRACE("q_len " + std::to_string(c.q_len) + " keys " + std::to_string(c.ctx) + " D " +
                 std::to_string(c.D) + " stride " + std::to_string(c.stride));
    Batch b({{c.q_len, c.ctx}}, 4, 2, c.D, c.act, seed++, c.structured);
    const std::vector<float> got = device_scores(b, c.stride);
    std::vector<float> want;
    for (int h = 0; h < b.H; ++h) {
      const auto w = host_scores(b, h, c.stride);
      want.insert(want.end(), w.begin(), w.end());
    }
    ASSERT_EQ(got.size(), want.size());
    const double e = normalized_error(got, want);
    std::printf("xattention block scores q_len %d keys %d D %d stride %d: normalized error %.3g\n", c.q_len, c.ctx,
                c.D, c.stride, e);
    EXPECT_LE(e, 1e-4);
    // The selection on these scores (the device's) equals the host's.
    const cuda::XAttnShape sh = shape_of(b, 0, c.stride);
    for (const float th : {0.5f, 0.9f, 1.0f}) expect_same_selection(got, sh, th, INT_MAX);
    expect_same_selection(got, sh, 0.8f, c.ctx - 100);  // the dense prompt tail
  }
}

TEST(CudaXAttention, SelectionEqualsHostWithTies) {
  VLM_REQUIRE_GPU();
  std::mt19937 rng(7);
  const float levels[] = {0.f, 0.125f, 0.25f, 0.25f, 0.5f, 1.f, 1e-9f};
  for (const auto& [q_len, ctx] : std::vector<std::pair<int, int>>{{1000, 1000}, {200, 3000}, {64, 64}, {4100, 4100}}) {
    cuda::XAttnShape sh;
    sh.num_heads = 3, sh.q_len = q_len, sh.num_keys = ctx;
    const int nqb = sh.num_qblocks(), nkb = sh.num_kblocks(), off = ctx - q_len;
    std::vector<float> blk(size_t(sh.num_heads) * nqb * nkb, 0.f);
    for (int h = 0; h < sh.num_heads; ++h)
      for (int I = 0; I < nqb; ++I)
        for (int J = 0; J <= (off + std::min(q_len, (I + 1) * 64) - 1) / 64; ++J)
          blk[(size_t(h) * nqb + I) * nkb + J] = h == 2 ? float(rng() % 1000) / 997.f : levels[rng() % 7];
    for (const float th : {0.3f, 0.8f, 0.95f, 1.0f}) expect_same_selection(blk, sh, th, INT_MAX);
    expect_same_selection(blk, sh, 0.7f, ctx - 300);
  }
}

using testing::download;
using testing::slice;

// A device plan's view (sequence 0 of b) against the same plans downloaded (host) and uploaded:
// each head's desc, pointers and lists, the count accumulator acc (device [2]), the upload's
// work items and split offsets, and the attention bit for bit.
void expect_view_equals_upload(Batch& b, const cuda::SparsePlanView& v, const BlockSparsePlan& host,
                               const unsigned long long* acc) {
  const int nqb = host.num_qblocks();
  ASSERT_EQ(v.num_items, b.H * nqb);
  const auto descs_raw = download(v.descs, b.H * int64_t(sizeof(cuda::SparseHeadDesc) / 4));
  const auto* descs = reinterpret_cast<const cuda::SparseHeadDesc*>(descs_raw.data());
  int64_t words = 0;
  for (int h = 0; h < b.H; ++h) words = std::max(words, descs[h].col_ptr + nqb + 1);
  const auto ptrs = download(v.data, words);
  int64_t end = words;
  for (int h = 0; h < b.H; ++h) end = std::max<int64_t>(end, descs[h].blocks + ptrs[descs[h].block_ptr + nqb]);
  const auto data = download(v.data, end);
  for (int h = 0; h < b.H; ++h) {
    SCOPED_TRACE("head " + std::to_string(h));
    const cuda::SparseHeadDesc& d = descs[h];
    EXPECT_EQ(d.q_order, -1);
    EXPECT_EQ(d.k_order, -1);
    EXPECT_EQ(d.flags, cuda::kHeadAlignedBlocks);
    EXPECT_EQ(d.t0, b.cu[0]);
    EXPECT_EQ(d.q_len, host.q_len);
    EXPECT_EQ(d.num_keys, host.num_keys);
    const HeadPlan& hp = host.heads[h];
    for (int m = 0; m < nqb; ++m) {
      const int b0 = data[d.block_ptr + m], b1 = data[d.block_ptr + m + 1];
      ASSERT_EQ(slice(data, d.blocks + b0, b1 - b0),
                std::vector<int32_t>(hp.blocks.begin() + hp.block_ptr[m], hp.blocks.begin() + hp.block_ptr[m + 1]))
          << "query block " << m;
      ASSERT_EQ(data[d.col_ptr + m + 1] - data[d.col_ptr + m], 0) << "query block " << m;
    }
  }
  unsigned long long totals[2];
  VLM_CUDA_CHECK(cudaMemcpy(totals, acc, sizeof totals, cudaMemcpyDeviceToHost));
  EXPECT_EQ(static_cast<double>(totals[0]), plan_block_counts(host).computed) << "the count accumulator";
  EXPECT_EQ(totals[1], 0u);
  const BlockSparsePlan* hptr = &host;
  cuda::CudaBlockSparsePlan up;
  up.upload({&hptr, 1}, b.cu.data(), b.H, nullptr);
  const cuda::SparsePlanView uv = up.view();
  testing::expect_same_items_and_split(v, uv);
  EXPECT_EQ(b.sparse(v), b.sparse(uv)) << "attention over the device plan vs the same plans uploaded";
}

// The CPU planner's XAttention plan of sequence 0 (host q, bf16 cache).
BlockSparsePlan cpu_plan(const Batch& b, const XAttentionParams& p) {
  SparsePrefillConfig cfg;
  cfg.method = SparsePrefillMethod::XAttention;
  cfg.xattention = p;
  ChunkView c;
  c.q = b.q.data();
  c.q_len = b.seqs[0].q_len;
  c.num_keys = c.prompt_len = b.seqs[0].ctx;
  c.block_table = b.tables.data();
  return build_sparse_plan(cfg, c, b.H, b.host_kv, b.scale());
}

TEST(CudaXAttention, DevicePlanMatchesCpuPlanAndReference) {
  VLM_REQUIRE_GPU();
  uint32_t seed = 21;
  cuda::CudaXAttentionPlan xp;  // reused across cases (buffers grow)
  cuda::DeviceBuffer acc(2 * sizeof(unsigned long long));
  for (const auto& [q_len, ctx] : std::vector<std::pair<int, int>>{{2048, 2048}, {700, 3000}}) {
    SCOPED_TRACE("q_len " + std::to_string(q_len) + " keys " + std::to_string(ctx));
    Batch b({{q_len, ctx}}, 4, 2, 128, DType::BF16, seed++, /*structured=*/true);
    for (const float th : {0.9f, 1.0f}) {
      XAttentionParams p;
      p.threshold = th;
      const BlockSparsePlan want = cpu_plan(b, p);
      xp.score_bytes = 1;  // one head per group: the grouping is exercised
      xp.begin(b.H, 0, q_len, ctx, nullptr);
      const std::vector<int> heads = {0, 1, 2, 3};
      xp.estimate(b.dq.get(), b.act, b.dev_kv, b.dtables.as<int32_t>(), heads, p, ctx - p.n_last, b.scale(), nullptr);
      VLM_CUDA_CHECK(cudaMemset(acc.get(), 0, acc.bytes()));
      xp.build(nullptr, acc.as<unsigned long long>());
      BlockSparsePlan host;
      host.q_len = q_len, host.num_keys = ctx;
      host.heads = xp.host_plans(heads, nullptr);
      expect_view_equals_upload(b, xp.view(), host, acc.as<unsigned long long>());
      int differ = 0;
      const int nqb = want.num_qblocks();
      for (int h = 0; h < b.H; ++h)
        for (int I = 0; I < nqb; ++I) {
          const auto& w = want.heads[h];
          const auto& g = host.heads[h];
          const std::vector<int32_t> wl(w.blocks.begin() + w.block_ptr[I], w.blocks.begin() + w.block_ptr[I + 1]);
          const std::vector<int32_t> gl(g.blocks.begin() + g.block_ptr[I], g.blocks.begin() + g.block_ptr[I + 1]);
          differ += wl != gl;
        }
      const BlockCounts counts = xp.block_counts();
      EXPECT_EQ(counts.causal, plan_block_counts(want).causal);
      std::vector<const BlockSparsePlan*> cpu_ptrs = {&want};
      const std::vector<float> got = b.sparse(xp.view());
      const std::vector<float> ref = b.cpu_ref(cpu_ptrs);
      const std::vector<float> dense = b.dense_gpu();
      const double e_ref = normalized_error(got, ref), e_dense = normalized_error(got, dense);
      std::printf("xattention threshold %.2f q_len %d keys %d: density %.3f (CPU %.3f), query blocks whose lists "
                  "differ %d of %d, vs CPU reference %.3g, vs dense %.3g\n",
                  th, q_len, ctx, counts.computed / counts.causal, plan_block_density(want), differ, b.H * nqb, e_ref,
                  e_dense);
      EXPECT_LE(differ, b.H * nqb / 100);  // at most 1 % (near-tied masses rounded differently)
      EXPECT_LE(e_ref, 2e-2 + 8e-3);       // test_cuda_block_sparse's bf16 tolerance
      if (th >= 1.f) {
        EXPECT_EQ(counts.computed, counts.causal);
        EXPECT_LE(e_dense, 1e-2);
      } else {
        EXPECT_LT(counts.computed, counts.causal);
      }
    }
  }
}

// Past one CTA's sort (more work items than kGridPlanCtaSortItems: the CUB sort, then the
// one-CTA schedule): the device plan equals the same plans downloaded and uploaded, with the
// automatic split and with every item of more than 5 tiles split.
TEST(CudaXAttention, DevicePlanPastOneCtaSortEqualsUpload) {
  VLM_REQUIRE_GPU();
  const int len = 33000;  // 32 heads x 516 query blocks: 16,512 items
  Batch b({{len, len}}, 32, 4, 64, DType::BF16, 29, /*structured=*/true);
  std::vector<int> heads(b.H);
  std::iota(heads.begin(), heads.end(), 0);
  cuda::CudaXAttentionPlan xp;
  cuda::DeviceBuffer acc(2 * sizeof(unsigned long long));
  for (const int knob : {0, 5}) {
    SCOPED_TRACE("split knob " + std::to_string(knob));
    testing::SplitKnob split(knob);
    XAttentionParams p;
    p.threshold = 0.9f;
    xp.begin(b.H, 0, len, len, nullptr);
    xp.estimate(b.dq.get(), b.act, b.dev_kv, b.dtables.as<int32_t>(), heads, p, len - p.n_last, b.scale(), nullptr);
    VLM_CUDA_CHECK(cudaMemset(acc.get(), 0, acc.bytes()));
    xp.build(nullptr, acc.as<unsigned long long>());
    ASSERT_GT(xp.view().num_items, cuda::kGridPlanCtaSortItems);
    BlockSparsePlan host;
    host.q_len = host.num_keys = len;
    host.heads = xp.host_plans(heads, nullptr);
    const BlockCounts counts = xp.block_counts();
    EXPECT_EQ(counts.computed, plan_block_counts(host).computed);
    EXPECT_EQ(counts.causal, plan_block_counts(host).causal);
    EXPECT_LT(counts.computed, counts.causal);
    expect_view_equals_upload(b, xp.view(), host, acc.as<unsigned long long>());
  }
}

}  // namespace
}  // namespace vlm
