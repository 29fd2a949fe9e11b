// CudaGridPlan (the grid heads' plans built on the GPU) against the CPU's grid_head_plan on the
// same layouts: every head's q_order, k_order, block lists (per query block) and sink columns
// equal, the work items in the order CudaBlockSparsePlan::upload gives the host plans, and the
// attention outputs of the two plans bit for bit equal. Layouts vary stride (below and above the
// chunk's rows per group), phase, band (none, 0, 1, wider than the stride), the line switches,
// several line groups and sink sizes, whole prompts and chunks over cached context, 8 heads and
// 28 (more than one launch of layouts). The device build has no host sync (lists at their bounds,
// the split policy computed on the device, the attention over a resident grid taking pieces from
// a queue); its count accumulator equals the host plan's block counts.
// Skips with a message when no GPU is visible.
#include <gtest/gtest.h>

#include <numeric>
#include <random>
#include <vector>

#include "kernels/cuda/sparse_prefill/cuda_grid_plan.h"
#include "kernels/sparse_prefill/grid.h"
#include "tests/kernels/cuda/cuda_sparse_fixture.h"
#include "tests/support/gpu_test.h"

namespace vlm {
namespace {

using testing::Batch;

using testing::download;
using testing::slice;

// A random layout per head: stride from `strides`, random phase, distinct vertical groups.
GridLayout random_layout(const std::vector<int>& strides, const GridParams& p, std::mt19937& rng) {
  const int s = strides[rng() % strides.size()];
  GridLayout l;
  l.stride = s;
  l.phase = static_cast<int>(rng() % s);
  std::vector<int32_t> g(s);
  std::iota(g.begin(), g.end(), 0);
  std::shuffle(g.begin(), g.end(), rng);
  for (int i = 0; i < std::min(p.num_vlines, s); ++i) l.vgroups.push_back(g[i]);
  for (int i = 0; i < std::min({p.num_hlines, p.num_vlines, s}); ++i) l.hgroups.push_back(l.vgroups[i]);
  return l;
}

TEST(CudaGridPlan, DevicePlansEqualHostPlans) {
  VLM_REQUIRE_GPU();
  struct C {
    int q_len, ctx;
    std::vector<int> strides;
    GridParams p;
    int heads = 8;
  };
  auto params = [](int band, bool slash, bool v, bool h, int nv, int nh, int n_init) {
    GridParams p;
    p.band = band, p.use_slash = slash, p.use_vline = v, p.use_hline = h;
    p.num_vlines = nv, p.num_hlines = nh, p.n_init = n_init;
    return p;
  };
  const std::vector<C> cases = {
      {1300, 1300, {256, 64, 16}, GridParams{}},
      {1300, 1300, {7, 13, 300}, params(0, true, true, true, 3, 2, 100)},
      {500, 2100, {256, 33}, GridParams{}},                      // a chunk over cached context
      {700, 900, {7, 5}, params(3, true, true, true, 2, 1, 64)},  // band spans every group
      {640, 640, {40, 97}, params(1, false, true, false, 2, 1, 0)},
      {333, 1000, {128, 1024}, params(2, true, false, true, 4, 4, 17)},
      {77, 77, {16, 100}, GridParams{}},
      {600, 1500, {256, 33}, GridParams{}, 28},  // Qwen2-7B's query heads
  };
  std::mt19937 rng(11);
  uint32_t seed = 3;
  cuda::CudaGridPlan gp;  // reused across cases (buffers grow)
  int split_cases = 0;    // cases of the second pass whose plans split some item
  // The automatic split policy, then every item of more than 5 tiles split.
  for (const int knob : {0, 5})
  for (const C& c : cases) {
    cuda::set_block_sparse_split(knob);
    SCOPED_TRACE("q_len " + std::to_string(c.q_len) + " keys " + std::to_string(c.ctx) + " split knob " +
                 std::to_string(knob));
    Batch b({{c.q_len, c.ctx}}, c.heads, c.heads == 8 ? 2 : 4, 128, DType::BF16, seed++, /*structured=*/true);
    std::vector<GridLayout> layouts(b.H);
    BlockSparsePlan host;
    host.q_len = c.q_len;
    host.num_keys = c.ctx;
    for (int h = 0; h < b.H; ++h) {
      layouts[h] = random_layout(c.strides, c.p, rng);
      host.heads.push_back(grid_head_plan(layouts[h], c.p, c.q_len, c.ctx, 64));
    }
    validate_plan(host);
    cuda::DeviceBuffer acc(2 * sizeof(unsigned long long));
    VLM_CUDA_CHECK(cudaMemset(acc.get(), 0, acc.bytes()));
    gp.build(layouts, c.p, 0, c.q_len, c.ctx, nullptr, acc.as<unsigned long long>());
    const cuda::SparsePlanView v = gp.view();
    const int nqb = host.num_qblocks();
    ASSERT_EQ(v.num_items, b.H * nqb);
    const auto descs_raw = download(reinterpret_cast<const int32_t*>(v.descs),
                                    b.H * int64_t(sizeof(cuda::SparseHeadDesc) / 4));
    const auto* descs = reinterpret_cast<const cuda::SparseHeadDesc*>(descs_raw.data());
    int64_t words = 0;
    for (int h = 0; h < b.H; ++h) {
      const auto& d = descs[h];
      words = std::max({words, d.q_order + c.q_len, d.k_order + c.ctx, d.col_ptr + nqb + 1});
    }
    const auto ptr0 = download(v.data, words);
    int64_t nb_total = 0, nc_total = 0;
    for (int h = 0; h < b.H; ++h) {
      const auto& d = descs[h];
      nb_total = std::max<int64_t>(nb_total, ptr0[d.block_ptr + nqb]);
      nc_total = std::max<int64_t>(nc_total, ptr0[d.col_ptr + nqb]);
    }
    const auto data = download(v.data, std::max({words, descs[0].blocks + nb_total, descs[0].cols + nc_total}));
    EXPECT_NEAR(gp.block_density(), plan_block_density(host), 1e-12);
    unsigned long long totals[2];
    VLM_CUDA_CHECK(cudaMemcpy(totals, acc.get(), sizeof totals, cudaMemcpyDeviceToHost));
    EXPECT_EQ(static_cast<double>(totals[0]) + static_cast<double>(totals[1]) / 64.0,
              plan_block_counts(host).computed)
        << "the count accumulator";
    EXPECT_EQ(gp.causal_blocks(), plan_block_counts(host).causal);
    for (int h = 0; h < b.H; ++h) {
      SCOPED_TRACE("head " + std::to_string(h) + " stride " + std::to_string(layouts[h].stride));
      const HeadPlan& hp = host.heads[h];
      const auto& d = descs[h];
      EXPECT_EQ(d.q_len, c.q_len);
      EXPECT_EQ(d.num_keys, c.ctx);
      EXPECT_EQ(slice(data, d.q_order, c.q_len), hp.q_order);
      EXPECT_EQ(slice(data, d.k_order, c.ctx), hp.k_order);
      for (int m = 0; m < nqb; ++m) {
        const int b0 = data[d.block_ptr + m], b1 = data[d.block_ptr + m + 1];
        const int c0 = data[d.col_ptr + m], c1 = data[d.col_ptr + m + 1];
        ASSERT_EQ(slice(data, d.blocks + b0, b1 - b0),
                  std::vector<int32_t>(hp.blocks.begin() + hp.block_ptr[m], hp.blocks.begin() + hp.block_ptr[m + 1]))
            << "query block " << m;
        ASSERT_EQ(slice(data, d.cols + c0, c1 - c0),
                  std::vector<int32_t>(hp.cols.begin() + hp.col_ptr[m], hp.cols.begin() + hp.col_ptr[m + 1]))
            << "query block " << m;
      }
    }
    // The same plans uploaded by the host: the same work items, pieces and attention.
    const BlockSparsePlan* hptr = &host;
    cuda::CudaBlockSparsePlan up;
    up.upload({&hptr, 1}, b.cu.data(), b.H, nullptr);
    // The work items in the host upload's order and the same pieces (one piece per item when the
    // host split none).
    const cuda::SparsePlanView uv = up.view();
    if (knob > 0 && uv.piece_off) ++split_cases;
    testing::expect_same_items_and_split(v, uv);
    EXPECT_EQ(b.sparse(v), b.sparse(up.view())) << "attention over the device plan vs the host plan";
  }
  cuda::set_block_sparse_split(0);
  EXPECT_GE(split_cases, 4) << "pieces of 5 tiles should split most cases' plans";
}

}  // namespace
}  // namespace vlm
