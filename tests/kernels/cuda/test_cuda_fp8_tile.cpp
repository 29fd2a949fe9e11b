// The FP8 tensor-core product of decode steps of up to 64 rows (fp8_tile_gemm.h, Hopper wgmma)
// against the naive FP8 GEMM (fp8_quantize.h's fp8_gemm_naive, itself against a double-precision
// host product on the small shapes), and its SiLU·mul form against the naive GEMM followed by
// ops_cuda's silu_mul, in each of its forms (parameter): "base" (split sums reduced by a second
// kernel, 4 stages), "fused" (the tile's last block reduces: counters), "deep" (VLM_FP8_TILE_DEEP's
// 9-10 stages for M >= 17) and "fused_deep". The shapes cover K split across blocks and one pass,
// rows not a multiple of the 128-row tile, tokens not a multiple of 8 (M = 1..64, both sides of
// the deep pipeline's M >= 17), a single 64-column step, K % 128 == 64 (the zero-filled tail), K
// steps not a multiple of the split, and Qwen2-7B's decoder shapes (q/k/v, o_proj, gate/up, down).
// Split counts are also forced (1, 2, 3, 5). Every form is compared with the base form at the same
// split: bitwise (the reduce order is the same); the fused form's counters must be back at 0 after
// every product. Outputs are poisoned (NaN) first. Skips where no GPU is visible.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
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

// One form of the product under test.
struct Form {
  const char* name;
  bool fused, deep;
};
const Form kBase{"base", false, false}, kFused{"fused", true, false}, kDeep{"deep", false, true},
    kFusedDeep{"fused_deep", true, true};

// Runs the product in `form` (the deep pipeline set as it says, counters zeroed for the fused one
// and checked back at 0 afterwards).
struct Runner {
  Form form;
  int64_t M, cols, K;
  bool silu;
  int64_t pf = 0;
  cuda::DeviceBuffer part, counters;
  Runner(Form f, int64_t M_, int64_t cols_, int64_t K_, bool silu_)
      : form(f), M(M_), cols(cols_), K(K_), silu(silu_) {
    cuda::fp8_tile_set_deep(form.deep ? 1 : 0);
    pf = cuda::fp8_tile_partial_floats(M, cols, K, silu);
    part = cuda::DeviceBuffer(std::max<int64_t>(pf, 1) * 4);
    const int64_t nc = cuda::fp8_tile_counters(cols, silu);
    counters = cuda::DeviceBuffer(nc * 4);
    VLM_CUDA_CHECK(cudaMemset(counters.get(), 0, nc * 4));
  }
  float* partial() { return pf > 0 ? part.as<float>() : nullptr; }
  unsigned* cnt() { return form.fused ? counters.as<unsigned>() : nullptr; }
  void expect_counters_zero() {
    const int64_t nc = cuda::fp8_tile_counters(cols, silu);
    const auto c = to_host<uint32_t>(counters, nc);
    EXPECT_EQ(std::count(c.begin(), c.end(), 0u), nc) << "tile counters left non-zero";
  }
};

void expect_same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  ASSERT_EQ(a.size(), b.size());
  size_t diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff += std::memcmp(&a[i], &b[i], 4) != 0 ? 1 : 0;
  EXPECT_EQ(diff, 0u) << "outputs that differ from the base form's at the same split";
}

class CudaFp8Tile : public ::testing::TestWithParam<Form> {
 protected:
  void SetUp() override { VLM_REQUIRE_GPU(); }
  void TearDown() override {
    cuda::fp8_tile_set_split_override(0);
    cuda::fp8_tile_set_deep(-1);
  }
};

