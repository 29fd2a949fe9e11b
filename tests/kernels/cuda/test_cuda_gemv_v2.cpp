// The decode GEMVs' v2 form (gemv.h, VLM_CUDA_GEMV=v2: 8 streaming loads per lane in flight, the
// resident-capacity grid) against v1 and the naive references, over a table of shapes: rows 1..4
// (kGemvMaxRows), K 64..18944 (multiples of 8, of 256 and not), odd N, the Qwen3-8B and Qwen2-7B
// decode shapes (q/k/v, o, gate/up, down; the LM head's loop over many columns by a 40,000-column
// stand-in), BF16 and F16, with and without bias, accumulating F32 outputs, and the norm-fused
// forms (gemv_norm.h) with and without a row gather. v2 must equal v1 bit for bit (the same sums in
// the same order: gemv_stream.cuh), and stay within test_cuda_gemv.cpp's bounds of the naive
// reference. Outputs are poisoned (NaN) first. Skips where no GPU is visible.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
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

std::vector<uint8_t> raw(const cuda::DeviceBuffer& b, size_t n, DType dt) {
  return to_host<uint8_t>(b, n * dtype_size(dt));
}

// n random dt values (scale 0.05) on the device: a host pattern of an odd length, repeated (so the
// big shapes cost little host time and rows still differ).
cuda::DeviceBuffer device_random(int64_t n, DType dt, uint32_t seed, float scale = 0.05f) {
  const int64_t pat = std::min<int64_t>(n, (int64_t(1) << 20) + 7);
  const auto host = encode(round_to(random_vector(static_cast<size_t>(pat), seed, scale), dt), dt);
  const size_t es = dtype_size(dt);
  cuda::DeviceBuffer b(static_cast<size_t>(n) * es);
  for (int64_t off = 0; off < n; off += pat)
    VLM_CUDA_CHECK(cudaMemcpy(static_cast<uint8_t*>(b.get()) + off * es, host.data(),
                              static_cast<size_t>(std::min(pat, n - off)) * es, cudaMemcpyHostToDevice));
  return b;
}

// Sets gemv's version for a scope, then puts back the one before.
struct VersionScope {
  explicit VersionScope(cuda::GemvVersion v) : before(cuda::gemv_version()) { cuda::gemv_set_version(v); }
  ~VersionScope() { cuda::gemv_set_version(before); }
  cuda::GemvVersion before;
};

// Calls f() under v1 then under v2 and returns both outputs' bytes.
template <class F>
std::pair<std::vector<uint8_t>, std::vector<uint8_t>> both(F&& f) {
  std::vector<uint8_t> v1, v2;
  {
    VersionScope s(cuda::GemvVersion::V1);
    v1 = f();
  }
  {
    VersionScope s(cuda::GemvVersion::V2);
    v2 = f();
  }
  return {v1, v2};
}

int64_t differing(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b, DType dt) {
  const size_t e = dtype_size(dt);
  const std::vector<float> da = decode(a, dt);
  int64_t bad = 0;
  for (size_t i = 0; i < a.size() / e; ++i) bad += std::memcmp(a.data() + i * e, b.data() + i * e, e) != 0 || std::isnan(da[i]);
  return bad;
}

double tolerance(DType dt, DType out_dt) { return out_dt == DType::F32 ? 1e-5 : (dt == DType::BF16 ? 8e-3 : 1e-3); }

struct Shape {
  int64_t N, K;  // gemv: y [M, N]; silu forms: I = N
};

// 37/301 odd N over K 64..12288; then Qwen3-8B (hidden 4096, q/k/v 6144, intermediate 12288) and
// Qwen2-7B (hidden 3584, q/k/v 4608, intermediate 18944): q/k/v, o, gate/up (I), down.
const Shape kShapes[] = {{37, 64},     {301, 520},   {37, 1032},  {301, 3584},  {37, 4096},  {301, 12288},
                         {9, 8},       {40000, 64},  {6144, 4096}, {4096, 4096}, {12288, 4096}, {4096, 12288},
                         {4608, 3584}, {3584, 3584}, {18944, 3584}, {3584, 18944}};

class CudaGemvV2 : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override { VLM_REQUIRE_GPU(); }
};

