// CublasLtGemm's autotuning (kernels/cuda/gemm/cublaslt_autotune.h) on decode-sized products:
// for M = 1 .. 64 the autotuned GEMM (bf16 and FP8 with per-row scales, bias, residual add) gives
// the naive kernel's / the host's values within the tolerances of the untuned GEMM's tests
// (test_cuda_ops.cpp, test_cuda_fp8.cpp), every shape was tuned (not deferred), and a call on a
// capturing stream never times: it is deferred, the captured graph still computes the product,
// and the next call outside the capture tunes; a shape of the same M bucket reuses the tuning
// correctly. Outputs poisoned (NaN) first. Shapes are this file's own (the tuned algorithms are
// cached per process). Skips without a GPU; FP8 also off Hopper (cuBLASLt's per-row FP8 scaling is
// SM90-only).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "kernels/core/fp8.h"
#include "kernels/cuda/gemm/cublaslt_gemm.h"
#include "kernels/cuda/gemm/fp8_quantize.h"
#include "kernels/gemm/gemm.h"
#include "tests/kernels/cuda/cuda_test_util.h"
#include "tests/support/gpu_test.h"

namespace vlm::testing {
namespace {

constexpr int64_t kRows[] = {1, 2, 8, 16, 32, 64};

cuda::DeviceBuffer nan_buffer(size_t bytes) {
  cuda::DeviceBuffer b(bytes);
  VLM_CUDA_CHECK(cudaMemset(b.get(), 0xff, bytes));
  return b;
}

std::vector<float> download(const cuda::DeviceBuffer& b, int64_t n, DType dt) {
  return decode(to_host<uint8_t>(b, static_cast<size_t>(n) * dtype_size(dt)), dt);
}

bool hopper() {
  cudaDeviceProp p{};
  VLM_CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
  return p.major == 9;
}

// y [M, N] = x W^T (+ bias) (+ y0) on the host in double (x [M, K], w [N, K]).
std::vector<float> host_linear(const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>* bias,
                               const std::vector<float>* y0, int64_t M, int64_t N, int64_t K) {
  std::vector<float> y(static_cast<size_t>(M * N));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double v = 0;
      for (int64_t k = 0; k < K; ++k) v += static_cast<double>(x[m * K + k]) * w[n * K + k];
      if (bias) v += (*bias)[n];
      if (y0) v += (*y0)[m * N + n];
      y[m * N + n] = static_cast<float>(v);
    }
  return y;
}

class CudaLtAutotune : public ::testing::Test {
 protected:
  void SetUp() override { VLM_REQUIRE_GPU(); }
};

// bf16: y = x W^T + bias (bf16 out) and r += x W^T (f32 out, beta = 1), autotuned, against the host
// (test_cuda_ops' tolerances: 8e-3 bf16 out, 2e-3 f32 out) and against the heuristic-first GEMM.
TEST_F(CudaLtAutotune, Bf16MatchesHostAndHeuristicFirst) {
  const DType dt = DType::BF16;
  cuda::CublasLtGemm tuned(cuda::LtAutotune::On), first(cuda::LtAutotune::Off);
  ASSERT_TRUE(tuned.autotune());
  ASSERT_FALSE(first.autotune());
  const int64_t N = 1152, K = 1536;
  const auto w = round_to(random_vector(N * K, 41, 0.05f), dt);
  const auto bias = round_to(random_vector(N, 42), dt);
  auto d_w = to_device(encode(w, dt)), d_b = to_device(encode(bias, dt));
  for (const int64_t M : kRows) {
    SCOPED_TRACE(::testing::Message() << "M " << M);
    const auto x = round_to(random_vector(M * K, 43 + static_cast<uint32_t>(M)), dt);
    auto d_x = to_device(encode(x, dt));
    std::vector<float> out[2];
    for (int i = 0; i < 2; ++i) {
      auto d_y = nan_buffer(M * N * dtype_size(dt));
      (i == 0 ? tuned : first).linear(d_x.get(), d_w.get(), dt, d_b.get(), d_y.get(), dt, 0.0f, M, N, K, nullptr);
      out[i] = download(d_y, M * N, dt);
    }
    const auto want = host_linear(x, w, &bias, nullptr, M, N, K);
    EXPECT_LE(rel_error(out[0], want), 8e-3);
    EXPECT_LE(rel_error(out[0], out[1]), 8e-3);
    // The residual add: applied once (the tuning ran into its own scratch, not into r).
    const auto r0 = random_vector(M * N, 44);
    auto d_r = to_device(r0);
    tuned.linear(d_x.get(), d_w.get(), dt, nullptr, d_r.get(), DType::F32, 1.0f, M, N, K, nullptr);
    EXPECT_LE(rel_error(to_host<float>(d_r, M * N), host_linear(x, w, nullptr, &r0, M, N, K)), 2e-3);
  }
  const auto& st = tuned.autotune_stats();
  EXPECT_EQ(st.deferred, 0);
  EXPECT_EQ(st.tuned + st.cached + st.single, 2 * static_cast<int64_t>(std::size(kRows)));  // two keys per M
  EXPECT_GT(st.tuned + st.cached, 0);
  EXPECT_EQ(first.autotune_stats().tuned, 0);
}

// FP8 (per-row scales in the epilogue): bf16 out, bf16 out + bias, f32 += (the residual), autotuned,
// against fp8_gemm_naive (test_cuda_fp8's tolerances: 8e-3 bf16, 5e-4 f32).
TEST_F(CudaLtAutotune, Fp8MatchesNaive) {
  if (!hopper()) GTEST_SKIP() << "cuBLASLt's per-row FP8 scaling is SM90-only";
  cuda::CublasLtGemm gemm(cuda::LtAutotune::On);
  const int64_t N = 1280, K = 2304;
  auto quantized = [](int64_t R, int64_t C, uint32_t seed) {
    std::vector<float> v = random_vector(R * C, seed);
    for (int64_t r = 0; r < R; ++r)
      for (int64_t c = 0; c < C; ++c) v[r * C + c] *= std::ldexp(1.0f, static_cast<int>(r % 11) - 6);
    std::pair<std::vector<uint8_t>, std::vector<float>> q{std::vector<uint8_t>(R * C), std::vector<float>(R)};
    quantize_fp8_rows(v.data(), R, C, q.first.data(), q.second.data());
    return q;
  };
  const auto [wq, wsc] = quantized(N, K, 51);
  auto d_wq = to_device(wq), d_ws = to_device(wsc);
  const auto bias = round_to(random_vector(N, 52), DType::BF16);
  auto d_b = to_device(encode(bias, DType::BF16));
  for (const int64_t M : kRows) {
    const auto [xq, xsc] = quantized(M, K, 53 + static_cast<uint32_t>(M));
    auto d_xq = to_device(xq), d_xs = to_device(xsc);
    const auto y0 = random_vector(M * N, 54);
    for (const int variant : {0, 1, 2}) {
      SCOPED_TRACE(::testing::Message() << "M " << M << " variant " << variant);
      const DType out_dt = variant == 2 ? DType::F32 : DType::BF16;
      const bool acc = variant == 2;
      const void* b = variant == 1 ? d_b.get() : nullptr;
      const size_t bytes = M * N * dtype_size(out_dt);
      auto d_fast = acc ? to_device(y0) : nan_buffer(bytes), d_naive = acc ? to_device(y0) : nan_buffer(bytes);
      cuda::DeviceBuffer tmp(M * N * 4);  // [M, N] f32: the unfused forms where cuBLASLt takes no fused one
      ASSERT_TRUE(gemm.linear_fp8(d_xq.get(), d_xs.as<float>(), d_wq.get(), d_ws.as<float>(), b, d_fast.get(), out_dt,
                                  acc ? 1.0f : 0.0f, M, N, K, nullptr, tmp.as<float>()));
      cuda::fp8_gemm_naive(d_xq.as<uint8_t>(), d_xs.as<float>(), d_wq.as<uint8_t>(), d_ws.as<float>(), b, d_naive.get(),
                           out_dt, acc, M, N, K, nullptr);
      const auto fast = download(d_fast, M * N, out_dt), naive = download(d_naive, M * N, out_dt);
      EXPECT_LE(rel_error(fast, naive), out_dt == DType::F32 ? 5e-4 : 8e-3);
    }
  }
  EXPECT_EQ(gemm.autotune_stats().deferred, 0);
  const auto& st = gemm.autotune_stats();
  EXPECT_GE(st.tuned + st.cached + st.single, 3 * static_cast<int64_t>(std::size(kRows)));
  // No tuned shape is required: on the H200 with CUDA 13's cuBLASLt (session 17) the heuristic offered
  // one FP8 algorithm with per-row scales for every shape and no split-K form passed AlgoCheck, so every
  // shape ran "single" (the heuristic's first) — the products above still had to match the naive kernel.
  std::printf("[ autotune fp8 ] tuned %ld, cached %ld, single %ld\n", static_cast<long>(st.tuned),
              static_cast<long>(st.cached), static_cast<long>(st.single));
}

// A first call inside a stream capture: no timing (deferred), the graph computes the product with
// the heuristic's first algorithm; the next call outside the capture tunes the shape.
TEST_F(CudaLtAutotune, CaptureDefersTuning) {
  const DType dt = DType::BF16;
  const int64_t M = 24, N = 896, K = 1664;
  cuda::CublasLtGemm gemm(cuda::LtAutotune::On);
  const auto w = round_to(random_vector(N * K, 61, 0.05f), dt);
  const auto x = round_to(random_vector(M * K, 62), dt);
  auto d_w = to_device(encode(w, dt)), d_x = to_device(encode(x, dt));
  auto d_y = nan_buffer(M * N * dtype_size(dt));
  cudaStream_t s = nullptr;
  VLM_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  {  // cuBLASLt's first use (library state, kernels loaded) outside the capture, on another shape
    cuda::CublasLtGemm warm(cuda::LtAutotune::Off);
    warm.linear(d_x.get(), d_w.get(), dt, nullptr, d_y.get(), dt, 0.0f, 8, 128, K, s);
    VLM_CUDA_CHECK(cudaStreamSynchronize(s));
  }
  cudaGraph_t graph = nullptr;
  VLM_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  gemm.linear(d_x.get(), d_w.get(), dt, nullptr, d_y.get(), dt, 0.0f, M, N, K, s);
  VLM_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
  const auto& st = gemm.autotune_stats();
  if (st.single == 1) {
    cudaGraphDestroy(graph);
    cudaStreamDestroy(s);
    GTEST_SKIP() << "cuBLASLt offers one algorithm for this shape: nothing to defer";
  }
  EXPECT_EQ(st.deferred + st.cached, 1);  // cached: under --gtest_repeat, tuned by an earlier run
  EXPECT_EQ(st.tuned, 0);
  cudaGraphExec_t exec = nullptr;
  VLM_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  VLM_CUDA_CHECK(cudaGraphLaunch(exec, s));
  VLM_CUDA_CHECK(cudaStreamSynchronize(s));
  const auto want = host_linear(x, w, nullptr, nullptr, M, N, K);
  EXPECT_LE(rel_error(download(d_y, M * N, dt), want), 8e-3);
  // Outside the capture: tuned now (or taken from the process cache under --gtest_repeat).
  auto d_y2 = nan_buffer(M * N * dtype_size(dt));
  gemm.linear(d_x.get(), d_w.get(), dt, nullptr, d_y2.get(), dt, 0.0f, M, N, K, s);
  VLM_CUDA_CHECK(cudaStreamSynchronize(s));
  EXPECT_EQ(st.tuned + st.cached, 1);
  EXPECT_EQ(st.deferred + st.cached, 1);
  EXPECT_LE(rel_error(download(d_y2, M * N, dt), want), 8e-3);
  // The graph still replays (its algorithm was fixed at capture).
  VLM_CUDA_CHECK(cudaGraphLaunch(exec, s));
  VLM_CUDA_CHECK(cudaStreamSynchronize(s));
  EXPECT_LE(rel_error(download(d_y, M * N, dt), want), 8e-3);
  // Another instance, 20 rows (M's bucket 32, as 24's): the process cache's algorithm where cuBLASLt
  // accepts it for 20 rows (else tuned anew), correct either way.
  cuda::CublasLtGemm other(cuda::LtAutotune::On);
  const int64_t M2 = 20;
  auto d_y3 = nan_buffer(M2 * N * dtype_size(dt));
  other.linear(d_x.get(), d_w.get(), dt, nullptr, d_y3.get(), dt, 0.0f, M2, N, K, s);
  VLM_CUDA_CHECK(cudaStreamSynchronize(s));
  EXPECT_EQ(other.autotune_stats().tuned + other.autotune_stats().cached, 1);
  std::printf("[ autotune ] 20 rows after 24: %s\n", other.autotune_stats().cached ? "from the cache" : "tuned");
  const std::vector<float> x2(x.begin(), x.begin() + M2 * K);
  EXPECT_LE(rel_error(download(d_y3, M2 * N, dt), host_linear(x2, w, nullptr, nullptr, M2, N, K)), 8e-3);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
}

}  // namespace
}  // namespace vlm::testing
