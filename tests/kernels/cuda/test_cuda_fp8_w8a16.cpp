// The W8A16 product of decode steps of up to 64 rows (kernels/cuda/gemm/fp8_w8a16_gemm.h): FP8
// E4M3 weights with per-channel scales, bf16 activations as they are. Against its naive reference
// (fp8_w8a16_naive, itself against a double-precision host product on the small shapes) in all
// four epilogues (bf16 out, + bias, f32 += residual, both); M = 1..64 incl. odd M and tokens not a
// multiple of 8; N not a multiple of the 32-row tile; K not a multiple of the 64-column chunk;
// both forms (K split across blocks with partial sums; one pass with the epilogue in the kernel);
// and Qwen2-7B's decoder shapes; the SiLU·mul form against the naive product followed by
// ops_cuda's silu_mul. The in-register E4M3 -> bf16 conversion is checked bit-exactly
// over every non-NaN byte (subnormals, zeros, negatives) with one-hot activations. Outputs are
// poisoned (NaN) first. Skips where no GPU is visible.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "kernels/core/fp8.h"
#include "kernels/cuda/gemm/fp8_w8a16_gemm.h"
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

class CudaFp8W8a16 : public ::testing::Test {
 protected:
  void SetUp() override { VLM_REQUIRE_GPU(); }
};

// Variants: 0 bf16 out; 1 bf16 out + bias (Qwen2's q/k/v); 2 f32 += (o_proj, down_proj: the
// residual add); 3 f32 += with a bias.
TEST_F(CudaFp8W8a16, MatchesNaiveAndHost) {
  struct Shape { int64_t N, K; bool host; };
  for (const Shape sh : {Shape{37, 64, true}, Shape{45, 48, true}, Shape{300, 3584, true}, Shape{1000, 272, true},
                         Shape{4608, 3584, false}, Shape{3584, 18944, false}}) {
    const int64_t N = sh.N, K = sh.K;
    // Rows of magnitudes 2^-8 .. 2^4 (so the scales differ), quantized on the host.
    std::vector<float> wf = random_vector(N * K, 31 + static_cast<uint32_t>(N));
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k) wf[n * K + k] *= std::ldexp(1.0f, static_cast<int>(n % 13) - 8);
    std::vector<uint8_t> wq(N * K);
    std::vector<float> ws(N), deq(sh.host ? N * K : 0);
    quantize_fp8_rows(wf.data(), N, K, wq.data(), ws.data());
    if (sh.host) dequantize_fp8_rows(wq.data(), ws.data(), N, K, deq.data());
    auto d_wq = to_device(wq);
    auto d_ws = to_device(ws);
    const auto bias = round_to(random_vector(N, 3), DType::BF16);
    auto d_b16 = to_device(encode(bias, DType::BF16));
    auto d_b32 = to_device(bias);
    for (const int64_t M : {1, 2, 3, 4, 5, 8, 9, 13, 16, 17, 31, 33, 48, 63, 64}) {
      if (!sh.host && M != 2 && M != 9 && M != 64) continue;  // the large shapes at the ends of the range
      const auto x = round_to(random_vector(M * K, 77 + static_cast<uint32_t>(M)), DType::BF16);  // [M, K]
      auto d_x = to_device(encode(x, DType::BF16));
      const auto y0 = random_vector(M * N, 4);
      const int64_t pf = cuda::fp8_w8a16_partial_floats(M, N, K);
      cuda::DeviceBuffer part(std::max<int64_t>(pf, 1) * 4);
      for (int variant = 0; variant < 4; ++variant) {
        const DType out_dt = variant >= 2 ? DType::F32 : DType::BF16;
        const bool with_bias = variant == 1 || variant == 3, acc = variant >= 2;
        const void* b = with_bias ? (out_dt == DType::F32 ? d_b32.get() : d_b16.get()) : nullptr;
        auto run = [&](bool naive) {
          auto d_y = acc ? to_device(y0) : nan_buffer(M * N * dtype_size(out_dt));
          if (naive)
            cuda::fp8_w8a16_naive(d_x.get(), d_wq.as<uint8_t>(), d_ws.as<float>(), b, d_y.get(), out_dt, acc, M, N, K,
                                  nullptr);
          else
            cuda::fp8_w8a16_gemm(d_x.get(), d_wq.as<uint8_t>(), d_ws.as<float>(), b, d_y.get(), out_dt, acc, M, N, K,
                                 pf > 0 ? part.as<float>() : nullptr, nullptr);
          return download(d_y, M * N, out_dt);
        };
        const auto fast = run(false), naive = run(true);
        SCOPED_TRACE(::testing::Message() << "M " << M << " N " << N << " K " << K << " variant " << variant
                                          << " partial floats " << pf);
        if (sh.host) {
          std::vector<float> want(M * N);
          for (int64_t m = 0; m < M; ++m)
            for (int64_t n = 0; n < N; ++n) {
              double v = 0;
              for (int64_t k = 0; k < K; ++k) v += static_cast<double>(x[m * K + k]) * deq[n * K + k];
              if (with_bias) v += bias[n];
              if (acc) v += y0[m * N + n];
              want[m * N + n] = static_cast<float>(v);
            }
          EXPECT_LE(rel_error(naive, want), out_dt == DType::F32 ? 1e-5 : 8e-3);
          EXPECT_LE(rel_error(fast, want), out_dt == DType::F32 ? 1e-4 : 8e-3);
        }
        // Both sum exact products (bf16 x E4M3 fits f32) in f32, in different orders; the tensor
        // cores' f32 accumulation may keep fewer bits; a wrong index or scale gives ~1.
        EXPECT_LE(rel_error(fast, naive), out_dt == DType::F32 ? 1e-4 : 8e-3);
        EXPECT_LE(normalized_error(fast, naive), out_dt == DType::F32 ? 1e-4 : 1e-2);
      }
    }
  }
}

