// The GPU row kernels (kernels/cuda/ops) and cuBLASLt linear against their CPU references
// (attention: tests/kernels/cuda/test_cuda_attention.cpp), on fresh random inputs, outputs poisoned (NaN) before each run so an
// unwritten element fails. Skips where no GPU is visible.
#include <gtest/gtest.h>

#include <limits>
#include <numeric>
#include <utility>

#include "kernels/cuda/gemm/cublaslt_gemm.h"
#include "kernels/cuda/ops/ops_cuda.h"
#include "kernels/gemm/gemm.h"
#include "kernels/ops/ops_ref.h"
#include "kernels/ops/rope.h"
#include "tests/kernels/cuda/cuda_test_util.h"
#include "tests/support/gpu_test.h"

namespace vlm::testing {
namespace {


cuda::DeviceBuffer poisoned(size_t bytes) {
  cuda::DeviceBuffer b(bytes);
  VLM_CUDA_CHECK(cudaMemset(b.get(), 0xff, bytes));  // NaN in f32, bf16 and f16
  return b;
}

class CudaOps : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override { VLM_REQUIRE_GPU(); }
  // f32 matches the CPU to rounding; 16-bit outputs to their precision.
  double tol() const { return GetParam() == DType::F32 ? 1e-6 : (GetParam() == DType::BF16 ? 8e-3 : 1e-3); }
};

TEST_P(CudaOps, EmbeddingMatchesCpu) {
  const DType dt = GetParam();
  const int64_t V = 1000, C = 384, T = 37;
  const auto table = round_to(random_vector(V * C, 1), dt);
  std::vector<int32_t> ids(T);
  for (int64_t t = 0; t < T; ++t) ids[t] = static_cast<int32_t>((t * 7919) % V);
  auto d_table = to_device(encode(table, dt));
  auto d_ids = to_device(ids);
  auto d_x = poisoned(T * C * 4);
  cuda::embedding(d_table.get(), dt, d_ids.as<int32_t>(), T, C, d_x.as<float>(), nullptr);
  std::vector<float> want(T * C);
  embedding_lookup_ref(TensorView(const_cast<float*>(table.data()), DType::F32, {V, C}), ids.data(), T, want.data());
  EXPECT_EQ(to_host<float>(d_x, T * C), want);
}

TEST_P(CudaOps, RmsNormWithResidualAndRowsMatchesCpu) {
  const DType dt = GetParam();
  // C 3584 and 3580: the 16-byte-vector kernel (3580: the last thread's groups partly past C);
  // 1026: the scalar kernel (C % 4 != 0).
  for (const int64_t C : {3584, 3580, 1026}) {
    const int64_t T = 9;
    auto x = random_vector(T * C, 2, 3.0f);
    const auto r = round_to(random_vector(T * C, 3), dt);
    const auto w = random_vector(C, 4);
    auto d_x = to_device(x);
    auto d_r = to_device(encode(r, dt));
    auto d_w = to_device(w);
    auto d_out = poisoned(T * C * dtype_size(dt));
    cuda::rms_norm(d_x.as<float>(), d_r.get(), d_w.as<float>(), 1e-6f, nullptr, T, C, d_out.get(), dt, nullptr);
    for (size_t i = 0; i < x.size(); ++i) x[i] += r[i];
    std::vector<float> want(T * C);
    rms_norm_ref(x.data(), TensorView(const_cast<float*>(w.data()), DType::F32, {C}), 1e-6f, T, want.data());
    EXPECT_LE(rel_error(to_host<float>(d_x, T * C), x), 1e-7) << "C " << C;  // the residual add in place
    EXPECT_LE(rel_error(decode(to_host<uint8_t>(d_out, T * C * dtype_size(dt)), dt), want), tol()) << "C " << C;
    // Gathered rows (the final norm on the sampled rows only).
    const std::vector<int32_t> rows = {8, 0, 5};
    auto d_rows = to_device(rows);
    auto d_sel = poisoned(3 * C * dtype_size(dt));
    cuda::rms_norm(d_x.as<float>(), nullptr, d_w.as<float>(), 1e-6f, d_rows.as<int32_t>(), 3, C, d_sel.get(), dt,
                   nullptr);
    std::vector<float> want_sel;
    for (int32_t row : rows) want_sel.insert(want_sel.end(), want.begin() + row * C, want.begin() + (row + 1) * C);
    EXPECT_LE(rel_error(decode(to_host<uint8_t>(d_sel, 3 * C * dtype_size(dt)), dt), want_sel), tol()) << "C " << C;
  }
}

TEST_P(CudaOps, SiluMulMatchesCpu) {
  const DType dt = GetParam();
  // 16-byte vectors (I % 8 == 0) and the scalar kernel; more rows than CUDA's 65,535 grid rows
  // (a 64K-token chunk) with a small I.
  const std::pair<int64_t, int64_t> shapes[] = {{5, 1000}, {5, 1004}, {70001, 8}, {70001, 12}};
  for (const auto& [T, I] : shapes) {
    SCOPED_TRACE(::testing::Message() << "T " << T << " I " << I);
    const auto gu = round_to(random_vector(T * 2 * I, 5, 2.0f), dt);
    auto d_gu = to_device(encode(gu, dt));
    auto d_out = poisoned(T * I * dtype_size(dt));
    cuda::silu_mul(d_gu.get(), T, I, d_out.get(), dt, nullptr);
    std::vector<float> g, u, want(T * I);
    for (int64_t t = 0; t < T; ++t) {
      g.insert(g.end(), gu.begin() + t * 2 * I, gu.begin() + t * 2 * I + I);
      u.insert(u.end(), gu.begin() + t * 2 * I + I, gu.begin() + (t + 1) * 2 * I);
    }
    silu_mul_ref(g.data(), u.data(), T, I, want.data());
    EXPECT_LE(rel_error(decode(to_host<uint8_t>(d_out, T * I * dtype_size(dt)), dt), want), std::max(tol(), 1e-6));
  }
}

// RoPE of every scaling type, 1-D and M-RoPE, against RotaryEmbedding (bit-level on f32 up to
// the last ulp of cos/sin).
TEST_P(CudaOps, RopeMatchesCpuForEveryScaling) {
  const DType dt = GetParam();
  const int64_t T = 11, H = 4, Hkv = 2, D = 64;
  std::vector<RopeConfig> cfgs(6);
  for (RopeConfig& c : cfgs) {
    c.head_dim = D;
    c.theta = 10000.0;
  }
  cfgs[1].type = RopeType::Llama3;
  cfgs[1].factor = 8;
  cfgs[1].original_max_position = 64;
  cfgs[2].type = RopeType::Yarn;
  cfgs[2].factor = 4;
  cfgs[2].original_max_position = 64;
  cfgs[3].type = RopeType::Linear;
  cfgs[3].factor = 2;
  cfgs[4].mrope_section = {8, 12, 12};
  cfgs[5].mrope_section = {12, 10, 10};  // Qwen3-VL's layout: T H W T H W ... (RopeMrope tests the CPU's)
  cfgs[5].mrope_interleaved = true;
  for (size_t ci = 0; ci < cfgs.size(); ++ci) {
    const RotaryEmbedding rope(cfgs[ci]);
    const bool mrope = !cfgs[ci].mrope_section.empty();
    std::vector<int32_t> pos(T), mpos(3 * T);
    for (int64_t t = 0; t < T; ++t) {
      pos[t] = static_cast<int32_t>(t * 37 + 3);
      for (int a = 0; a < 3; ++a) mpos[3 * t + a] = static_cast<int32_t>(t * (a + 1) + 5 * a);
    }
    const int64_t W = (H + 2 * Hkv) * D;  // the fused qkv row: q heads, k heads, v heads
    const auto qkv = round_to(random_vector(T * W, 10 + static_cast<uint32_t>(ci)), dt);
    auto d_qkv = to_device(encode(qkv, dt));
    auto d_pos = to_device(pos);
    auto d_mpos = to_device(mpos);
    auto d_inv = to_device(rope.inv_freq());
    const int half = static_cast<int>(rope.inv_freq().size());
    auto d_table = poisoned(T * 2 * half * 4);
    cuda::MropeAxes axes;
    if (mrope) {
      axes.s0 = cfgs[ci].mrope_section[0];
      axes.s1 = cfgs[ci].mrope_section[1];
      axes.s2 = cfgs[ci].mrope_section[2];
      axes.interleaved = cfgs[ci].mrope_interleaved;
    }
    cuda::rope_table(d_pos.as<int32_t>(), mrope ? d_mpos.as<int32_t>() : nullptr, axes, d_inv.as<float>(), half,
                     rope.attention_scaling(), T, d_table.as<float>(), nullptr);
    const size_t e = dtype_size(dt);
    auto d_q = poisoned(T * H * D * e), d_k = poisoned(T * Hkv * D * e), d_v = poisoned(T * Hkv * D * e);
    cuda::rope_split_qkv(d_qkv.get(), T, H, Hkv, D, d_table.as<float>(), 2 * half, d_q.get(), d_k.get(), d_v.get(), dt,
                         nullptr);
    std::vector<float> table(T * 2 * half), q(T * H * D), k(T * Hkv * D), v(T * Hkv * D);
    if (mrope) rope.cos_sin_table_mrope(mpos.data(), T, table.data());
    else rope.cos_sin_table(pos.data(), T, table.data());
    EXPECT_LE(rel_error(to_host<float>(d_table, table.size()), table), 1e-7) << "config " << ci;
    for (int64_t t = 0; t < T; ++t) {
      std::copy(qkv.begin() + t * W, qkv.begin() + t * W + H * D, q.begin() + t * H * D);
      std::copy(qkv.begin() + t * W + H * D, qkv.begin() + t * W + (H + Hkv) * D, k.begin() + t * Hkv * D);
      std::copy(qkv.begin() + t * W + (H + Hkv) * D, qkv.begin() + (t + 1) * W, v.begin() + t * Hkv * D);
    }
    rope.apply_cached(q.data(), H, k.data(), Hkv, table.data(), T);
    const auto got_q = decode(to_host<uint8_t>(d_q, T * H * D * e), dt);
    const auto got_k = decode(to_host<uint8_t>(d_k, T * Hkv * D * e), dt);
    EXPECT_EQ(decode(to_host<uint8_t>(d_v, T * Hkv * D * e), dt), v) << "config " << ci;  // v copied as is
    EXPECT_LE(rel_error(got_q, q), std::max(tol(), 1e-6)) << "config " << ci;
    EXPECT_LE(rel_error(got_k, k), std::max(tol(), 1e-6)) << "config " << ci;
  }
}

// Qwen3's per-head q/k RMSNorm in place on fused qkv rows, against rms_norm_ref over each head
// (v untouched), for head sizes below and above one block of threads.
TEST_P(CudaOps, HeadRmsNormMatchesCpuPerHead) {
  const DType dt = GetParam();
  for (int64_t D : {24, 128, 256}) {
    const int64_t T = 9, H = 4, Hkv = 2, W = (H + 2 * Hkv) * D;
    const auto qkv = round_to(random_vector(T * W, 40 + static_cast<uint32_t>(D)), dt);
    const auto qw = random_vector(D, 41), kw = random_vector(D, 42);
    auto d_qkv = to_device(encode(qkv, dt));
    auto d_qw = to_device(qw), d_kw = to_device(kw);
    cuda::head_rms_norm(d_qkv.get(), T, H, Hkv, D, d_qw.as<float>(), d_kw.as<float>(), 1e-6f, dt, nullptr);
    const auto got = decode(to_host<uint8_t>(d_qkv, T * W * dtype_size(dt)), dt);
    std::vector<float> want(qkv);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < H + Hkv; ++h) {
        float* x = want.data() + t * W + h * D;
        const std::vector<float>& w = h < H ? qw : kw;
        rms_norm_ref(x, TensorView(const_cast<float*>(w.data()), DType::F32, {D}), 1e-6f, 1, x);
      }
    for (int64_t t = 0; t < T; ++t)  // v heads copied as they were, bit for bit
      for (int64_t i = (H + Hkv) * D; i < W; ++i) ASSERT_EQ(got[t * W + i], qkv[t * W + i]) << "D " << D;
    EXPECT_LE(rel_error(got, want), std::max(tol(), 1e-6)) << "D " << D;
  }
}

