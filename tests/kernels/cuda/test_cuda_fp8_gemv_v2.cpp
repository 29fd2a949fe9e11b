// The second form of the FP8 decode GEMVs (kernels/cuda/gemm/fp8_gemv_v2.h) against fp8_gemv's
// Simple form (the same vectors summed in the same order: equal bit for bit) and the naive
// reference (one thread per output, k in order: within the fp8_gemv tests' tolerances), and the
// RMSNorm-fused forms against their unfused reference, rms_norm into a dt buffer then fp8_gemv
// (bit for bit at K <= 4096; above, rms_norm's scalar kernel sums the squares in another order).
// Shapes: M = 1..4; Qwen2-7B's products (q/k/v 4608 x 3584, o 3584 x 3584, down 3584 x 18944,
// gate/up 2 x 18944 x 3584), odd N and I, K a multiple of 16 but not of 512 (a partial last round of
// loads), K = 16, and N large enough that the norm forms' blocks loop over several column groups;
// with and without bias, bf16 / f16 out and f32 += (the residual add), rows gathered or not.
// Weights: random E4M3 bytes (no NaN) with per-row scales. Outputs are poisoned (NaN) first.
// Skips where no GPU is visible.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "kernels/cuda/gemm/fp8_gemv.h"
#include "kernels/cuda/gemm/fp8_gemv_v2.h"
#include "kernels/cuda/gemm/gemv.h"
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

// w [N, K] E4M3 (random bytes, NaN codes 0x7f / 0xff avoided) and scales [N] 2^-12 .. 2^-6 on the device.
struct Fp8Weights {
  Fp8Weights(int64_t N, int64_t K, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<uint8_t> q(static_cast<size_t>(N * K));
    for (uint8_t& v : q) {
      v = static_cast<uint8_t>(rng());
      if ((v & 0x7f) == 0x7f) v ^= 1;
    }
    std::vector<float> s(static_cast<size_t>(N));
    for (int64_t n = 0; n < N; ++n)
      s[n] = std::ldexp(1.0f + 0.125f * static_cast<float>(n % 8), -12 + static_cast<int>(n % 7));
    wq = to_device(q);
    scale = to_device(s);
  }
  const uint8_t* q() const { return wq.as<uint8_t>(); }
  const float* s() const { return scale.as<float>(); }
  cuda::DeviceBuffer wq, scale;
};

// Residual rows x [X, K] f32 with a per-row scale, the norm weight [K] f32 around 1, and the gather
// `rows` (the last M rows of x in reverse, or none): as test_cuda_gemv_norm.cpp's.
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

class CudaFp8GemvV2 : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override { VLM_REQUIRE_GPU(); }
};

// The fp8_gemv tests' tolerance of the fast kernel against the naive one.
double tolerance(DType out_dt, DType dt) { return out_dt == DType::F32 ? 1e-5 : (dt == DType::BF16 ? 8e-3 : 1e-3); }