TEST_F(CudaFp8W8a16, SiluMulMatchesNaiveThenSiluMul) {
  struct Shape { int64_t I, K; };
  for (const Shape sh : {Shape{333, 1024}, Shape{40, 64}, Shape{21, 208}, Shape{18944, 3584}}) {
    const int64_t I = sh.I, K = sh.K;
    std::vector<float> wf = random_vector(2 * I * K, 8);
    std::vector<uint8_t> wq(2 * I * K);
    std::vector<float> ws(2 * I);
    quantize_fp8_rows(wf.data(), 2 * I, K, wq.data(), ws.data());
    auto d_wq = to_device(wq);
    auto d_ws = to_device(ws);
    auto d_b = to_device(encode(random_vector(2 * I, 9), DType::BF16));
    for (const int64_t M : {1, 2, 7, 16, 45, 64}) {
      if (I > 1000 && M != 2 && M != 64) continue;
      auto d_x = to_device(encode(random_vector(M * K, 7 + static_cast<uint32_t>(M)), DType::BF16));
      const int64_t pf = cuda::fp8_w8a16_partial_floats(M, 2 * I, K, true);
      cuda::DeviceBuffer part(std::max<int64_t>(pf, 1) * 4);
      for (const bool with_bias : {false, true}) {
        const void* b = with_bias ? d_b.get() : nullptr;
        auto d_fast = nan_buffer(M * I * 2), d_gu = nan_buffer(M * 2 * I * 2), d_naive = nan_buffer(M * I * 2);
        cuda::fp8_w8a16_gemm_silu_mul(d_x.get(), d_wq.as<uint8_t>(), d_ws.as<float>(), b, d_fast.get(), M, I, K,
                                      pf > 0 ? part.as<float>() : nullptr, nullptr);
        cuda::fp8_w8a16_naive(d_x.get(), d_wq.as<uint8_t>(), d_ws.as<float>(), b, d_gu.get(), DType::BF16, false, M,
                              2 * I, K, nullptr);
        cuda::silu_mul(d_gu.get(), M, I, d_naive.get(), DType::BF16, nullptr);
        const auto fast = download(d_fast, M * I, DType::BF16), naive = download(d_naive, M * I, DType::BF16);
        SCOPED_TRACE(::testing::Message() << "M " << M << " I " << I << " K " << K << " bias " << with_bias
                                          << " partial floats " << pf);
        // g and u may round to neighbouring bf16 values (the sums' order differs): ~2^-8 apart.
        EXPECT_LE(rel_error(fast, naive), 2e-2);
        EXPECT_LE(normalized_error(fast, naive), 3e-2);
      }
    }
  }
}