TEST_P(CudaGemvV2, GemvEqualsV1AndMatchesNaive) {
  const DType dt = GetParam();
  for (const Shape sh : kShapes) {
    const int64_t N = sh.N, K = sh.K;
    auto d_w = device_random(N * K, dt, 11 + static_cast<uint32_t>(N));
    for (int64_t M : {int64_t(1), int64_t(2), int64_t(3), cuda::kGemvMaxRows}) {
      auto d_x = device_random(M * K, dt, 5 + static_cast<uint32_t>(M), 1.0f);
      for (int variant = 0; variant < 3; ++variant) {  // 0: dt out; 1: + bias; 2: f32 += with f32 bias
        const DType out_dt = variant == 2 ? DType::F32 : dt;
        const bool acc = variant == 2;
        auto d_b = device_random(N, out_dt, 3, 1.0f), d_y0 = device_random(M * N, out_dt, 4, 1.0f);
        const void* b = variant > 0 ? d_b.get() : nullptr;
        const size_t bytes = static_cast<size_t>(M * N) * dtype_size(out_dt);
        auto run = [&](bool naive) {
          auto d_y = nan_buffer(bytes);
          if (acc) VLM_CUDA_CHECK(cudaMemcpy(d_y.get(), d_y0.get(), bytes, cudaMemcpyDeviceToDevice));
          (naive ? cuda::gemv_naive : cuda::gemv)(d_x.get(), d_w.get(), dt, b, d_y.get(), out_dt, acc, M, N, K,
                                                  nullptr);
          return raw(d_y, M * N, out_dt);
        };
        const auto [v1, v2] = both([&] { return run(false); });
        const auto naive = run(true);
        SCOPED_TRACE(::testing::Message() << "N " << N << " K " << K << " M " << M << " variant " << variant);
        EXPECT_EQ(differing(v2, v1, out_dt), 0);
        EXPECT_LE(rel_error(decode(v2, out_dt), decode(naive, out_dt)), tolerance(dt, out_dt));
      }
    }
  }
}

TEST_P(CudaGemvV2, SiluMulEqualsV1AndMatchesNaive) {
  const DType dt = GetParam();
  for (const Shape sh : kShapes) {
    const int64_t I = sh.N, K = sh.K;
    auto d_w = device_random(2 * I * K, dt, 21 + static_cast<uint32_t>(I));
    auto d_b = device_random(2 * I, dt, 22, 1.0f);
    for (int64_t M : {int64_t(1), int64_t(2), int64_t(3), cuda::kGemvMaxRows}) {
      auto d_x = device_random(M * K, dt, 7 + static_cast<uint32_t>(M), 1.0f);
      for (bool with_bias : {false, true}) {
        const void* b = with_bias ? d_b.get() : nullptr;
        auto run = [&](bool naive) {
          auto d_out = nan_buffer(static_cast<size_t>(M * I) * dtype_size(dt));
          (naive ? cuda::gemv_silu_mul_naive : cuda::gemv_silu_mul)(d_x.get(), d_w.get(), dt, b, d_out.get(), M, I,
                                                                     K, nullptr);
          return raw(d_out, M * I, dt);
        };
        const auto [v1, v2] = both([&] { return run(false); });
        const auto naive = run(true);
        SCOPED_TRACE(::testing::Message() << "I " << I << " K " << K << " M " << M << " bias " << with_bias);
        EXPECT_EQ(differing(v2, v1, dt), 0);
        EXPECT_LE(rel_error(decode(v2, dt), decode(naive, dt)), dt == DType::BF16 ? 1.6e-2 : 2e-3);
      }
    }
  }
}