TEST_P(CudaFp8GemvV2, EqualsSimpleFormAndNaive) {
  const DType dt = GetParam();
  struct Shape { int64_t N, K; };
  for (const Shape sh : {Shape{37, 528}, Shape{9, 16}, Shape{4001, 1040}, Shape{4608, 3584}, Shape{3584, 3584},
                         Shape{3584, 18944}, Shape{131, 18960}}) {
    const int64_t N = sh.N, K = sh.K;
    const Fp8Weights w(N, K, 11 + static_cast<uint32_t>(N));
    for (int64_t M = 1; M <= cuda::kGemvMaxRows; ++M) {
      for (int variant = 0; variant < 3; ++variant) {  // 0: dt out; 1: dt out + bias; 2: f32 += with f32 bias
        const DType out_dt = variant == 2 ? DType::F32 : dt;
        const auto x = round_to(random_vector(M * K, 100 + static_cast<uint32_t>(M)), dt);
        const auto bias = round_to(random_vector(N, 300), out_dt);
        const auto y0 = random_vector(M * N, 400);
        auto d_x = to_device(encode(x, dt)), d_b = to_device(encode(bias, out_dt));
        const bool acc = variant == 2;
        const void* b = variant > 0 ? d_b.get() : nullptr;
        auto output = [&] { return acc ? to_device(y0) : nan_buffer(M * N * dtype_size(out_dt)); };
        auto d_v2 = output(), d_simple = output(), d_naive = output();
        cuda::fp8_gemv_v2(d_x.get(), w.q(), w.s(), dt, b, d_v2.get(), out_dt, acc, M, N, K, nullptr);
        cuda::fp8_gemv(d_x.get(), w.q(), w.s(), dt, b, d_simple.get(), out_dt, acc, M, N, K, nullptr,
                       cuda::Fp8GemvForm::Simple);
        cuda::fp8_gemv_naive(d_x.get(), w.q(), w.s(), dt, b, d_naive.get(), out_dt, acc, M, N, K, nullptr);
        const auto got = raw(d_v2, M * N, out_dt);
        SCOPED_TRACE(::testing::Message() << "N " << N << " K " << K << " M " << M << " variant " << variant);
        EXPECT_EQ(mismatches(got, raw(d_simple, M * N, out_dt), out_dt), 0) << "the same sums as the Simple form";
        EXPECT_LE(rel_error(decode(got, out_dt), decode(raw(d_naive, M * N, out_dt), out_dt)), tolerance(out_dt, dt));
      }
    }
  }
}

TEST_P(CudaFp8GemvV2, SiluMulEqualsSimpleFormAndNaive) {
  const DType dt = GetParam();
  struct Shape { int64_t I, K; };
  for (const Shape sh : {Shape{333, 1040}, Shape{4000, 528}, Shape{18944, 3584}}) {
    const int64_t I = sh.I, K = sh.K;
    const Fp8Weights w(2 * I, K, 8 + static_cast<uint32_t>(I));
    for (int64_t M = 1; M <= cuda::kGemvMaxRows; ++M) {
      for (bool with_bias : {false, true}) {
        // Inputs at 1/8 so that silu(g) * u stays inside F16's range.
        const auto x = round_to(random_vector(M * K, 7 + static_cast<uint32_t>(M), 0.125f), dt);
        const auto bias = round_to(random_vector(2 * I, 9, 0.125f), dt);
        auto d_x = to_device(encode(x, dt)), d_b = to_device(encode(bias, dt));
        const void* b = with_bias ? d_b.get() : nullptr;
        auto d_v2 = nan_buffer(M * I * dtype_size(dt)), d_simple = nan_buffer(M * I * dtype_size(dt));
        auto d_naive = nan_buffer(M * I * dtype_size(dt));
        cuda::fp8_gemv_silu_mul_v2(d_x.get(), w.q(), w.s(), dt, b, d_v2.get(), M, I, K, nullptr);
        cuda::fp8_gemv_silu_mul(d_x.get(), w.q(), w.s(), dt, b, d_simple.get(), M, I, K, nullptr,
                                cuda::Fp8GemvForm::Simple);
        cuda::fp8_gemv_silu_mul_naive(d_x.get(), w.q(), w.s(), dt, b, d_naive.get(), M, I, K, nullptr);
        const auto got = raw(d_v2, M * I, dt);
        SCOPED_TRACE(::testing::Message() << "I " << I << " K " << K << " M " << M << " bias " << with_bias);
        EXPECT_EQ(mismatches(got, raw(d_simple, M * I, dt), dt), 0) << "the same sums as the Simple form";
        EXPECT_LE(rel_error(decode(got, dt), decode(raw(d_naive, M * I, dt), dt)), dt == DType::BF16 ? 2e-2 : 4e-3);
      }
    }
  }
}

