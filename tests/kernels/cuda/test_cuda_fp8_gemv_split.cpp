// The split-K FP8 decode GEMV (kernels/cuda/gemm/fp8_gemv_split.h) against the naive kernel
// (fp8_gemv_naive) for splits 2 and 4, rows 1..4, bf16 / f16 inputs, the three epilogues of the
// decoder (x's type out; + bias; f32 += with an f32 bias) and shapes whose columns do not fill the
// last block (N 37, 9), whose K leaves parts empty (K 16, 528) and Qwen2-7B's o_proj / down_proj;
// within fp8_gemv's tolerances against naive (test_cuda_fp8.cpp), and within f32 rounding of
// fp8_gemv's Simple form. Outputs poisoned (NaN) first. Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/core/fp8.h"
#include "kernels/cuda/gemm/fp8_gemv.h"
#include "kernels/cuda/gemm/fp8_gemv_split.h"
#include "kernels/cuda/gemm/gemv.h"
#include "tests/kernels/cuda/cuda_test_util.h"
#include "tests/support/gpu_test.h"

namespace vlm::testing {
namespace {

class CudaFp8GemvSplit : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override { VLM_REQUIRE_GPU(); }
};

TEST_P(CudaFp8GemvSplit, MatchesNaive) {
  const DType dt = GetParam();
  EXPECT_FALSE(cuda::fp8_gemv_split_supported(1, 512, dt, 3));
  EXPECT_FALSE(cuda::fp8_gemv_split_supported(5, 512, dt, 2));
  struct Shape { int64_t N, K; };
  for (const Shape sh : {Shape{37, 528}, Shape{9, 16}, Shape{300, 3584}, Shape{3584, 3584}, Shape{3584, 18944}}) {
    const int64_t N = sh.N, K = sh.K;
    // Rows of w with magnitudes 2^-8 .. 2^4 (the scales differ), quantized on the host.
    std::vector<float> wf = random_vector(N * K, 500 + static_cast<uint32_t>(N));
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k) wf[n * K + k] *= std::ldexp(1.0f, static_cast<int>(n % 13) - 8);
    std::vector<uint8_t> wq(N * K);
    std::vector<float> ws(N);
    quantize_fp8_rows(wf.data(), N, K, wq.data(), ws.data());
    auto d_wq = to_device(wq), d_ws = to_device(ws);
    for (int64_t M = 1; M <= cuda::kGemvMaxRows; ++M)
      for (int variant = 0; variant < 3; ++variant) {  // 0: dt out; 1: dt out + bias; 2: f32 += with f32 bias
        const DType out_dt = variant == 2 ? DType::F32 : dt;
        const auto x = round_to(random_vector(M * K, 600 + static_cast<uint32_t>(M)), dt);
        const auto bias = round_to(random_vector(N, 601), out_dt);
        const auto y0 = random_vector(M * N, 602);
        auto d_x = to_device(encode(x, dt)), d_b = to_device(encode(bias, out_dt));
        const bool acc = variant == 2;
        const void* b = variant > 0 ? d_b.get() : nullptr;
        const size_t bytes = M * N * dtype_size(out_dt);
        auto run = [&](int form) {  // 0 naive, 1 simple, 2 / 4 split
          cuda::DeviceBuffer d_y = acc ? to_device(y0) : cuda::DeviceBuffer(bytes);
          if (!acc) VLM_CUDA_CHECK(cudaMemset(d_y.get(), 0xff, bytes));
          if (form == 0)
            cuda::fp8_gemv_naive(d_x.get(), d_wq.as<uint8_t>(), d_ws.as<float>(), dt, b, d_y.get(), out_dt, acc, M, N, K,
                                 nullptr);
          else if (form == 1)
            cuda::fp8_gemv(d_x.get(), d_wq.as<uint8_t>(), d_ws.as<float>(), dt, b, d_y.get(), out_dt, acc, M, N, K,
                           nullptr, cuda::Fp8GemvForm::Simple);
          else
            cuda::fp8_gemv_split(d_x.get(), d_wq.as<uint8_t>(), d_ws.as<float>(), dt, b, d_y.get(), out_dt, acc, M, N, K,
                                 form, nullptr);
          return decode(to_host<uint8_t>(d_y, bytes), out_dt);
        };
        const auto naive = run(0), simple = run(1);
        const double tol = out_dt == DType::F32 ? 1e-5 : (dt == DType::BF16 ? 8e-3 : 1e-3);
        for (const int split : {2, 4}) {
          SCOPED_TRACE(::testing::Message() << "N " << N << " K " << K << " M " << M << " variant " << variant
                                            << " split " << split);
          const auto got = run(split);
          EXPECT_LE(rel_error(got, naive), tol);
          EXPECT_LE(rel_error(got, simple), tol);
        }
      }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaFp8GemvSplit, ::testing::Values(DType::BF16, DType::F16),
                         [](const auto& i) { return std::string(dtype_name(i.param)); });

}  // namespace
}  // namespace vlm::testing
