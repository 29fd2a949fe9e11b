// The FP8 tensor-core product of decode steps of up to 64 rows (fp8_tile_gemm.h, Hopper wgmma)
// against the naive FP8 GEMM (fp8_quantize.h's fp8_gemm_naive, itself against a double-precision
// host product on the small shapes), and its SiLU·mul form against the naive GEMM followed by
// ops_cuda's silu_mul. The shapes cover both of its forms (K split across blocks with partial
// sums; one pass with the epilogue in the kernel), rows not a multiple of 16, tokens not a
// multiple of 8, a single 64-column step, and Qwen2-7B's decoder shapes (q/k/v, down, gate/up) at
// 5 and 64 tokens, o_proj, gate/up). The tile kernel also over K % 128 == 64 (its zero-filled tail)
// and with its split count forced (1, 2, 5: both epilogues on the 7B shapes). Outputs are poisoned
// (NaN) first. Skips where no GPU is visible.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/core/fp8.h"
#include "kernels/cuda/gemm/fp8_quantize.h"
#include "kernels/cuda/gemm/fp8_tile_gemm.h"
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

// Rows of [N, K] with magnitudes 2^-8 .. 2^4 (so the scales differ), quantized on the host; deq
// (the values the E4M3 bits and scales stand for) only when asked.
struct HostFp8 {
  std::vector<uint8_t> q;
  std::vector<float> scale, deq;  // [N], [N, K]
};
HostFp8 host_fp8(int64_t N, int64_t K, uint32_t seed, bool with_deq) {
  std::vector<float> w = random_vector(N * K, seed);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) w[n * K + k] *= std::ldexp(1.0f, static_cast<int>(n % 13) - 8);
  HostFp8 h{std::vector<uint8_t>(N * K), std::vector<float>(N), {}};
  quantize_fp8_rows(w.data(), N, K, h.q.data(), h.scale.data());
  if (with_deq) {
    h.deq.resize(N * K);
    dequantize_fp8_rows(h.q.data(), h.scale.data(), N, K, h.deq.data());
  }
  return h;
}

// One product under test: its size query and its two entry points (same signatures).
struct Kernel {
  const char* name;
  bool (*supported)(int64_t M, int64_t K);
  int64_t (*partial_floats)(int64_t M, int64_t cols, int64_t K, bool silu_mul);
  void (*gemm)(const uint8_t*, const float*, const uint8_t*, const float*, const void*, void*, DType, bool, int64_t,
               int64_t, int64_t, float*, cudaStream_t);
  void (*silu_mul)(const uint8_t*, const float*, const uint8_t*, const float*, const void*, void*, int64_t, int64_t,
                   int64_t, float*, cudaStream_t);
};
const Kernel kTile{"tile", cuda::fp8_tile_supported, cuda::fp8_tile_partial_floats, cuda::fp8_tile_gemm,
                   cuda::fp8_tile_gemm_silu_mul};

class CudaFp8Tile : public ::testing::TestWithParam<Kernel> {
 protected:
  void SetUp() override { VLM_REQUIRE_GPU(); }
  void TearDown() override { cuda::fp8_tile_set_split_override(0); }
};

