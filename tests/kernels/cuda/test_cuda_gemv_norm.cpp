// The RMSNorm-fused decode GEMVs (kernels/cuda/gemm/gemv_norm.h) against their reference, the
// unfused path: rms_norm into a dt buffer, then gemv / gemv_silu_mul. At K <= 4096 the outputs
// must be equal bit for bit (same sums in the same order, same roundings); above (rms_norm's
// scalar kernel sums in another order) within a bf16 rounding of the normalized row. M = 1..4,
// odd N and I, K a multiple of 8 and not of 256, rows gathered or not, with and without bias,
// 16-bit and f32 (accumulating) outputs, and N large enough that each block loops over several
// column groups. Outputs are poisoned (NaN) first so an unwritten element fails. Skips where no
// GPU is visible.
#include <gtest/gtest.h>

#include <cstring>

#include "kernels/cuda/gemm/gemv.h"
#include "kernels/cuda/gemm/gemv_norm.h"
#include "kernels/cuda/ops/ops_cuda.h"
#include "tests/kernels/cuda/cuda_test_util.h"
#include "tests/support/gpu_test.h"

namespace vlm::testing {
namespace {

constexpr float kEps = 1e-6f;

cuda::DeviceBuffer nan_buffer(size_t bytes) {
  cuda::DeviceBuffer b(bytes);
  VLM_CUDA_CHECK(cudaMemset(b.get(), 0xff, bytes));
  return b;
}

std::vector<uint8_t> raw(const cuda::DeviceBuffer& b, size_t n, DType dt) { return to_host<uint8_t>(b, n * dtype_size(dt)); }

// Elements whose bytes differ, and NaNs in `got` (neither path may leave one).
int64_t mismatches(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want, DType dt) {
  const size_t e = dtype_size(dt);
  int64_t bad = 0;
  const std::vector<float> g = decode(got, dt);
  for (size_t i = 0; i < got.size() / e; ++i)
    bad += std::memcmp(got.data() + i * e, want.data() + i * e, e) != 0 || std::isnan(g[i]);
  return bad;
}

// Residual rows x [X, K] f32 with a per-row scale (so rows' inverse RMS differ), the norm
// weight [K] f32 around 1, and the gather `rows` (the last M rows of x in reverse, or none).
struct NormInputs {
  NormInputs(int64_t M, int64_t K, bool gather, uint32_t seed)
      : X(gather ? M + 3 : M), x(random_vector(X * K, seed)), nw(random_vector(K, seed + 1, 0.2f)) {
    for (int64_t r = 0; r < X; ++r)
      for (int64_t k = 0; k < K; ++k) x[r * K + k] *= 0.5f + static_cast<float>(r);
    for (float& v : nw) v += 1.0f;
    if (gather)
      for (int64_t m = 0; m < M; ++m) rows.push_back(static_cast<int32_t>(X - 1 - m));
    d_x = to_device(x);
    d_nw = to_device(nw);
    if (gather) d_rows = to_device(rows);
  }
  const int32_t* rows_ptr() const { return rows.empty() ? nullptr : d_rows.as<int32_t>(); }
  // The reference's first half: h [M, K] dt = rms_norm(x rows).
  cuda::DeviceBuffer normalized(int64_t M, int64_t K, DType dt) {
    auto h = nan_buffer(static_cast<size_t>(M * K) * dtype_size(dt));
    cuda::rms_norm(d_x.as<float>(), nullptr, d_nw.as<float>(), kEps, rows_ptr(), M, K, h.get(), dt, nullptr);
    return h;
  }
  int64_t X;
  std::vector<float> x, nw;
  std::vector<int32_t> rows;
  cuda::DeviceBuffer d_x, d_nw, d_rows;
};

class CudaGemvNorm : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override { VLM_REQUIRE_GPU(); }
};

TEST_P(CudaGemvNorm, EqualsRmsNormThenGemv) {
  const DType dt = GetParam();
  struct Shape { int64_t N, K; };
  // {40000, 64}: 5,000 column groups, more than fit the GPU at once (blocks loop); 5120: rms_norm's
  // scalar kernel (a different order of the sum of squares).
  for (const Shape sh : {Shape{37, 520}, Shape{300, 3584}, Shape{9, 8}, Shape{203, 4096}, Shape{40000, 64},
                         Shape{77, 5120}}) {
    for (int64_t M = 1; M <= cuda::kGemvMaxRows; ++M) {
      for (int variant = 0; variant < 3; ++variant) {  // 0: dt out; 1: dt out + bias; 2: f32 += with f32 bias
        for (bool gather : {false, true}) {
          const int64_t N = sh.N, K = sh.K;
          ASSERT_TRUE(cuda::gemv_norm_supported(M, K, dt)) << "M " << M << " K " << K;
          const DType out_dt = variant == 2 ? DType::F32 : dt;
          NormInputs in(M, K, gather, static_cast<uint32_t>(10 * M + variant));
          const auto w = round_to(random_vector(N * K, 200 + static_cast<uint32_t>(N), 0.05f), dt);
          const auto bias = round_to(random_vector(N, 300), out_dt);
          const auto y0 = random_vector(M * N, 400);
          auto d_w = to_device(encode(w, dt)), d_b = to_device(encode(bias, out_dt));
          const bool acc = variant == 2;
          const void* b = variant > 0 ? d_b.get() : nullptr;
          auto output = [&] { return acc ? to_device(y0) : nan_buffer(M * N * dtype_size(out_dt)); };
          auto h = in.normalized(M, K, dt);
          auto d_want = output(), d_naive = output(), d_got = output();
          cuda::gemv(h.get(), d_w.get(), dt, b, d_want.get(), out_dt, acc, M, N, K, nullptr);
          cuda::gemv_naive(h.get(), d_w.get(), dt, b, d_naive.get(), out_dt, acc, M, N, K, nullptr);
          cuda::gemv_norm(in.d_x.as<float>(), in.rows_ptr(), in.d_nw.as<float>(), kEps, d_w.get(), dt, b, d_got.get(),
                          out_dt, acc, M, N, K, nullptr);
          const auto got = raw(d_got, M * N, out_dt), want = raw(d_want, M * N, out_dt);
          SCOPED_TRACE(::testing::Message() << "N " << N << " K " << K << " M " << M << " variant " << variant
                                            << " gather " << gather);
          // gemv's own fast-vs-naive tolerances (test_cuda_gemv.cpp); f32 outputs of K > 4096 carry the
          // normalized row's rare last-bit flips.
          const double tol = out_dt == DType::F32 ? (K <= 4096 ? 1e-5 : 1e-3) : (dt == DType::BF16 ? 8e-3 : 1e-3);
          if (K <= 4096) {
            EXPECT_EQ(mismatches(got, want, out_dt), 0);
          } else {
            EXPECT_LE(rel_error(decode(got, out_dt), decode(want, out_dt)), tol);
          }
          EXPECT_LE(rel_error(decode(got, out_dt), decode(raw(d_naive, M * N, out_dt), out_dt)), tol);
        }
      }
    }
  }
}

TEST_P(CudaGemvNorm, SiluMulEqualsRmsNormThenGemvSiluMul) {
  const DType dt = GetParam();
  struct Shape { int64_t I, K; };
  for (const Shape sh : {Shape{333, 1032}, Shape{1000, 3584}, Shape{45, 5120}}) {
    for (int64_t M = 1; M <= cuda::kGemvMaxRows; ++M) {
      for (bool with_bias : {false, true}) {
        for (bool gather : {false, true}) {
          const int64_t I = sh.I, K = sh.K;
          NormInputs in(M, K, gather, static_cast<uint32_t>(7 * M + with_bias));
          const auto w = round_to(random_vector(2 * I * K, 8, 0.05f), dt);
          const auto bias = round_to(random_vector(2 * I, 9), dt);
          auto d_w = to_device(encode(w, dt)), d_b = to_device(encode(bias, dt));
          const void* b = with_bias ? d_b.get() : nullptr;
          auto h = in.normalized(M, K, dt);
          auto d_want = nan_buffer(M * I * dtype_size(dt)), d_got = nan_buffer(M * I * dtype_size(dt));
          cuda::gemv_silu_mul(h.get(), d_w.get(), dt, b, d_want.get(), M, I, K, nullptr);
          cuda::gemv_silu_mul_norm(in.d_x.as<float>(), in.rows_ptr(), in.d_nw.as<float>(), kEps, d_w.get(), dt, b,
                                   d_got.get(), M, I, K, nullptr);
          const auto got = raw(d_got, M * I, dt), want = raw(d_want, M * I, dt);
          SCOPED_TRACE(::testing::Message() << "I " << I << " K " << K << " M " << M << " bias " << with_bias
                                            << " gather " << gather);
          if (K <= 4096) {
            EXPECT_EQ(mismatches(got, want, dt), 0);
          } else {
            EXPECT_LE(rel_error(decode(got, dt), decode(want, dt)), dt == DType::BF16 ? 1.6e-2 : 2e-3);
          }
        }
      }
    }
  }
}

// Captured in a CUDA graph and replayed after x changed: the replay normalizes the new x.
TEST_P(CudaGemvNorm, ReplaysInACudaGraph) {
  const DType dt = GetParam();
  const int64_t M = 2, N = 611, K = 3584;
  NormInputs in(M, K, false, 5);
  const auto w = round_to(random_vector(N * K, 6, 0.05f), dt);
  auto d_w = to_device(encode(w, dt));
  auto d_got = nan_buffer(M * N * dtype_size(dt)), d_want = nan_buffer(M * N * dtype_size(dt));
  cudaStream_t s = nullptr;
  VLM_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  // One eager run first, as the decoder's graphs follow an eager step (its grid's occupancy query
  // is made then).
  cuda::gemv_norm(in.d_x.as<float>(), nullptr, in.d_nw.as<float>(), kEps, d_w.get(), dt, nullptr, d_got.get(), dt,
                  false, M, N, K, s);
  VLM_CUDA_CHECK(cudaStreamSynchronize(s));
  VLM_CUDA_CHECK(cudaMemset(d_got.get(), 0xff, M * N * dtype_size(dt)));
  VLM_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  cuda::gemv_norm(in.d_x.as<float>(), nullptr, in.d_nw.as<float>(), kEps, d_w.get(), dt, nullptr, d_got.get(), dt,
                  false, M, N, K, s);
  VLM_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
  VLM_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  const auto x2 = random_vector(M * K, 77, 3.0f);
  VLM_CUDA_CHECK(cudaMemcpy(in.d_x.get(), x2.data(), x2.size() * 4, cudaMemcpyHostToDevice));
  VLM_CUDA_CHECK(cudaGraphLaunch(exec, s));
  VLM_CUDA_CHECK(cudaStreamSynchronize(s));
  auto h = in.normalized(M, K, dt);
  cuda::gemv(h.get(), d_w.get(), dt, nullptr, d_want.get(), dt, false, M, N, K, nullptr);
  EXPECT_EQ(mismatches(raw(d_got, M * N, dt), raw(d_want, M * N, dt), dt), 0);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
}

TEST_P(CudaGemvNorm, RefusesWhatItDoesNotCover) {
  const DType dt = GetParam();
  EXPECT_TRUE(cuda::gemv_norm_supported(4, 3584, dt));   // Qwen2-7B: 28 KiB staged
  EXPECT_TRUE(cuda::gemv_norm_supported(4, 5120, dt));   // 40 KiB
  EXPECT_TRUE(cuda::gemv_norm_supported(2, 8192, dt));   // 32 KiB
  EXPECT_FALSE(cuda::gemv_norm_supported(4, 8192, dt));  // 64 KiB: rms_norm then gemv
  EXPECT_FALSE(cuda::gemv_norm_supported(5, 64, dt));
  EXPECT_FALSE(cuda::gemv_norm_supported(1, 12, dt));
  EXPECT_FALSE(cuda::gemv_norm_supported(1, 64, DType::F32));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaGemvNorm, ::testing::Values(DType::BF16, DType::F16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace vlm::testing
