// The vertical-slash and boundary heads' estimates on the GPU (CudaVerticalSlash,
// CudaBoundaryLines) against the CPU's estimate_vertical_slash / estimate_boundary_lines on the
// same bf16 inputs, and the device-built vertical-slash plans (CudaVerticalSlashPlan) against
// vertical_slash_head_plan over the same lists:
//  - planted structure (the fixture's video frames: the last rows' frame directions make the
//    same-index keys of earlier frames the verticals and multiples of 256 the slashes): the GPU's
//    lists equal the CPU's, and both equal the planted lines (recall 100 %);
//  - random inputs: the overlap of the GPU's and the CPU's lists (>= 99 %), and the attention
//    outputs of the plans made from each, their difference beside each one's error against dense;
//  - boundary lines (Q and 2D, text / video / text codes) likewise: overlap and output difference;
//  - the device plan equals the host plan array by array, the same work items, and the same
//    attention output bit for bit (whole prompts, a chunk over cached context, ragged lengths).
// Skips with a message when no GPU is visible.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <set>
#include <vector>

#include "kernels/cuda/sparse_estimate/cuda_boundary_lines.h"
#include "kernels/cuda/sparse_estimate/cuda_vertical_slash.h"
#include "kernels/cuda/sparse_prefill/cuda_vertical_slash_plan.h"
#include "kernels/sparse_prefill/modality_boundary.h"
#include "kernels/sparse_prefill/sparse_prefill_planner.h"
#include "kernels/sparse_prefill/vertical_slash.h"
#include "tests/kernels/cuda/cuda_sparse_fixture.h"
#include "tests/support/gpu_test.h"