// The product of M x [N, K] in every epilogue variant against fp8_gemm_naive (and, where `host`,
// the naive one against a double-precision host product), and against the base form at the same
// split (bitwise).
// Variants: 0 bf16 out; 1 bf16 out + bias (Qwen2's q/k/v); 2 f32 += (o_proj, down_proj: the
// residual add); 3 f32 += with a bias.
void check_gemm(const Form& form, int64_t M, int64_t N, int64_t K, bool host, int forced = 0) {
  cuda::fp8_tile_set_split_override(forced);
  const HostFp8 w = host_fp8(N, K, 31 + static_cast<uint32_t>(N), host);
  auto d_wq = to_device(w.q);
  auto d_ws = to_device(w.scale);
  const auto bias = round_to(random_vector(N, 3), DType::BF16);
  auto d_b = to_device(encode(bias, DType::BF16));
  const HostFp8 x = host_fp8(M, K, 77 + static_cast<uint32_t>(M), host);
  auto d_xq = to_device(x.q);
  auto d_xs = to_device(x.scale);
  const auto y0 = random_vector(M * N, 4);
  for (int variant = 0; variant < 4; ++variant) {
    const DType out_dt = variant >= 2 ? DType::F32 : DType::BF16;
    const bool with_bias = variant == 1 || variant == 3, acc = variant >= 2;
    const void* b = with_bias ? d_b.get() : nullptr;
    auto run = [&](const Form* f) {  // null: the naive GEMM
      auto d_y = acc ? to_device(y0) : nan_buffer(M * N * dtype_size(out_dt));
      if (!f) {
        cuda::fp8_gemm_naive(d_xq.as<uint8_t>(), d_xs.as<float>(), d_wq.as<uint8_t>(), d_ws.as<float>(), b,
                             d_y.get(), out_dt, acc, M, N, K, nullptr);
      } else {
        Runner r(*f, M, N, K, false);
        cuda::fp8_tile_gemm(d_xq.as<uint8_t>(), d_xs.as<float>(), d_wq.as<uint8_t>(), d_ws.as<float>(), b, d_y.get(),
                            out_dt, acc, M, N, K, r.partial(), nullptr, r.cnt());
        if (f->fused) r.expect_counters_zero();
      }
      return download(d_y, M * N, out_dt);
    };
    const auto fast = run(&form), naive = run(nullptr);
    const int S = cuda::fp8_tile_splits(M, N, K, false);
    SCOPED_TRACE(::testing::Message() << form.name << " M " << M << " N " << N << " K " << K << " variant "
                                      << variant << " splits " << S << " stages " << cuda::fp8_tile_stages(M));
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
    if (form.fused || form.deep) {  // the base form at this form's split: the same bits
      cuda::fp8_tile_set_split_override(S);
      const auto base = run(&kBase);
      cuda::fp8_tile_set_split_override(forced);
      cuda::fp8_tile_set_deep(form.deep ? 1 : 0);
      expect_same_bits(fast, base);
    }
  }
}

// SiLU·mul over gate/up [2I, K] against the naive GEMM then ops_cuda's silu_mul, and against the
// base form at the same split (bitwise).
void check_silu_mul(const Form& form, int64_t M, int64_t I, int64_t K, int forced = 0) {
  cuda::fp8_tile_set_split_override(forced);
  const HostFp8 w = host_fp8(2 * I, K, 8, false);
  auto d_wq = to_device(w.q);
  auto d_ws = to_device(w.scale);
  const auto bias = round_to(random_vector(2 * I, 9), DType::BF16);
  auto d_b = to_device(encode(bias, DType::BF16));
  const HostFp8 x = host_fp8(M, K, 7 + static_cast<uint32_t>(M), false);
  auto d_xq = to_device(x.q);
  auto d_xs = to_device(x.scale);
  for (bool with_bias : {false, true}) {
    const void* b = with_bias ? d_b.get() : nullptr;
    auto run = [&](const Form& f) {
      auto d_out = nan_buffer(M * I * 2);
      Runner r(f, M, 2 * I, K, true);
      cuda::fp8_tile_gemm_silu_mul(d_xq.as<uint8_t>(), d_xs.as<float>(), d_wq.as<uint8_t>(), d_ws.as<float>(), b,
                                   d_out.get(), M, I, K, r.partial(), nullptr, r.cnt());
      if (f.fused) r.expect_counters_zero();
      return download(d_out, M * I, DType::BF16);
    };
    const auto fast = run(form);
    const int S = cuda::fp8_tile_splits(M, 2 * I, K, true);
    auto d_gu = nan_buffer(M * 2 * I * 2), d_naive = nan_buffer(M * I * 2);
    cuda::fp8_gemm_naive(d_xq.as<uint8_t>(), d_xs.as<float>(), d_wq.as<uint8_t>(), d_ws.as<float>(), b, d_gu.get(),
                         DType::BF16, false, M, 2 * I, K, nullptr);
    cuda::silu_mul(d_gu.get(), M, I, d_naive.get(), DType::BF16, nullptr);
    const auto naive = download(d_naive, M * I, DType::BF16);
    SCOPED_TRACE(::testing::Message() << form.name << " M " << M << " I " << I << " K " << K << " bias " << with_bias
                                      << " splits " << S << " stages " << cuda::fp8_tile_stages(M));
    // g and u may round to neighbouring bf16 values (the sums' order differs): ~2^-8 apart.
    EXPECT_LE(rel_error(fast, naive), 2e-2);
    if (form.fused || form.deep) {
      cuda::fp8_tile_set_split_override(S);
      const auto base = run(kBase);
      cuda::fp8_tile_set_split_override(forced);
      cuda::fp8_tile_set_deep(form.deep ? 1 : 0);
      expect_same_bits(fast, base);
    }
  }
}

TEST_P(CudaFp8Tile, MatchesNaiveGemm) {
  struct Shape { int64_t N, K; bool host; };
  for (const Shape sh : {Shape{37, 64, true}, Shape{300, 3584, true}, Shape{1000, 256, true}, Shape{129, 320, true},
                         Shape{4608, 3584, false}, Shape{3584, 3584, false}, Shape{3584, 18944, false}}) {
    for (const int64_t M : {1, 5, 8, 13, 16, 17, 24, 33, 57, 64}) {
      if (!sh.host && M != 5 && M != 24 && M != 64) continue;  // the large shapes: both ends and the deep side
      check_gemm(GetParam(), M, sh.N, sh.K, sh.host);
    }
  }
}

