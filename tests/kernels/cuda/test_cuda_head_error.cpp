// The pattern search's device reductions (kernels/cuda/sparse_prefill/head_error.h) against their
// naive host references: per-head squared-error and reference-norm sums of bf16 and f32 outputs
// (rows not a multiple of the kernel's row block), and per-head computed key blocks of an uploaded
// plan (blocks plus gathered columns / 64, plan_block_counts' per-head figure) for two sequences.
// Skips without a GPU.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/core/dtype.h"
#include "kernels/cuda/core/device_buffer.h"
#include "kernels/cuda/sparse_prefill/cuda_block_sparse.h"
#include "kernels/cuda/sparse_prefill/head_error.h"
#include "tests/support/gpu_test.h"

namespace vlm::testing {
namespace {

std::vector<double> run_sums(const std::vector<float>& out, const std::vector<float>& ref, DType act, int64_t T, int H,
                             int D) {
  const size_t n = out.size(), es = dtype_size(act);
  std::vector<uint8_t> ho(n * es), hr(n * es);
  for (size_t i = 0; i < n; ++i) {
    if (act == DType::BF16) {
      reinterpret_cast<uint16_t*>(ho.data())[i] = f32_to_bf16(out[i]);
      reinterpret_cast<uint16_t*>(hr.data())[i] = f32_to_bf16(ref[i]);
    } else {
      reinterpret_cast<float*>(ho.data())[i] = out[i];
      reinterpret_cast<float*>(hr.data())[i] = ref[i];
    }
  }
  cuda::DeviceBuffer d_o, d_r, d_s;
  d_o.resize(ho.size());
  d_r.resize(hr.size());
  d_s.resize(sizeof(double) * H * 2);
  cudaMemcpy(d_o.get(), ho.data(), ho.size(), cudaMemcpyHostToDevice);
  cudaMemcpy(d_r.get(), hr.data(), hr.size(), cudaMemcpyHostToDevice);
  cudaMemset(d_s.get(), 0, d_s.bytes());
  cuda::head_error_sums(d_o.get(), d_r.get(), act, T, H, D, d_s.as<double>(), nullptr);
  std::vector<double> s(H * 2);
  cudaMemcpy(s.data(), d_s.get(), s.size() * sizeof(double), cudaMemcpyDeviceToHost);
  return s;
}

TEST(CudaHeadError, SumsEqualHostLoops) {
  VLM_REQUIRE_GPU();
  const int64_t T = 333;
  const int H = 6, D = 64;
  std::mt19937 rng(3);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> out(T * H * D), ref(out.size());
  for (size_t i = 0; i < out.size(); ++i) {
    ref[i] = g(rng);
    out[i] = ref[i] + 0.1f * static_cast<float>(i % H + 1) * g(rng);  // a different error per head
  }
  for (DType act : {DType::F32, DType::BF16}) {
    auto rounded = [&](float v) { return act == DType::BF16 ? bf16_to_f32(f32_to_bf16(v)) : v; };
    std::vector<double> want(H * 2, 0.0);
    for (int64_t r = 0; r < T; ++r)
      for (int h = 0; h < H; ++h)
        for (int d = 0; d < D; ++d) {
          const size_t i = (r * H + h) * D + d;
          const double o = rounded(out[i]), f = rounded(ref[i]);
          want[2 * h] += (o - f) * (o - f);
          want[2 * h + 1] += f * f;
        }
    const std::vector<double> got = run_sums(out, ref, act, T, H, D);
    for (int i = 0; i < 2 * H; ++i) EXPECT_NEAR(got[i], want[i], 1e-9 * want[i]) << dtype_name(act) << " " << i;
  }
}

// A head plan of random key blocks and gathered columns per query block (counted, not run).
HeadPlan random_head(int q_len, int num_keys, std::mt19937& rng) {
  HeadPlan hp;
  const int nqb = (q_len + 63) / 64, nkb = (num_keys + 63) / 64;
  hp.block_ptr.push_back(0);
  hp.col_ptr.push_back(0);
  for (int m = 0; m < nqb; ++m) {
    for (int k = 0; k < nkb; ++k)
      if (rng() % 3 == 0) hp.blocks.push_back(64 * k);
    for (int c = 0; c < num_keys; c += 1 + static_cast<int>(rng() % 50)) hp.cols.push_back(c);
    hp.block_ptr.push_back(static_cast<int32_t>(hp.blocks.size()));
    hp.col_ptr.push_back(static_cast<int32_t>(hp.cols.size()));
  }
  return hp;
}

TEST(CudaHeadError, PlanHeadBlocksEqualPlanCounts) {
  VLM_REQUIRE_GPU();
  const int H = 5;
  std::mt19937 rng(9);
  BlockSparsePlan a, b;
  a.q_len = 300, a.num_keys = 700;
  b.q_len = 128, b.num_keys = 128;
  for (int h = 0; h < H; ++h) {
    a.heads.push_back(random_head(a.q_len, a.num_keys, rng));
    b.heads.push_back(random_head(b.q_len, b.num_keys, rng));
  }
  const int32_t cu[3] = {0, a.q_len, a.q_len + b.q_len};
  const BlockSparsePlan* plans[2] = {&a, &b};
  cuda::CudaBlockSparsePlan up;
  up.upload(plans, cu, H, nullptr);
  cuda::DeviceBuffer d;
  d.resize(sizeof(double) * H);
  for (int s = 0; s < 2; ++s) {
    cuda::plan_head_blocks(up.view(), s, H, d.as<double>(), nullptr);
    std::vector<double> got(H);
    cudaMemcpy(got.data(), d.get(), H * sizeof(double), cudaMemcpyDeviceToHost);
    for (int h = 0; h < H; ++h) {
      const HeadPlan& hp = plans[s]->heads[h];
      EXPECT_DOUBLE_EQ(got[h], hp.blocks.size() + hp.cols.size() / 64.0) << "seq " << s << " head " << h;
    }
  }
}

}  // namespace
}  // namespace vlm::testing