// Every non-NaN E4M3 byte through the in-register conversion, bit-exactly: w[n][k] = byte
// (k + 3n) % 256 (NaN bytes 0x7f, 0xff as 0), scale 1, token m one-hot at k = 4m + m % 4, so
// y[m][n] = fp8(w[n][4m + m % 4]) exactly (one product by 1, the rest zeros) in f32.
TEST_F(CudaFp8W8a16, ConvertsEveryE4m3ByteExactly) {
  const int64_t M = 64, N = 96, K = 256;
  std::vector<uint8_t> wq(N * K);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) {
      const auto v = static_cast<uint8_t>((k + 3 * n) % 256);
      wq[n * K + k] = (v & 0x7f) == 0x7f ? 0 : v;
    }
  std::vector<float> x(M * K, 0.f);
  for (int64_t m = 0; m < M; ++m) x[m * K + 4 * m + m % 4] = 1.f;
  auto d_wq = to_device(wq);
  auto d_ws = to_device(std::vector<float>(N, 1.f));
  auto d_x = to_device(encode(x, DType::BF16));
  for (const int64_t rows : {M, int64_t{7}}) {  // 8 groups of 8 tokens; 1 group
    const int64_t pf = cuda::fp8_w8a16_partial_floats(rows, N, K);
    cuda::DeviceBuffer part(std::max<int64_t>(pf, 1) * 4);
    auto d_y = nan_buffer(rows * N * 4);
    cuda::fp8_w8a16_gemm(d_x.get(), d_wq.as<uint8_t>(), d_ws.as<float>(), nullptr, d_y.get(), DType::F32, false, rows,
                         N, K, pf > 0 ? part.as<float>() : nullptr, nullptr);
    const auto y = download(d_y, rows * N, DType::F32);
    for (int64_t m = 0; m < rows; ++m)
      for (int64_t n = 0; n < N; ++n) {
        const float want = fp8_e4m3_to_f32(wq[n * K + 4 * m + m % 4]);
        ASSERT_EQ(y[m * N + n], want) << "m " << m << " n " << n << " byte " << int(wq[n * K + 4 * m + m % 4]);
      }
  }
}

// The split is the kernel's own decision: a partial buffer is asked for exactly where the product
// is split, and the sums are the same bits on every run (split order fixed).
TEST_F(CudaFp8W8a16, SplitProductsAreDeterministic) {
  const int64_t M = 16, N = 256, K = 8192;  // 8 row tiles, 128 chunks: split
  const int64_t pf = cuda::fp8_w8a16_partial_floats(M, N, K);
  ASSERT_GT(pf, 0);
  EXPECT_EQ(pf % (M * N), 0);
  EXPECT_EQ(cuda::fp8_w8a16_partial_floats(64, 4096, 64), 0);  // one chunk: never split
  EXPECT_EQ(cuda::fp8_w8a16_partial_floats(64, 4096, 64, true), 0);
  const int64_t pf_silu = cuda::fp8_w8a16_partial_floats(M, 2 * 128, K, true);  // 8 gate/up tiles: split
  EXPECT_GT(pf_silu, 0);
  EXPECT_EQ(pf_silu % (M * 2 * 128), 0);
  EXPECT_FALSE(cuda::fp8_w8a16_supported(65, 64));
  EXPECT_FALSE(cuda::fp8_w8a16_supported(2, 40));
  EXPECT_TRUE(cuda::fp8_w8a16_supported(64, 3584));
  std::vector<float> wf = random_vector(N * K, 5);
  std::vector<uint8_t> wq(N * K);
  std::vector<float> ws(N);
  quantize_fp8_rows(wf.data(), N, K, wq.data(), ws.data());
  auto d_wq = to_device(wq);
  auto d_ws = to_device(ws);
  auto d_x = to_device(encode(random_vector(M * K, 6), DType::BF16));
  cuda::DeviceBuffer part(pf * 4);
  std::vector<float> first;
  for (int run = 0; run < 3; ++run) {
    auto d_y = nan_buffer(M * N * 2);
    cuda::fp8_w8a16_gemm(d_x.get(), d_wq.as<uint8_t>(), d_ws.as<float>(), nullptr, d_y.get(), DType::BF16, false, M, N,
                         K, part.as<float>(), nullptr);
    const auto y = download(d_y, M * N, DType::BF16);
    if (run == 0) first = y;
    else ASSERT_EQ(y, first) << "run " << run;
  }
}

}  // namespace
}  // namespace vlm::testing
