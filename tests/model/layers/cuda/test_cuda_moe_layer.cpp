// The GPU's mixture-of-experts layer (CudaLayers::moe, model/layers/cuda/cuda_moe.h) against the
// CPU's (cpu_moe.h, the exact reference) on random weights: token counts from one (decode: 1 and
// 3 the pair GEMVs with the combine in the down product, 6 the fused router with the per-expert
// GEMVs; kernels/cuda/moe/moe_decode.h) to 300 (prefill: the tensor-core tiles), the three checkpoint layouts, top-k
// 1, 2, 8 and E, with and without norm_topk_prob, Write and the residual Add into x itself, a
// shape whose widths are not multiples of 8 (the naive products). f32 within 1e-5 relative per
// row; bf16 and f16 within 3e-2 per row. Rows whose routing is a near-tie (the gap between the
// k-th and the (k+1)-th router logit, computed on the host in double, below 1e-3 in f32 or 0.1
// in 16 bits, several times the logits' rounding error) may pick other experts on either side
// and are left out (counted; at most a quarter of the rows). Skips without a GPU.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <vector>

#include "kernels/cuda/core/cuda_check.h"
#include "kernels/cuda/core/device_upload.h"
#include "model/layers/cpu/cpu_layers.h"
#include "model/layers/cpu/cpu_step.h"
#include "model/layers/cuda/cuda_layers.h"
#include "model/layers/cuda/cuda_step.h"
#include "tests/support/gpu_test.h"

