// CudaGridSearch (the grid heads' online search with its reductions on the GPU) against the CPU's
// search_grid on the same inputs (the bf16 cache and queries): equal decisions (stride, phase,
// vertical and horizontal groups) per head, for a whole prompt and a chunk over earlier context,
// with and without the known frame stride; and the planted 256-token frame grid recovered. The
// stride and layout choice made on the device (the default) equals the host's over the same sums.
// Skips with a message when no GPU is visible.
#include <gtest/gtest.h>

#include <vector>

#include "kernels/cuda/sparse_estimate/cuda_grid_search.h"
#include "kernels/sparse_prefill/last_q_attention.h"
#include "kernels/sparse_prefill/sparse_prefill_planner.h"
#include "tests/kernels/cuda/cuda_sparse_fixture.h"
#include "tests/support/gpu_test.h"

namespace vlm {
namespace {

using testing::Batch;

// search_grid on the host for head h of sequence s (the planner's own steps).
GridLayout cpu_search(const Batch& b, int s, int h, int R, const GridParams& p, std::span<const int32_t> known) {
  const int N = b.seqs[s].ctx, q_len = b.seqs[s].q_len, D = b.D;
  std::vector<float> keys(static_cast<size_t>(N) * D), rows(static_cast<size_t>(R) * D),
      probs(static_cast<size_t>(R) * N);
  gather_head_keys(b.host_kv, b.tables.data() + static_cast<size_t>(s) * b.max_blocks, h / (b.H / b.Hkv), N,
                   keys.data());
  std::vector<int32_t> pos(R);
  for (int r = 0; r < R; ++r) {
    const int row = q_len - R + r;
    pos[r] = N - q_len + row;
    std::copy_n(b.q.data() + (static_cast<size_t>(b.cu[s] + row) * b.H + h) * D, D, rows.data() + size_t(r) * D);
  }
  last_q_attention(rows.data(), pos.data(), R, keys.data(), N, D, b.scale(), probs.data());
  return search_grid(probs.data(), pos.data(), R, N, p, known);
}

TEST(CudaGridSearch, DecisionsEqualCpuSearchAndPlantedGridFound) {
  VLM_REQUIRE_GPU();
  Batch b({{2600, 2600}, {500, 3000}}, 8, 2, 128, DType::BF16, 5, /*structured=*/true);
  const int32_t frame[] = {256};
  GridParams p;  // MMInference's default head: online search 16..1024
  cuda::CudaGridSearch gs;
  for (int s = 0; s < 2; ++s)
    for (bool with_known : {true, false}) {
      const std::span<const int32_t> known = with_known ? std::span<const int32_t>(frame) : std::span<const int32_t>();
      cuda::GridEstimateShape sh;
      sh.num_heads = b.H;
      sh.t0 = b.cu[s];
      sh.q_len = b.seqs[s].q_len;
      sh.num_keys = b.seqs[s].ctx;
      sh.rows = 64;
      // The choice on the device (the default), and on the host from the downloaded sums: the
      // same decisions and scores bit for bit (the same sums in the same order); also for other
      // switches (no slash lines, 4 vertical / 2 horizontal groups, strides up to 600, 17 sinks).
      auto search = [&](const GridParams& params, bool on_device) {
        gs.device_choice = on_device;
        auto r = gs.search(b.dq.get(), b.act, b.dev_kv, b.dtables.as<int32_t>() + s * b.max_blocks, sh, b.scale(),
                           params, known, nullptr);
        gs.device_choice = true;
        return r;
      };
      GridParams other = p;
      other.use_slash = false;
      other.num_vlines = 4;
      other.num_hlines = 2;
      other.max_stride = 600;
      other.n_init = 17;
      const auto got = search(p, true);
      for (const GridParams& params : {p, other}) {
        const auto on_dev = search(params, true), on_host = search(params, false);
        ASSERT_EQ(static_cast<int>(on_dev.size()), b.H);
        ASSERT_EQ(static_cast<int>(on_host.size()), b.H);
        for (int h = 0; h < b.H; ++h) {
          SCOPED_TRACE("head " + std::to_string(h) + (params.use_slash ? "" : " (other switches)"));
          EXPECT_EQ(on_dev[h].stride, on_host[h].stride);
          EXPECT_EQ(on_dev[h].phase, on_host[h].phase);
          EXPECT_EQ(on_dev[h].vgroups, on_host[h].vgroups);
          EXPECT_EQ(on_dev[h].hgroups, on_host[h].hgroups);
          EXPECT_EQ(on_dev[h].score, on_host[h].score);
        }
      }
      ASSERT_EQ(static_cast<int>(got.size()), b.H);
      for (int h = 0; h < b.H; ++h) {
        const GridLayout ref = cpu_search(b, s, h, 64, p, known);
        SCOPED_TRACE("seq " + std::to_string(s) + " head " + std::to_string(h) + (with_known ? " known" : ""));
        EXPECT_EQ(got[h].stride, ref.stride);
        EXPECT_EQ(got[h].phase, ref.phase);
        EXPECT_EQ(got[h].vgroups, ref.vgroups);
        EXPECT_EQ(got[h].hgroups, ref.hgroups);
        EXPECT_NEAR(got[h].score, ref.score, 1e-3 * ref.score);
        EXPECT_EQ(got[h].stride % 256, 0) << "the planted 256-token frame grid (or a multiple)";
        if (with_known) EXPECT_EQ(got[h].stride, 256);
      }
    }
}

}  // namespace
}  // namespace vlm