// y = x W^T + bias, then y += x2 W2^T (beta = 1), against linear_ref (double accumulation).
TEST_P(CudaOps, CublasLtLinearWithBiasAndAccumulateMatchesCpu) {
  const DType dt = GetParam();
  cuda::CublasLtGemm gemm;
  for (int64_t M : {1, 7, 64, 300}) {
    const int64_t N = 384, K = 512;
    const auto x = round_to(random_vector(M * K, 20 + static_cast<uint32_t>(M)), dt);
    const auto w = round_to(random_vector(N * K, 21, 0.05f), dt);
    const auto bias = round_to(random_vector(N, 22), dt);
    auto d_x = to_device(encode(x, dt));
    auto d_w = to_device(encode(w, dt));
    auto d_b = to_device(encode(bias, dt));
    auto d_y = poisoned(M * N * dtype_size(dt));
    gemm.linear(d_x.get(), d_w.get(), dt, d_b.get(), d_y.get(), dt, 0.0f, M, N, K, nullptr);
    std::vector<float> want(M * N);
    linear_ref(x.data(), M, TensorView(const_cast<float*>(w.data()), DType::F32, {N, K}), bias.data(), want.data());
    const double err = rel_error(decode(to_host<uint8_t>(d_y, M * N * dtype_size(dt)), dt), want);
    EXPECT_LE(err, dt == DType::F32 ? 1e-6 : tol()) << "M " << M;  // 1e-6: no TF32 on the f32 path
    // Accumulate into an f32 residual: r += x W^T (f32 bias).
    auto r = random_vector(M * N, 23);
    auto d_r = to_device(r);
    const auto fbias = random_vector(N, 24);
    auto d_fb = to_device(fbias);
    gemm.linear(d_x.get(), d_w.get(), dt, d_fb.get(), d_r.get(), DType::F32, 1.0f, M, N, K, nullptr);
    linear_ref(x.data(), M, TensorView(const_cast<float*>(w.data()), DType::F32, {N, K}), fbias.data(), want.data());
    for (size_t i = 0; i < r.size(); ++i) r[i] += want[i];
    EXPECT_LE(rel_error(to_host<float>(d_r, M * N), r), dt == DType::F32 ? 1e-6 : 2e-3) << "M " << M;
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaOps, ::testing::Values(DType::F32, DType::BF16, DType::F16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace vlm::testing