namespace vlm::testing {
namespace {

constexpr float kEps = 1e-6f;

struct Shape3 {
  int64_t C, I, E;
};

// Tensors by name (f32 or bf16 bytes) behind a WeightSource; values kept as floats too.
struct Store {
  struct Entry {
    std::vector<char> bytes;
    DType dtype;
    Shape shape;
  };
  std::map<std::string, Entry> t;
  void put(const std::string& n, const std::vector<float>& v, Shape s, DType dt) {
    Entry e{std::vector<char>(v.size() * dtype_size(dt)), dt, s};
    convert_from_f32(v.data(), dt, e.bytes.data(), static_cast<int64_t>(v.size()));
    t[n] = std::move(e);
  }
  WeightSource source() {
    return WeightSource(
        [this](const std::string& n, const Shape& s) {
          auto it = t.find(n);
          if (it == t.end()) throw LoadError("no tensor " + n);
          if (!(it->second.shape == s)) throw LoadError("shape of " + n);
          return TensorView(it->second.bytes.data(), it->second.dtype, s);
        },
        "");
  }
};

std::vector<float> randoms(int64_t n, std::mt19937& rng, float scale, float offset, DType dt) {
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = offset + scale * nd(rng);
  std::vector<char> raw(v.size() * dtype_size(dt));
  convert_from_f32(v.data(), dt, raw.data(), n);
  convert_to_f32(raw.data(), dt, v.data(), n);
  return v;
}

// A random block in `layout` (router, norm, experts); returns the router [E, C] and norm [C].
std::pair<std::vector<float>, std::vector<float>> random_block(Store& s, const Shape3& sh, ExpertLayout layout,
                                                               DType dt, uint32_t seed) {
  const int64_t C = sh.C, I = sh.I, E = sh.E;
  std::mt19937 rng(seed);
  auto router = randoms(E * C, rng, 0.4f, 0.f, dt), norm = randoms(C, rng, 0.2f, 1.f, DType::F32);
  s.put("mlp.gate.weight", router, Shape{E, C}, dt);
  s.put("norm.weight", norm, Shape{C}, DType::F32);
  const float ws = 1.0f / std::sqrt(static_cast<float>(C));
  auto gu = randoms(E * 2 * I * C, rng, ws, 0.f, dt), dn = randoms(E * C * I, rng, ws, 0.f, dt);  // [E,2I,C], [E,C,I]
  if (layout == ExpertLayout::Fused) {
    s.put("mlp.experts.gate_up_proj", gu, Shape{E, 2 * I, C}, dt);
    s.put("mlp.experts.down_proj", dn, Shape{E, C, I}, dt);
  } else if (layout == ExpertLayout::FusedTransposed) {
    std::vector<float> gt(gu.size()), dt2(dn.size());
    for (int64_t e = 0; e < E; ++e) {
      for (int64_t i = 0; i < 2 * I; ++i)
        for (int64_t c = 0; c < C; ++c) gt[(e * C + c) * 2 * I + i] = gu[(e * 2 * I + i) * C + c];
      for (int64_t c = 0; c < C; ++c)
        for (int64_t i = 0; i < I; ++i) dt2[(e * I + i) * C + c] = dn[(e * C + c) * I + i];
    }
    s.put("mlp.experts.gate_up_proj", gt, Shape{E, C, 2 * I}, dt);
    s.put("mlp.experts.down_proj", dt2, Shape{E, I, C}, dt);
  } else {
    for (int64_t e = 0; e < E; ++e) {
      const std::string n = "mlp.experts." + std::to_string(e) + ".";
      auto slice = [](const std::vector<float>& v, int64_t at, int64_t n) {
        return std::vector<float>(v.begin() + at, v.begin() + at + n);
      };
      s.put(n + "gate_proj.weight", slice(gu, e * 2 * I * C, I * C), Shape{I, C}, dt);
      s.put(n + "up_proj.weight", slice(gu, e * 2 * I * C + I * C, I * C), Shape{I, C}, dt);
      s.put(n + "down_proj.weight", slice(dn, e * C * I, C * I), Shape{C, I}, dt);
    }
  }
  return {router, norm};
}

MoeSpec spec_of(const Shape3& sh, int64_t k, bool norm_topk, ExpertLayout layout) {
  MoeSpec s;
  s.hidden = sh.C;
  s.inner = sh.I;
  s.num_experts = sh.E;
  s.top_k = k;
  s.norm_topk_prob = norm_topk;
  s.router = {"mlp.gate.weight", {sh.E, sh.C}};
  s.experts = "mlp.experts.";
  s.layout = layout;
  s.pre_norm = NormSpec{NormKind::Rms, kEps, {"norm.weight", {sh.C}}, {}};
  return s;
}

// Per token: the gap between its k-th and (k+1)-th router logits (double; +inf when k = E).
std::vector<double> routing_margins(const std::vector<float>& x, const std::vector<float>& router,
                                    const std::vector<float>& norm, int64_t T, int64_t C, int64_t E, int64_t k) {
  std::vector<double> m(static_cast<size_t>(T), INFINITY);
  for (int64_t t = 0; t < T; ++t) {
    double ss = 0;
    for (int64_t c = 0; c < C; ++c) ss += double(x[t * C + c]) * x[t * C + c];
    const double inv = 1.0 / std::sqrt(ss / C + kEps);
    std::vector<double> l(static_cast<size_t>(E));
    for (int64_t e = 0; e < E; ++e)
      for (int64_t c = 0; c < C; ++c) l[e] += router[e * C + c] * (x[t * C + c] * inv * norm[c]);
    std::sort(l.begin(), l.end(), std::greater<double>());
    if (k < E) m[t] = l[k - 1] - l[k];
  }
  return m;
}

// The GPU block's output for x [T, C] (Write into y, or Add into x itself).
std::vector<float> run_gpu(Store& st, const MoeSpec& spec, DType dt, const std::vector<float>& x, int64_t T,
                           Accum a) {
  CudaLayers backend(dt);
  auto moe = backend.moe(st.source(), spec);
  const int64_t C = spec.hidden;
  cudaStream_t stream = nullptr;
  VLM_CUDA_CHECK(cudaStreamCreate(&stream));
  cuda::CublasLtGemm gemm;
  int64_t epoch = 0;
  CudaScratch pool(&epoch);
  CudaStep s;
  s.stream = stream;
  s.dt = dt;
  s.T = T;
  s.gemm = &gemm;
  s.pool = &pool;
  cuda::DeviceBuffer inner(static_cast<size_t>(T * moe->inner_cols()) * dtype_size(dt));
  cuda::DeviceBuffer dx = cuda::upload_converted({cuda::f32_view(x)}, DType::F32, nullptr);
  cuda::DeviceBuffer dy(static_cast<size_t>(T * C) * 4);
  VLM_CUDA_CHECK(cudaMemset(dy.get(), 0xff, dy.bytes()));
  const Act xa{dx.get(), T, C, DType::F32}, ia{inner.get(), T, moe->inner_cols(), dt};
  const Act ya = a == Accum::Add ? xa : Act{dy.get(), T, C, DType::F32};
  moe->forward(s, xa, ia, ya, a);
  std::vector<float> out(static_cast<size_t>(T * C));
  VLM_CUDA_CHECK(cudaStreamSynchronize(stream));
  VLM_CUDA_CHECK(cudaMemcpy(out.data(), ya.data, out.size() * 4, cudaMemcpyDeviceToHost));
  VLM_CUDA_CHECK(cudaStreamDestroy(stream));
  return out;
}

std::vector<float> run_cpu(Store& st, const MoeSpec& spec, std::vector<float> x, int64_t T, Accum a) {
  CpuLayers backend;
  auto moe = backend.moe(st.source(), spec);
  ActivationPlan plan;
  plan.bufs.push_back({moe->inner_cols(), ActRole::Hidden, false});
  CpuStep step(plan, T);
  const Act xa{x.data(), T, spec.hidden, DType::F32};
  if (a == Accum::Add) {
    moe->forward(step, xa, step.act(0), xa, Accum::Add);
    return x;
  }
  std::vector<float> y(x.size(), -7.f);
  moe->forward(step, xa, step.act(0), Act{y.data(), T, spec.hidden, DType::F32}, Accum::Write);
  return y;
}

struct Case {
  Shape3 shape;
  int64_t k;
  bool norm_topk;
  ExpertLayout layout;
};

class CudaMoeLayer : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override { VLM_REQUIRE_GPU(); }
};

TEST_P(CudaMoeLayer, EqualsTheCpuBlock) {
  const DType dt = GetParam();
  const std::vector<Case> cases = {
      {{64, 40, 8}, 2, false, ExpertLayout::PerExpert},       // the fixtures' shape
      {{64, 40, 8}, 2, true, ExpertLayout::Fused},
      {{128, 96, 32}, 8, true, ExpertLayout::FusedTransposed},
      {{64, 40, 8}, 1, true, ExpertLayout::Fused},
      {{24, 20, 6}, 6, false, ExpertLayout::PerExpert},       // k = E; widths not multiples of 8
  };
  int compared = 0, skipped = 0;
  for (const Case& c : cases) {
    Store st;
    const auto [router, norm] = random_block(st, c.shape, c.layout, dt, 17);
    const MoeSpec spec = spec_of(c.shape, c.k, c.norm_topk, c.layout);
    for (int64_t T : {1, 3, 6, 17, 67, 300}) {
      for (Accum a : {Accum::Write, Accum::Add}) {
        std::mt19937 rng(static_cast<uint32_t>(T));
        const auto x = randoms(T * c.shape.C, rng, 1.f, 0.f, DType::F32);
        const auto want = run_cpu(st, spec, x, T, a);
        const auto got = run_gpu(st, spec, dt, x, T, a);
        const auto margin = routing_margins(x, router, norm, T, c.shape.C, c.shape.E, c.k);
        const double tol = dt == DType::F32 ? 1e-5 : 3e-2, tie = dt == DType::F32 ? 1e-3 : 0.1;
        for (int64_t t = 0; t < T; ++t) {
          if (margin[t] < tie) {
            ++skipped;
            continue;
          }
          ++compared;
          double num = 0, den = 0;
          for (int64_t i = t * c.shape.C; i < (t + 1) * c.shape.C; ++i) {
            num += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
            den += double(want[i]) * want[i];
          }
          ASSERT_LE(std::sqrt(num / std::max(den, 1e-30)), tol)
              << dtype_name(dt) << " C " << c.shape.C << " E " << c.shape.E << " k " << c.k << " T " << T << " row "
              << t << (a == Accum::Add ? " add" : " write") << " layout " << static_cast<int>(c.layout);
        }
      }
    }
  }
  std::printf("[ moe layer %s ] %d rows compared, %d near-tie rows left out\n", dtype_name(dt), compared, skipped);
  EXPECT_LE(skipped, compared / 3);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaMoeLayer, ::testing::Values(DType::F32, DType::BF16, DType::F16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace vlm::testing