// The product of M x [N, K] in every epilogue variant against fp8_gemm_naive (and, where `host`,
// the naive one against a double-precision host product).
// Variants: 0 bf16 out; 1 bf16 out + bias (Qwen2's q/k/v); 2 f32 += (o_proj, down_proj: the
// residual add); 3 f32 += with a bias.
void check_gemm(const Kernel& kern, int64_t M, int64_t N, int64_t K, bool host) {
  const HostFp8 w = host_fp8(N, K, 31 + static_cast<uint32_t>(N), host);
  auto d_wq = to_device(w.q);
  auto d_ws = to_device(w.scale);
  const auto bias = round_to(random_vector(N, 3), DType::BF16);
  auto d_b = to_device(encode(bias, DType::BF16));
  const HostFp8 x = host_fp8(M, K, 77 + static_cast<uint32_t>(M), host);
  auto d_xq = to_device(x.q);
  auto d_xs = to_device(x.scale);
  const auto y0 = random_vector(M * N, 4);
  const int64_t pf = kern.partial_floats(M, N, K, false);
  cuda::DeviceBuffer part(std::max<int64_t>(pf, 1) * 4);
  for (int variant = 0; variant < 4; ++variant) {
    const DType out_dt = variant >= 2 ? DType::F32 : DType::BF16;
    const bool with_bias = variant == 1 || variant == 3, acc = variant >= 2;
    const void* b = with_bias ? d_b.get() : nullptr;
    auto run = [&](bool naive) {
      auto d_y = acc ? to_device(y0) : nan_buffer(M * N * dtype_size(out_dt));
      if (naive)
        cuda::fp8_gemm_naive(d_xq.as<uint8_t>(), d_xs.as<float>(), d_wq.as<uint8_t>(), d_ws.as<float>(), b,
                             d_y.get(), out_dt, acc, M, N, K, nullptr);
      else
        kern.gemm(d_xq.as<uint8_t>(), d_xs.as<float>(), d_wq.as<uint8_t>(), d_ws.as<float>(), b, d_y.get(), out_dt,
                  acc, M, N, K, pf > 0 ? part.as<float>() : nullptr, nullptr);
      return download(d_y, M * N, out_dt);
    };
    const auto fast = run(false), naive = run(true);
    SCOPED_TRACE(::testing::Message() << kern.name << " M " << M << " N " << N << " K " << K << " variant "
                                      << variant << " partial floats " << pf);
    if (host) {
      std::vector<float> want(M * N);
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
          double v = 0;
          for (int64_t k = 0; k < K; ++k) v += static_cast<double>(x.deq[m * K + k]) * w.deq[n * K + k];
          if (with_bias) v += bias[n];
          if (acc) v += y0[m * N + n];
          want[m * N + n] = static_cast<float>(v);
        }
      EXPECT_LE(rel_error(naive, want), out_dt == DType::F32 ? 1e-5 : 8e-3);
    }
    // Hopper's FP8 tensor cores keep fewer bits while accumulating than the naive f32 sums (as
    // cuBLASLt's FP8 GEMM: 5.2e-5 .. 1.27e-4 on the H200); a wrong index or scale gives ~1.
    EXPECT_LE(rel_error(fast, naive), out_dt == DType::F32 ? 5e-4 : 8e-3);
  }
}

// SiLU·mul over gate/up [2I, K] against the naive GEMM then ops_cuda's silu_mul.
void check_silu_mul(const Kernel& kern, int64_t M, int64_t I, int64_t K) {
  const HostFp8 w = host_fp8(2 * I, K, 8, false);
  auto d_wq = to_device(w.q);
  auto d_ws = to_device(w.scale);
  const auto bias = round_to(random_vector(2 * I, 9), DType::BF16);
  auto d_b = to_device(encode(bias, DType::BF16));
  const HostFp8 x = host_fp8(M, K, 7 + static_cast<uint32_t>(M), false);
  auto d_xq = to_device(x.q);
  auto d_xs = to_device(x.scale);
  const int64_t pf = kern.partial_floats(M, 2 * I, K, true);
  cuda::DeviceBuffer part(std::max<int64_t>(pf, 1) * 4);
  for (bool with_bias : {false, true}) {
    const void* b = with_bias ? d_b.get() : nullptr;
    auto d_fast = nan_buffer(M * I * 2), d_gu = nan_buffer(M * 2 * I * 2), d_naive = nan_buffer(M * I * 2);
    kern.silu_mul(d_xq.as<uint8_t>(), d_xs.as<float>(), d_wq.as<uint8_t>(), d_ws.as<float>(), b, d_fast.get(), M, I, K,
                  pf > 0 ? part.as<float>() : nullptr, nullptr);
    cuda::fp8_gemm_naive(d_xq.as<uint8_t>(), d_xs.as<float>(), d_wq.as<uint8_t>(), d_ws.as<float>(), b, d_gu.get(),
                         DType::BF16, false, M, 2 * I, K, nullptr);
    cuda::silu_mul(d_gu.get(), M, I, d_naive.get(), DType::BF16, nullptr);
    const auto fast = download(d_fast, M * I, DType::BF16), naive = download(d_naive, M * I, DType::BF16);
    SCOPED_TRACE(::testing::Message() << kern.name << " M " << M << " I " << I << " K " << K << " bias " << with_bias
                                      << " partial floats " << pf);
    // g and u may round to neighbouring bf16 values (the sums' order differs): ~2^-8 apart.
    EXPECT_LE(rel_error(fast, naive), 2e-2);
  }
}

