// Programmatic dependent launch (kernels/cuda/core/pdl.h) on a chain of dependent decode GEMVs, a
// decoder layer in miniature repeated: every kernel reads what the one before it wrote, and the
// residual x is read by one kernel and written by the next (x += o(...), x += down(...)):
//   qkv = gemv_norm(x) -> x += gemv(qkv) -> act = gemv_silu_mul_norm(x) -> x += gemv(act)
//   (also through the unfused gemv_silu_mul), then logits = gemv_norm(x rows) (the LM head).
// Run under a PdlScope that is on (each kernel may start beside the one before it, prefetching its
// weights before its wait) and off (plain launches): the results must be equal bit for bit, so a
// kernel reading before its wait, or writing before it, shows. Several budgets of the weights'
// prefetch need no test of their own: it is a hint (VLM_CUDA_PDL_PREFETCH_MB). Skips where no GPU
// is visible.
#include <gtest/gtest.h>

#include <cstring>

#include "kernels/cuda/core/pdl.h"
#include "kernels/cuda/gemm/gemv.h"
#include "kernels/cuda/gemm/gemv_norm.h"
#include "tests/kernels/cuda/cuda_test_util.h"
#include "tests/support/gpu_test.h"

namespace vlm::testing {
namespace {

constexpr float kEps = 1e-6f;

struct Chain {
  // C hidden (K of every product but down's), N q/k/v width, I the MLP's inner width, V the head's rows.
  int64_t M, C, N, I, V;
  DType dt;
  cuda::DeviceBuffer w_qkv, w_o, w_gu, w_down, w_head, w_h, nw1, nw2, rows;

  Chain(int64_t m, int64_t c, int64_t n, int64_t i, int64_t v, DType t) : M(m), C(c), N(n), I(i), V(v), dt(t) {
    auto weights = [&](int64_t count, uint32_t seed) {
      return to_device(encode(random_vector(static_cast<size_t>(count), seed, 0.03f), dt));
    };
    w_qkv = weights(N * C, 1);
    w_o = weights(C * N, 2);
    w_gu = weights(2 * I * C, 3);
    w_down = weights(C * I, 4);
    w_head = weights(V * C, 5);
    w_h = weights(C * C, 9);
    std::vector<float> g(static_cast<size_t>(C), 1.0f);
    const auto r = random_vector(static_cast<size_t>(C), 6, 0.2f);
    for (size_t k = 0; k < g.size(); ++k) g[k] += r[k];
    nw1 = to_device(g);
    nw2 = to_device(random_vector(static_cast<size_t>(C), 7, 0.1f));
    std::vector<int32_t> rv;
    for (int64_t m = 0; m < M; ++m) rv.push_back(static_cast<int32_t>(M - 1 - m));  // the rows reversed
    rows = to_device(rv);
  }

  // `layers` layers then the head on stream s; returns the logits [M, V] f32 and x [M, C] f32 as bytes.
  std::vector<uint8_t> run(int layers, bool fused_mlp, cudaStream_t s) {
    auto x = to_device(random_vector(static_cast<size_t>(M * C), 8));
    cuda::DeviceBuffer qkv(static_cast<size_t>(M * N) * dtype_size(dt));
    cuda::DeviceBuffer act(static_cast<size_t>(M * I) * dtype_size(dt));
    cuda::DeviceBuffer h(static_cast<size_t>(M * C) * dtype_size(dt)), logits(static_cast<size_t>(M * V) * 4);
    float* xf = x.as<float>();
    for (int l = 0; l < layers; ++l) {
      cuda::gemv_norm(xf, nullptr, nw1.as<float>(), kEps, w_qkv.get(), dt, nullptr, qkv.get(), dt, false, M, N, C, s);
      cuda::gemv(qkv.get(), w_o.get(), dt, nullptr, xf, DType::F32, true, M, C, N, s);
      if (fused_mlp) {
        cuda::gemv_silu_mul_norm(xf, nullptr, nw2.as<float>(), kEps, w_gu.get(), dt, nullptr, act.get(), M, I, C, s);
      } else {  // a [M, C] dt input by another GEMV-norm, then the unfused gemv_silu_mul
        cuda::gemv_norm(xf, nullptr, nw2.as<float>(), kEps, w_h.get(), dt, nullptr, h.get(), dt, false, M, C, C, s);
        cuda::gemv_silu_mul(h.get(), w_gu.get(), dt, nullptr, act.get(), M, I, C, s);
      }
      cuda::gemv(act.get(), w_down.get(), dt, nullptr, xf, DType::F32, true, M, C, I, s);
    }
    cuda::gemv_norm(xf, rows.as<int32_t>(), nw1.as<float>(), kEps, w_head.get(), dt, nullptr, logits.get(), DType::F32,
                    false, M, V, C, s);
    VLM_CUDA_CHECK(cudaStreamSynchronize(s));
    std::vector<uint8_t> out = to_host<uint8_t>(logits, static_cast<size_t>(M * V) * 4);
    const std::vector<uint8_t> xs = to_host<uint8_t>(x, static_cast<size_t>(M * C) * 4);
    out.insert(out.end(), xs.begin(), xs.end());
    return out;
  }
};

class CudaPdlChain : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override { VLM_REQUIRE_GPU(); }
};

TEST_P(CudaPdlChain, PdlLaunchesEqualPlainLaunches) {
  const DType dt = GetParam();
  int dev = 0;
  ASSERT_EQ(cudaGetDevice(&dev), cudaSuccess);
  const bool supported = cuda::pdl_supported(dev);
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  struct Shape { int64_t C, N, I, V; };
  // Qwen3-8B's q/k/v and hidden widths with a short MLP and head; a small shape with an odd head
  // width (every width a GEMV reads -- C, N, I -- a multiple of 8, as gemv requires).
  for (const Shape sh : {Shape{4096, 6144, 1536, 2048}, Shape{520, 200, 336, 77}}) {
    for (int64_t M : {int64_t(1), int64_t(3)}) {
      for (bool fused_mlp : {true, false}) {
        SCOPED_TRACE(::testing::Message() << "C " << sh.C << " M " << M << (fused_mlp ? " fused" : " unfused"));
        Chain c(M, sh.C, sh.N, sh.I, sh.V, dt);
        std::vector<uint8_t> plain, pdl;
        {
          const cuda::PdlScope off(false);
          plain = c.run(6, fused_mlp, s);
        }
        const int64_t before = cuda::pdl_launches();
        {
          const cuda::PdlScope on(supported);
          pdl = c.run(6, fused_mlp, s);
        }
        EXPECT_EQ(cuda::pdl_launches() - before, supported ? 6 * 4 + 1 + (fused_mlp ? 0 : 6) : 0);
        ASSERT_EQ(pdl.size(), plain.size());
        int64_t differ = 0;
        for (size_t i = 0; i < pdl.size(); i += 4) differ += std::memcmp(&pdl[i], &plain[i], 4) != 0;
        EXPECT_EQ(differ, 0) << "of " << pdl.size() / 4 << " floats (logits, then x)";
      }
    }
  }
  cudaStreamDestroy(s);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaPdlChain, ::testing::Values(DType::BF16, DType::F16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace vlm::testing