TEST_P(CudaFp8Tile, SiluMulMatchesNaiveGemmThenSiluMul) {
  struct Shape { int64_t I, K; };
  for (const Shape sh : {Shape{333, 1024}, Shape{40, 64}, Shape{70, 320}, Shape{18944, 3584}}) {
    for (const int64_t M : {1, 5, 7, 16, 17, 33, 45, 64}) {
      if (sh.I > 1000 && M != 5 && M != 64) continue;
      check_silu_mul(GetParam(), M, sh.I, sh.K);
    }
  }
}

// The K split forced: unsplit (the epilogue in the kernel) and split 2, 3 and 5 ways (partial sums
// and a reduce), on the 7B shapes and on odd ones (rows not a multiple of the tile, K steps not a
// multiple of the split, K's 64-column tail), whatever the model would pick.
TEST_P(CudaFp8Tile, ForcedSplitsMatchNaive) {
  for (const int S : {1, 2, 3, 5}) {
    SCOPED_TRACE(::testing::Message() << "forced splits " << S);
    for (const int64_t M : {5, 24, 64}) {
      check_gemm(GetParam(), M, 4608, 3584, false, S);
      check_gemm(GetParam(), M, 300, 1088, true, S);  // 9 k-steps, the last one 64 columns
      if (M != 24) check_silu_mul(GetParam(), M, 18944, 3584, S);
      check_silu_mul(GetParam(), M, 70, 1088, S);
    }
    EXPECT_EQ(cuda::fp8_tile_splits(64, 4608, 3584, false), S);
  }
  cuda::fp8_tile_set_split_override(0);
}

// The same product three times in one form on one counter buffer (the fused form: the counters
// each call leaves serve the next): equal bits every time (no atomics in the sums).
TEST_P(CudaFp8Tile, RepeatedProductsAreBitwiseEqual) {
  const Form& f = GetParam();
  const int64_t M = 8, N = 3584, K = 3584;
  const HostFp8 w = host_fp8(N, K, 5, false), x = host_fp8(M, K, 6, false);
  auto d_wq = to_device(w.q);
  auto d_ws = to_device(w.scale);
  auto d_xq = to_device(x.q);
  auto d_xs = to_device(x.scale);
  cuda::fp8_tile_set_split_override(4);
  Runner r(f, M, N, K, false);
  std::vector<float> first;
  for (int i = 0; i < 3; ++i) {
    auto d_y = nan_buffer(M * N * 4);
    cuda::fp8_tile_gemm(d_xq.as<uint8_t>(), d_xs.as<float>(), d_wq.as<uint8_t>(), d_ws.as<float>(), nullptr, d_y.get(),
                        DType::F32, false, M, N, K, r.partial(), nullptr, r.cnt());
    const auto y = download(d_y, M * N, DType::F32);
    if (i == 0) first = y;
    else expect_same_bits(y, first);
  }
  if (f.fused) r.expect_counters_zero();
  cuda::fp8_tile_set_split_override(0);
}

// The split is the kernel's own decision: a partial buffer is asked for exactly where the product
// is split, and a product of one 64-column step never is.
TEST_P(CudaFp8Tile, PartialBufferOnlyForSplitProducts) {
  cuda::fp8_tile_set_deep(GetParam().deep ? 1 : 0);
  EXPECT_EQ(cuda::fp8_tile_partial_floats(64, 4096, 64, false), 0);
  const int64_t pf = cuda::fp8_tile_partial_floats(8, 256, 8192, false);  // few row blocks, many steps: split
  EXPECT_GT(pf, 0);
  EXPECT_EQ(pf % (8 * 256), 0);
  EXPECT_EQ(cuda::fp8_tile_counters(4608, false), 36);
  EXPECT_EQ(cuda::fp8_tile_counters(2 * 18944, true), 296);
  EXPECT_EQ(cuda::fp8_tile_stages(8), cuda::kFp8TileStages);
  EXPECT_EQ(cuda::fp8_tile_stages(64) > cuda::kFp8TileStages, GetParam().deep);
  EXPECT_FALSE(cuda::fp8_tile_supported(65, 64));
  EXPECT_FALSE(cuda::fp8_tile_supported(1, 48));
  EXPECT_TRUE(cuda::fp8_tile_supported(64, 3584));
}

INSTANTIATE_TEST_SUITE_P(Kernels, CudaFp8Tile, ::testing::Values(kBase, kFused, kDeep, kFusedDeep),
                         [](const ::testing::TestParamInfo<Form>& i) { return std::string(i.param.name); });

}  // namespace
}  // namespace vlm::testing