TEST_P(CudaFp8Tile, MatchesNaiveGemm) {
  struct Shape { int64_t N, K; bool host; };
  for (const Shape sh : {Shape{37, 64, true}, Shape{300, 3584, true}, Shape{1000, 256, true}, Shape{129, 320, true},
                         Shape{4608, 3584, false}, Shape{3584, 3584, false}, Shape{3584, 18944, false}}) {
    for (const int64_t M : {1, 5, 8, 13, 16, 33, 64}) {
      if (!sh.host && M != 5 && M != 64) continue;  // the large shapes at the two ends of the decode range
      check_gemm(GetParam(), M, sh.N, sh.K, sh.host);
    }
  }
}

TEST_P(CudaFp8Tile, SiluMulMatchesNaiveGemmThenSiluMul) {
  struct Shape { int64_t I, K; };
  for (const Shape sh : {Shape{333, 1024}, Shape{40, 64}, Shape{70, 320}, Shape{18944, 3584}}) {
    for (const int64_t M : {1, 5, 7, 16, 33, 45, 64}) {
      if (sh.I > 1000 && M != 5 && M != 64) continue;
      check_silu_mul(GetParam(), M, sh.I, sh.K);
    }
  }
}

// The tile kernel with its K split forced: unsplit (the epilogue in the kernel) and split 2 and 5
// ways (partial sums and the reduce) on the 7B shapes, whatever its model would pick.
TEST_P(CudaFp8Tile, TileForcedSplitsMatchNaive) {
  for (const int S : {1, 2, 5}) {
    cuda::fp8_tile_set_split_override(S);
    SCOPED_TRACE(::testing::Message() << "forced splits " << S);
    for (const int64_t M : {5, 64}) {
      check_gemm(GetParam(), M, 4608, 3584, false);
      check_silu_mul(GetParam(), M, 18944, 3584);
    }
    EXPECT_EQ(cuda::fp8_tile_splits(64, 4608, 3584, false), S);
  }
  cuda::fp8_tile_set_split_override(0);
}

// The split is the kernel's own decision: a partial buffer is asked for exactly where the product
// is split, and a product of one 64-column step never is.
TEST_P(CudaFp8Tile, PartialBufferOnlyForSplitProducts) {
  const Kernel& k = GetParam();
  EXPECT_EQ(k.partial_floats(64, 4096, 64, false), 0);
  const int64_t pf = k.partial_floats(8, 256, 8192, false);  // few row blocks, many steps: split
  EXPECT_GT(pf, 0);
  EXPECT_EQ(pf % (8 * 256), 0);
  EXPECT_FALSE(k.supported(65, 64));
  EXPECT_FALSE(k.supported(1, 48));
  EXPECT_TRUE(k.supported(64, 3584));
}

INSTANTIATE_TEST_SUITE_P(Kernels, CudaFp8Tile, ::testing::Values(kTile),
                         [](const ::testing::TestParamInfo<Kernel>& i) { return std::string(i.param.name); });

}  // namespace
}  // namespace vlm::testing
