// The decode step's GEMV (kernels/cuda/gemm/gemv.h) against its naive reference, and the
// reference against a double-precision dot on the host; M = 1..4 rows, K a multiple of 256 and
// not, with and without bias, 16-bit and f32 (accumulating) outputs, and the fused SiLU·mul.
// Outputs are poisoned (NaN) first so an unwritten element fails. Skips where no GPU is visible.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/cuda/gemm/gemv.h"
#include "kernels/cuda/ops/ops_cuda.h"
#include "tests/kernels/cuda/cuda_test_util.h"
#include "tests/support/gpu_test.h"

namespace vlm::testing {
namespace {

cuda::DeviceBuffer nan_buffer(size_t bytes) {
  cuda::DeviceBuffer b(bytes);
  VLM_CUDA_CHECK(cudaMemset(b.get(), 0xff, bytes));
  return b;
}

std::vector<float> download(const cuda::DeviceBuffer& b, size_t n, DType dt) {
  return decode(to_host<uint8_t>(b, n * dtype_size(dt)), dt);
}

class CudaGemv : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override { VLM_REQUIRE_GPU(); }
};

TEST_P(CudaGemv, MatchesNaiveAndHostDot) {
  const DType dt = GetParam();
  struct Shape { int64_t N, K; };
  for (const Shape sh : {Shape{37, 520}, Shape{300, 3584}, Shape{9, 8}}) {
    for (int64_t M = 1; M <= cuda::kGemvMaxRows; ++M) {
      for (int variant = 0; variant < 3; ++variant) {  // 0: dt out; 1: dt out + bias; 2: f32 += with f32 bias
        const int64_t N = sh.N, K = sh.K;
        const DType out_dt = variant == 2 ? DType::F32 : dt;
        const auto x = round_to(random_vector(M * K, 100 + M), dt);
        const auto w = round_to(random_vector(N * K, 200 + N, 0.05f), dt);
        const auto bias = round_to(random_vector(N, 300), out_dt);
        const auto y0 = random_vector(M * N, 400);
        auto d_x = to_device(encode(x, dt)), d_w = to_device(encode(w, dt)), d_b = to_device(encode(bias, out_dt));
        const bool with_bias = variant > 0, acc = variant == 2;
        auto run = [&](bool naive) {
          auto d_y = acc ? to_device(y0) : nan_buffer(M * N * dtype_size(out_dt));
          auto f = naive ? cuda::gemv_naive : cuda::gemv;
          f(d_x.get(), d_w.get(), dt, with_bias ? d_b.get() : nullptr, d_y.get(), out_dt, acc, M, N, K, nullptr);
          return download(d_y, M * N, out_dt);
        };
        const auto fast = run(false), naive = run(true);
        std::vector<float> want(M * N);
        for (int64_t m = 0; m < M; ++m)
          for (int64_t n = 0; n < N; ++n) {
            double v = 0;
            for (int64_t k = 0; k < K; ++k) v += static_cast<double>(x[m * K + k]) * w[n * K + k];
            if (with_bias) v += bias[n];
            if (acc) v += y0[m * N + n];
            want[m * N + n] = static_cast<float>(v);
          }
        const double tol = out_dt == DType::F32 ? 1e-5 : (dt == DType::BF16 ? 8e-3 : 1e-3);
        SCOPED_TRACE(::testing::Message() << "N " << N << " K " << K << " M " << M << " variant " << variant);
        EXPECT_LE(rel_error(naive, want), tol);
        EXPECT_LE(rel_error(fast, naive), tol);
      }
    }
  }
}

TEST_P(CudaGemv, SiluMulMatchesGemvThenSiluMul) {
  const DType dt = GetParam();
  const int64_t I = 333, K = 1032;
  for (int64_t M = 1; M <= cuda::kGemvMaxRows; ++M) {
    for (bool with_bias : {false, true}) {
      const auto x = round_to(random_vector(M * K, 7 + M), dt);
      const auto w = round_to(random_vector(2 * I * K, 8, 0.05f), dt);
      const auto bias = round_to(random_vector(2 * I, 9), dt);
      auto d_x = to_device(encode(x, dt)), d_w = to_device(encode(w, dt)), d_b = to_device(encode(bias, dt));
      const void* b = with_bias ? d_b.get() : nullptr;
      // Unfused: gu = x w^T + b (naive GEMV), then silu_mul.
      auto d_gu = nan_buffer(M * 2 * I * dtype_size(dt)), d_want = nan_buffer(M * I * dtype_size(dt));
      cuda::gemv_naive(d_x.get(), d_w.get(), dt, b, d_gu.get(), dt, false, M, 2 * I, K, nullptr);
      cuda::silu_mul(d_gu.get(), M, I, d_want.get(), dt, nullptr);
      auto d_naive = nan_buffer(M * I * dtype_size(dt)), d_fast = nan_buffer(M * I * dtype_size(dt));
      cuda::gemv_silu_mul_naive(d_x.get(), d_w.get(), dt, b, d_naive.get(), M, I, K, nullptr);
      cuda::gemv_silu_mul(d_x.get(), d_w.get(), dt, b, d_fast.get(), M, I, K, nullptr);
      const auto want = download(d_want, M * I, dt), naive = download(d_naive, M * I, dt),
                 fast = download(d_fast, M * I, dt);
      SCOPED_TRACE(::testing::Message() << "M " << M << " bias " << with_bias);
      EXPECT_EQ(naive, want);  // same sums in the same order, same roundings
      EXPECT_LE(rel_error(fast, naive), dt == DType::BF16 ? 1.6e-2 : 2e-3);
    }
  }
}

TEST_P(CudaGemv, RefusesWhatItDoesNotCover) {
  EXPECT_FALSE(cuda::gemv_supported(5, 64, GetParam()));
  EXPECT_FALSE(cuda::gemv_supported(1, 12, GetParam()));
  EXPECT_FALSE(cuda::gemv_supported(1, 64, DType::F32));
  EXPECT_TRUE(cuda::gemv_supported(4, 64, GetParam()));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaGemv, ::testing::Values(DType::BF16, DType::F16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace vlm::testing