TEST_P(CudaFp8GemvV2, NormEqualsRmsNormThenFp8Gemv) {
  const DType dt = GetParam();
  struct Shape { int64_t N, K; };
  // {40000, 64}: 5,000 column groups, more than one wave (blocks loop); 5120: rms_norm's scalar kernel.
  for (const Shape sh : {Shape{37, 528}, Shape{4608, 3584}, Shape{9, 16}, Shape{40000, 64}, Shape{77, 5120}}) {
    const int64_t N = sh.N, K = sh.K;
    const Fp8Weights w(N, K, 21 + static_cast<uint32_t>(N));
    for (int64_t M = 1; M <= cuda::kGemvMaxRows; ++M) {
      for (int variant = 0; variant < 3; ++variant) {  // 0: dt out; 1: dt out + bias; 2: f32 += with f32 bias
        for (bool gather : {false, true}) {
          ASSERT_TRUE(cuda::fp8_gemv_norm_supported(M, K, dt)) << "M " << M << " K " << K;
          const DType out_dt = variant == 2 ? DType::F32 : dt;
          NormInputs in(M, K, gather, static_cast<uint32_t>(10 * M + variant));
          const auto bias = round_to(random_vector(N, 300), out_dt);
          const auto y0 = random_vector(M * N, 400);
          auto d_b = to_device(encode(bias, out_dt));
          const bool acc = variant == 2;
          const void* b = variant > 0 ? d_b.get() : nullptr;
          auto output = [&] { return acc ? to_device(y0) : nan_buffer(M * N * dtype_size(out_dt)); };
          auto h = in.normalized(M, K, dt);
          auto d_want = output(), d_naive = output(), d_got = output();
          cuda::fp8_gemv(h.get(), w.q(), w.s(), dt, b, d_want.get(), out_dt, acc, M, N, K, nullptr,
                         cuda::Fp8GemvForm::Simple);
          cuda::fp8_gemv_naive(h.get(), w.q(), w.s(), dt, b, d_naive.get(), out_dt, acc, M, N, K, nullptr);
          cuda::fp8_gemv_norm(in.d_x.as<float>(), in.rows_ptr(), in.d_nw.as<float>(), kEps, w.q(), w.s(), dt, b,
                              d_got.get(), out_dt, acc, M, N, K, nullptr);
          const auto got = raw(d_got, M * N, out_dt), want = raw(d_want, M * N, out_dt);
          SCOPED_TRACE(::testing::Message() << "N " << N << " K " << K << " M " << M << " variant " << variant
                                            << " gather " << gather);
          // Not bit for bit: the reference's rms_norm kernel and the GEMV's staging reduce the row's
          // mean square in different orders, so a few rounded normalized inputs differ by one unit
          // (session 20 call M: 4-6,264 of N outputs differed at M = 1, all within the tolerance).
          const double tol = out_dt == DType::F32 ? 1e-3 : tolerance(out_dt, dt);
          EXPECT_LE(rel_error(decode(got, out_dt), decode(want, out_dt)), tol);
          EXPECT_LE(rel_error(decode(got, out_dt), decode(raw(d_naive, M * N, out_dt), out_dt)), tol);
        }
      }
    }
  }
}

TEST_P(CudaFp8GemvV2, SiluMulNormEqualsRmsNormThenFp8GemvSiluMul) {
  const DType dt = GetParam();
  struct Shape { int64_t I, K; };
  for (const Shape sh : {Shape{333, 1040}, Shape{18944, 3584}, Shape{45, 5120}}) {
    const int64_t I = sh.I, K = sh.K;
    const Fp8Weights w(2 * I, K, 31 + static_cast<uint32_t>(I));
    for (int64_t M = 1; M <= cuda::kGemvMaxRows; ++M) {
      for (bool with_bias : {false, true}) {
        for (bool gather : {false, true}) {
          NormInputs in(M, K, gather, static_cast<uint32_t>(7 * M + with_bias));
          const auto bias = round_to(random_vector(2 * I, 9, 0.125f), dt);
          auto d_b = to_device(encode(bias, dt));
          const void* b = with_bias ? d_b.get() : nullptr;
          auto h = in.normalized(M, K, dt);
          auto d_want = nan_buffer(M * I * dtype_size(dt)), d_got = nan_buffer(M * I * dtype_size(dt));
          cuda::fp8_gemv_silu_mul(h.get(), w.q(), w.s(), dt, b, d_want.get(), M, I, K, nullptr,
                                  cuda::Fp8GemvForm::Simple);
          cuda::fp8_gemv_silu_mul_norm(in.d_x.as<float>(), in.rows_ptr(), in.d_nw.as<float>(), kEps, w.q(), w.s(), dt,
                                       b, d_got.get(), M, I, K, nullptr);
          const auto got = raw(d_got, M * I, dt), want = raw(d_want, M * I, dt);
          SCOPED_TRACE(::testing::Message() << "I " << I << " K " << K << " M " << M << " bias " << with_bias
                                            << " gather " << gather);
          if (K <= 4096) EXPECT_EQ(mismatches(got, want, dt), 0);
          else EXPECT_LE(rel_error(decode(got, dt), decode(want, dt)), dt == DType::BF16 ? 1.6e-2 : 2e-3);
        }
      }
    }
  }
}