// The norm forms: v2 equals v1 bit for bit; both against rms_norm then the naive GEMV.
TEST_P(CudaGemvV2, NormFormsEqualV1AndMatchNaive) {
  const DType dt = GetParam();
  for (const Shape sh : kShapes) {
    const int64_t N = sh.N, K = sh.K, I = N;
    if (!cuda::gemv_norm_supported(1, K, dt)) continue;
    auto d_w = device_random(N * K, dt, 41 + static_cast<uint32_t>(N));
    auto d_wgu = device_random(2 * I * K, dt, 51 + static_cast<uint32_t>(I));
    auto d_bgu = device_random(2 * I, dt, 52, 1.0f);
    for (int64_t M : {int64_t(1), int64_t(2), int64_t(3), cuda::kGemvMaxRows}) {
      if (!cuda::gemv_norm_supported(M, K, dt)) continue;
      for (bool gather : {false, true}) {
        const int64_t X = gather ? M + 3 : M;
        auto x = random_vector(X * K, 31 + static_cast<uint32_t>(M));
        for (int64_t r = 0; r < X; ++r)
          for (int64_t k = 0; k < K; ++k) x[r * K + k] *= 0.5f + static_cast<float>(r);
        auto nw = random_vector(K, 32, 0.2f);
        for (float& v : nw) v += 1.0f;
        std::vector<int32_t> rows;
        for (int64_t m = 0; m < M && gather; ++m) rows.push_back(static_cast<int32_t>(X - 1 - m));
        auto d_x = to_device(x), d_nw = to_device(nw);
        cuda::DeviceBuffer d_rows = gather ? to_device(rows) : cuda::DeviceBuffer(16);
        const int32_t* rp = gather ? static_cast<const int32_t*>(d_rows.get()) : nullptr;
        auto h = nan_buffer(static_cast<size_t>(M * K) * dtype_size(dt));
        cuda::rms_norm(static_cast<float*>(d_x.get()), nullptr, static_cast<const float*>(d_nw.get()), kEps, rp, M, K,
                       h.get(), dt, nullptr);
        // gemv_norm, out dt + bias and f32 +=.
        for (int variant = 1; variant < 3; ++variant) {
          const DType out_dt = variant == 2 ? DType::F32 : dt;
          const bool acc = variant == 2;
          auto d_b = device_random(N, out_dt, 42, 1.0f), d_y0 = device_random(M * N, out_dt, 43, 1.0f);
          const size_t bytes = static_cast<size_t>(M * N) * dtype_size(out_dt);
          auto fresh = [&] {
            auto d_y = nan_buffer(bytes);
            if (acc) VLM_CUDA_CHECK(cudaMemcpy(d_y.get(), d_y0.get(), bytes, cudaMemcpyDeviceToDevice));
            return d_y;
          };
          const auto [v1, v2] = both([&] {
            auto d_y = fresh();
            cuda::gemv_norm(static_cast<const float*>(d_x.get()), rp, static_cast<const float*>(d_nw.get()), kEps,
                            d_w.get(), dt, d_b.get(), d_y.get(), out_dt, acc, M, N, K, nullptr);
            return raw(d_y, M * N, out_dt);
          });
          auto d_naive = fresh();
          cuda::gemv_naive(h.get(), d_w.get(), dt, d_b.get(), d_naive.get(), out_dt, acc, M, N, K, nullptr);
          SCOPED_TRACE(::testing::Message() << "norm N " << N << " K " << K << " M " << M << " variant " << variant
                                            << " gather " << gather);
          EXPECT_EQ(differing(v2, v1, out_dt), 0);
          const double tol = out_dt == DType::F32 ? (K <= 4096 ? 1e-5 : 1e-3) : tolerance(dt, out_dt);
          EXPECT_LE(rel_error(decode(v2, out_dt), decode(raw(d_naive, M * N, out_dt), out_dt)), tol);
        }
        // gemv_silu_mul_norm with bias (I = N).
        const auto [v1, v2] = both([&] {
          auto d_out = nan_buffer(static_cast<size_t>(M * I) * dtype_size(dt));
          cuda::gemv_silu_mul_norm(static_cast<const float*>(d_x.get()), rp, static_cast<const float*>(d_nw.get()),
                                   kEps, d_wgu.get(), dt, d_bgu.get(), d_out.get(), M, I, K, nullptr);
          return raw(d_out, M * I, dt);
        });
        auto d_naive = nan_buffer(static_cast<size_t>(M * I) * dtype_size(dt));
        cuda::gemv_silu_mul_naive(h.get(), d_wgu.get(), dt, d_bgu.get(), d_naive.get(), M, I, K, nullptr);
        SCOPED_TRACE(::testing::Message() << "silu norm I " << I << " K " << K << " M " << M << " gather " << gather);
        EXPECT_EQ(differing(v2, v1, dt), 0);
        EXPECT_LE(rel_error(decode(v2, dt), decode(raw(d_naive, M * I, dt), dt)), dt == DType::BF16 ? 1.6e-2 : 2e-3);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaGemvV2, ::testing::Values(DType::BF16, DType::F16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace vlm::testing