namespace vlm {
namespace {

using testing::Batch;

std::vector<float> head_keys(const Batch& b, int s, int h) {
  std::vector<float> keys(static_cast<size_t>(b.seqs[s].ctx) * b.D);
  gather_head_keys(b.host_kv, b.tables.data() + static_cast<size_t>(s) * b.max_blocks, h / (b.H / b.Hkv),
                   b.seqs[s].ctx, keys.data());
  return keys;
}

// The CPU's estimate for head h of sequence s (its last R rows).
VerticalSlashIndices cpu_vs(const Batch& b, int s, int h, const VerticalSlashParams& p) {
  const int N = b.seqs[s].ctx, q_len = b.seqs[s].q_len, D = b.D, R = p.last_q;
  std::vector<float> rows(static_cast<size_t>(R) * D);
  for (int r = 0; r < R; ++r)
    std::copy_n(b.q.data() + (static_cast<size_t>(b.cu[s] + q_len - R + r) * b.H + h) * D, D,
                rows.data() + size_t(r) * D);
  const auto keys = head_keys(b, s, h);
  return estimate_vertical_slash(rows.data(), R, keys.data(), N, D, b.scale(), p);
}

cuda::GridEstimateShape shape_of(const Batch& b, int s, int rows) {
  cuda::GridEstimateShape sh;
  sh.num_heads = b.H;
  sh.t0 = b.cu[s];
  sh.q_len = b.seqs[s].q_len;
  sh.num_keys = b.seqs[s].ctx;
  sh.rows = rows;
  return sh;
}

double overlap(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  const std::set<int32_t> sa(a.begin(), a.end());
  int n = 0;
  for (int32_t x : b) n += sa.count(x) > 0;
  return a.empty() ? 1.0 : double(n) / double(std::max(a.size(), b.size()));
}

// Outputs of two plans of sequence `s` (others skipped) and the dense output: diff, errors.
struct PlanErrors {
  double between, first_vs_dense, second_vs_dense;
};
PlanErrors compare_plans(Batch& b, int s, const BlockSparsePlan& first, const BlockSparsePlan& second) {
  std::vector<const BlockSparsePlan*> p1(b.seqs.size(), nullptr), p2 = p1;
  p1[s] = &first;
  p2[s] = &second;
  auto rows = [&](const std::vector<float>& x) {
    const size_t row = static_cast<size_t>(b.H) * b.D;
    return std::vector<float>(x.begin() + b.cu[s] * row, x.begin() + b.cu[s + 1] * row);
  };
  const auto o1 = rows(b.sparse(p1)), o2 = rows(b.sparse(p2)), dense = rows(b.dense_gpu());
  return {testing::normalized_error(o2, o1), testing::normalized_error(o1, dense), testing::normalized_error(o2, dense)};
}

BlockSparsePlan plan_of(int q_len, int N, std::vector<HeadPlan> heads) {
  BlockSparsePlan p;
  p.q_len = q_len, p.num_keys = N, p.block_m = p.block_n = 64;
  p.heads = std::move(heads);
  validate_plan(p);
  return p;
}

TEST(CudaVerticalSlash, PlantedLinesEqualCpuAndPlanted) {
  VLM_REQUIRE_GPU();
  Batch b({{2600, 2600}, {500, 3000}}, 8, 2, 128, DType::BF16, 5, /*structured=*/true);
  cuda::CudaVerticalSlash est;
  for (int s = 0; s < 2; ++s) {
    const int N = b.seqs[s].ctx;
    // The planted lines of the last 64 rows p: keys p - 256 k >= 200 (same frame index), the
    // offsets 256 k reaching the frames, plus the forced first 30 columns and 100 offsets.
    std::set<int32_t> pv, ps;
    for (int j = 0; j < 30; ++j) pv.insert(j);
    for (int o = 0; o < 100; ++o) ps.insert(o);
    for (int p = N - 64; p < N; ++p)
      for (int k = 0; p - 256 * k >= 200; ++k) pv.insert(p - 256 * k), ps.insert(256 * k);
    VerticalSlashParams prm;
    prm.vertical_size = static_cast<int>(pv.size());
    prm.slash_size = static_cast<int>(ps.size());
    const std::vector<VerticalSlashParams> params(b.H, prm);
    est.estimate(b.dq.get(), b.act, b.dev_kv, b.dtables.as<int32_t>() + s * b.max_blocks, shape_of(b, s, 64),
                 b.scale(), params, nullptr);
    est.download(nullptr);
    VLM_CUDA_CHECK(cudaStreamSynchronize(nullptr));
    for (int h = 0; h < b.H; ++h) {
      SCOPED_TRACE("sequence " + std::to_string(s) + " head " + std::to_string(h));
      const auto got = est.indices(h), want = cpu_vs(b, s, h, prm);
      EXPECT_EQ(got.vertical, want.vertical);
      EXPECT_EQ(got.slash, want.slash);
      EXPECT_EQ(std::vector<int32_t>(pv.begin(), pv.end()), got.vertical) << "planted verticals";
      EXPECT_EQ(std::vector<int32_t>(ps.rbegin(), ps.rend()), got.slash) << "planted slashes";
    }
  }
}

TEST(CudaVerticalSlash, RandomInputsOverlapCpuAndPlansAgree) {
  VLM_REQUIRE_GPU();
  Batch b({{2600, 2600}, {700, 3100}}, 8, 2, 128, DType::BF16, 9, /*structured=*/false);
  cuda::CudaVerticalSlash est;
  for (int s = 0; s < 2; ++s) {
    const int N = b.seqs[s].ctx, q_len = b.seqs[s].q_len;
    std::vector<VerticalSlashParams> params(b.H);
    for (int h = 0; h < b.H; ++h) params[h].vertical_size = 150 + 25 * h, params[h].slash_size = 300 + 40 * h;
    est.estimate(b.dq.get(), b.act, b.dev_kv, b.dtables.as<int32_t>() + s * b.max_blocks, shape_of(b, s, 64),
                 b.scale(), params, nullptr);
    est.download(nullptr);
    VLM_CUDA_CHECK(cudaStreamSynchronize(nullptr));
    double worst = 1;
    std::vector<HeadPlan> hg, hc;
    for (int h = 0; h < b.H; ++h) {
      const auto got = est.indices(h), want = cpu_vs(b, s, h, params[h]);
      ASSERT_EQ(got.vertical.size(), want.vertical.size());
      ASSERT_EQ(got.slash.size(), want.slash.size());
      ASSERT_TRUE(std::is_sorted(got.vertical.begin(), got.vertical.end()));
      ASSERT_TRUE(std::is_sorted(got.slash.rbegin(), got.slash.rend()));
      worst = std::min({worst, overlap(want.vertical, got.vertical), overlap(want.slash, got.slash)});
      hg.push_back(vertical_slash_head_plan(got, q_len, N, 64));
      hc.push_back(vertical_slash_head_plan(want, q_len, N, 64));
    }
    const PlanErrors e = compare_plans(b, s, plan_of(q_len, N, hg), plan_of(q_len, N, hc));
    std::printf("vertical-slash, random input, sequence %d: worst list overlap GPU vs CPU %.4f; outputs of the GPU's vs "
                "the CPU's plans %.3g (vs dense: %.3g and %.3g)\n",
                s, worst, e.between, e.first_vs_dense, e.second_vs_dense);
    EXPECT_GE(worst, 0.99);
    EXPECT_LE(e.between, std::max(0.25 * e.second_vs_dense, 0.01));
  }
}

TEST(CudaVerticalSlash, DevicePlanEqualsHostPlan) {
  VLM_REQUIRE_GPU();
  struct C {
    int q_len, ctx, v, sl;
  };
  const std::vector<C> cases = {{1300, 1300, 200, 300}, {500, 2100, 1000, 6096}, {77, 77, 40, 60},
                                {700, 4000, 120, 900}, {1000, 1000, 30, 50}};
  cuda::CudaVerticalSlash est;
  cuda::CudaVerticalSlashPlan vp;
  uint32_t seed = 21;
  for (const C& c : cases) {
    SCOPED_TRACE("q_len " + std::to_string(c.q_len) + " keys " + std::to_string(c.ctx));
    Batch b({{c.q_len, c.ctx}}, 8, 2, 128, DType::BF16, seed++, /*structured=*/seed % 2 == 0);
    VerticalSlashParams prm;
    prm.vertical_size = c.v, prm.slash_size = c.sl;
    est.estimate(b.dq.get(), b.act, b.dev_kv, b.dtables.as<int32_t>(), shape_of(b, 0, std::min(64, c.q_len)),
                 b.scale(), std::vector<VerticalSlashParams>(b.H, prm), nullptr);
    est.download(nullptr);
    vp.build(est, 0, c.q_len, c.ctx, nullptr);  // no sync of its own
    VLM_CUDA_CHECK(cudaDeviceSynchronize());     // the download is done
    std::vector<HeadPlan> heads;
    for (int h = 0; h < b.H; ++h) heads.push_back(vertical_slash_head_plan(est.indices(h), c.q_len, c.ctx, 64));
    const BlockSparsePlan host = plan_of(c.q_len, c.ctx, heads);
    const cuda::SparsePlanView v = vp.view();
    const int nqb = host.num_qblocks();
    ASSERT_EQ(v.num_items, b.H * nqb);
    EXPECT_NEAR(vp.block_density(), plan_block_density(host), 1e-12);
    std::vector<cuda::SparseHeadDesc> descs(b.H);
    VLM_CUDA_CHECK(cudaMemcpy(descs.data(), v.descs, b.H * sizeof(cuda::SparseHeadDesc), cudaMemcpyDeviceToHost));
    int64_t words = 0;
    for (const auto& d : descs) words = std::max<int64_t>(words, d.col_ptr + nqb + 1);
    std::vector<int32_t> data(words);
    VLM_CUDA_CHECK(cudaMemcpy(data.data(), v.data, words * 4, cudaMemcpyDeviceToHost));
    int64_t nb = 0, nc = 0;
    for (const auto& d : descs) nb = std::max<int64_t>(nb, data[d.block_ptr + nqb]), nc = std::max<int64_t>(nc, data[d.col_ptr + nqb]);
    data.resize(std::max(words, std::max(descs[0].blocks + nb, descs[0].cols + nc)));
    VLM_CUDA_CHECK(cudaMemcpy(data.data(), v.data, data.size() * 4, cudaMemcpyDeviceToHost));
    for (int h = 0; h < b.H; ++h) {
      const HeadPlan& hp = host.heads[h];
      const auto& d = descs[h];
      EXPECT_EQ(d.q_order, -1);
      EXPECT_EQ(d.k_order, -1);
      for (int m = 0; m < nqb; ++m) {
        const int b0 = data[d.block_ptr + m], b1 = data[d.block_ptr + m + 1];
        const int c0 = data[d.col_ptr + m], c1 = data[d.col_ptr + m + 1];
        ASSERT_EQ(std::vector<int32_t>(data.begin() + d.blocks + b0, data.begin() + d.blocks + b1),
                  std::vector<int32_t>(hp.blocks.begin() + hp.block_ptr[m], hp.blocks.begin() + hp.block_ptr[m + 1]))
            << "head " << h << " query block " << m;
        ASSERT_EQ(std::vector<int32_t>(data.begin() + d.cols + c0, data.begin() + d.cols + c1),
                  std::vector<int32_t>(hp.cols.begin() + hp.col_ptr[m], hp.cols.begin() + hp.col_ptr[m + 1]))
            << "head " << h << " query block " << m;
      }
    }
    const BlockSparsePlan* hptr = &host;
    cuda::CudaBlockSparsePlan up;
    up.upload({&hptr, 1}, b.cu.data(), b.H, nullptr);
    std::vector<int32_t> items_dev(4 * v.num_items), items_host(items_dev.size());
    VLM_CUDA_CHECK(cudaMemcpy(items_dev.data(), v.items, items_dev.size() * 4, cudaMemcpyDeviceToHost));
    VLM_CUDA_CHECK(cudaMemcpy(items_host.data(), up.view().items, items_host.size() * 4, cudaMemcpyDeviceToHost));
    EXPECT_EQ(items_dev, items_host);
    EXPECT_EQ(b.sparse(v), b.sparse(up.view())) << "attention over the device plan vs the host plan";
  }
}

// Modality codes of a sequence of N keys: text prefix, video, then text from `tail` on.
std::vector<uint8_t> text_video_text(int N, int tail) {
  std::vector<uint8_t> c(N, 0);
  for (int j = 200; j < tail; ++j) c[j] = 2;
  return c;
}

TEST(CudaBoundaryLines, LinesOverlapCpuAndPlansAgree) {
  VLM_REQUIRE_GPU();
  for (const bool structured : {true, false}) {
    Batch b({{2600, 2600}, {700, 3100}}, 8, 2, 128, DType::BF16, structured ? 31 : 32, structured);
    cuda::CudaBoundaryLines est;
    for (int s = 0; s < 2; ++s) {
      const int N = b.seqs[s].ctx, q_len = b.seqs[s].q_len;
      const auto codes = text_video_text(N, N - 150);  // the chunk's last 150 rows are text
      std::vector<BoundaryParams> params(b.H);
      for (int h = 0; h < b.H; ++h) params[h].vertical_size = 100 + 20 * h, params[h].slash_size = 200 + 30 * h;
      est.estimate(b.dq.get(), b.act, b.dev_kv, b.dtables.as<int32_t>() + s * b.max_blocks, shape_of(b, s, 64),
                   b.scale(), codes.data(), true, true, params, nullptr);
      est.download(nullptr);
      VLM_CUDA_CHECK(cudaStreamSynchronize(nullptr));
      for (const BoundaryKind kind : {BoundaryKind::Q, BoundaryKind::TwoD}) {
        double worst = 1;
        std::vector<HeadPlan> hg, hc;
        for (int h = 0; h < b.H; ++h) {
          const auto keys = head_keys(b, s, h);
          const BoundaryLines want = estimate_boundary_lines(kind, codes.data(), b.q.data() + size_t(b.cu[s]) * b.H * b.D,
                                                             b.H, h, q_len, keys.data(), N, b.D, b.scale(), params[h]);
          const BoundaryLines got = est.lines(kind, h);
          ASSERT_EQ(got.pairs.size(), want.pairs.size());
          for (size_t i = 0; i < got.pairs.size(); ++i) {
            ASSERT_EQ(got.pairs[i].mq, want.pairs[i].mq);
            ASSERT_EQ(got.pairs[i].mk, want.pairs[i].mk);
            ASSERT_EQ(got.pairs[i].vertical.size(), want.pairs[i].vertical.size());
            ASSERT_EQ(got.pairs[i].slash.size(), want.pairs[i].slash.size());
            worst = std::min({worst, overlap(want.pairs[i].vertical, got.pairs[i].vertical),
                              overlap(want.pairs[i].slash, got.pairs[i].slash)});
          }
          hg.push_back(boundary_head_plan(got, codes.data(), q_len, N, 64));
          hc.push_back(boundary_head_plan(want, codes.data(), q_len, N, 64));
        }
        const PlanErrors e = compare_plans(b, s, plan_of(q_len, N, hg), plan_of(q_len, N, hc));
        std::printf("%s boundary, %s input, sequence %d: worst line overlap GPU vs CPU %.4f; outputs of the GPU's vs "
                    "the CPU's plans %.3g (vs dense: %.3g and %.3g)\n",
                    kind == BoundaryKind::Q ? "Q" : "2D", structured ? "structured" : "random", s, worst, e.between,
                    e.first_vs_dense, e.second_vs_dense);
        EXPECT_GE(worst, 0.99);
        EXPECT_LE(e.between, std::max(0.25 * e.second_vs_dense, 0.01));
      }
    }
  }
}

}  // namespace
}  // namespace vlm