// Captured in a CUDA graph and replayed after x changed: the replay normalizes the new x.
TEST_P(CudaFp8GemvV2, NormReplaysInACudaGraph) {
  const DType dt = GetParam();
  const int64_t M = 2, N = 611, K = 3584;
  NormInputs in(M, K, false, 5);
  const Fp8Weights w(N, K, 6);
  auto d_got = nan_buffer(M * N * dtype_size(dt)), d_want = nan_buffer(M * N * dtype_size(dt));
  cudaStream_t s = nullptr;
  VLM_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  // One eager run first, as the decoder's graphs follow an eager step (the occupancy query).
  cuda::fp8_gemv_norm(in.d_x.as<float>(), nullptr, in.d_nw.as<float>(), kEps, w.q(), w.s(), dt, nullptr, d_got.get(),
                      dt, false, M, N, K, s);
  VLM_CUDA_CHECK(cudaStreamSynchronize(s));
  VLM_CUDA_CHECK(cudaMemset(d_got.get(), 0xff, M * N * dtype_size(dt)));
  VLM_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  cuda::fp8_gemv_norm(in.d_x.as<float>(), nullptr, in.d_nw.as<float>(), kEps, w.q(), w.s(), dt, nullptr, d_got.get(),
                      dt, false, M, N, K, s);
  VLM_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
  VLM_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  const auto x2 = random_vector(M * K, 77, 3.0f);
  VLM_CUDA_CHECK(cudaMemcpy(in.d_x.get(), x2.data(), x2.size() * 4, cudaMemcpyHostToDevice));
  VLM_CUDA_CHECK(cudaGraphLaunch(exec, s));
  VLM_CUDA_CHECK(cudaStreamSynchronize(s));
  auto h = in.normalized(M, K, dt);
  cuda::fp8_gemv(h.get(), w.q(), w.s(), dt, nullptr, d_want.get(), dt, false, M, N, K, nullptr,
                 cuda::Fp8GemvForm::Simple);
  EXPECT_EQ(mismatches(raw(d_got, M * N, dt), raw(d_want, M * N, dt), dt), 0);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
}

TEST_P(CudaFp8GemvV2, NormRefusesWhatItDoesNotCover) {
  const DType dt = GetParam();
  EXPECT_TRUE(cuda::fp8_gemv_norm_supported(4, 3584, dt));   // Qwen2-7B: 28 KiB staged
  EXPECT_TRUE(cuda::fp8_gemv_norm_supported(2, 8192, dt));   // 32 KiB
  EXPECT_FALSE(cuda::fp8_gemv_norm_supported(4, 8192, dt));  // 64 KiB: rms_norm then the GEMV
  EXPECT_FALSE(cuda::fp8_gemv_norm_supported(5, 64, dt));
  EXPECT_FALSE(cuda::fp8_gemv_norm_supported(1, 24, dt));  // K % 16
  EXPECT_FALSE(cuda::fp8_gemv_norm_supported(1, 64, DType::F32));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaFp8GemvV2, ::testing::Values(DType::BF16, DType::F16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace vlm::testing
