// The GPU's vision layers (model/layers/cuda: CudaLayers) against the CPU's (the exact reference)
// on random weights: LayerNorm alone and before a linear layer, the ungated MLPs (quick_gelu,
// GELU erf, GELU tanh; with a LayerNorm, and without one over a compute-dtype input), the gated
// MLP on a vision step (GEMMs however few the rows), attention within segments (equal and unequal,
// with and without the 2-D rotary table), the patch embedding (CLIP: class token; SigLIP: conv
// bias, an image size that is not a multiple of the patch), and the row moves and learned rows. In
// f32 within 1e-5 relative (the GEMM path, as test_cuda_layers.cpp); in bf16 within 2e-2; copies
// exactly; the bilinear resize of f32 rows and Qwen3-VL's position table bit for bit (the same f32
// operations). Skips without a GPU.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <cmath>
#include <array>
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

double rel_err(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    num += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    den += double(want[i]) * want[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

std::vector<float> random_rows(int64_t n, uint32_t seed) {
  std::vector<float> v(static_cast<size_t>(n));
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (float& x : v) x = d(rng);
  return v;
}

// Random f32 tensors by name (one per name); weights small, so activations stay O(1).
struct RandomTensors {
  std::map<std::string, Tensor> store;
  std::mt19937 rng{7};
  TensorView operator()(const std::string& name, const Shape& shape) {
    auto it = store.find(name);
    if (it != store.end()) return it->second.view();
    Tensor t = Tensor::empty(shape, DType::F32);
    std::uniform_real_distribution<float> u(-0.2f, 0.2f);
    for (int64_t i = 0; i < t.numel(); ++i) t.as<float>()[i] = u(rng);
    return store.emplace(name, std::move(t)).first->second.view();
  }
};

// Device rows of dt from f32 host rows, and back.
struct Dev {
  cuda::DeviceBuffer buf;
  int64_t rows = 0, cols = 0;
  DType dt = DType::F32;
  Dev(const std::vector<float>& v, int64_t r, int64_t c, DType d)
      : buf(cuda::upload_converted({cuda::f32_view(v)}, d, nullptr)), rows(r), cols(c), dt(d) {}
  Act act() const { return Act{buf.get(), rows, cols, dt}; }
  std::vector<float> host() const {
    std::vector<char> raw(static_cast<size_t>(rows * cols) * dtype_size(dt));
    VLM_CUDA_CHECK(cudaDeviceSynchronize());
    VLM_CUDA_CHECK(cudaMemcpy(raw.data(), buf.get(), raw.size(), cudaMemcpyDeviceToHost));
    std::vector<float> out(static_cast<size_t>(rows * cols));
    convert_to_f32(raw.data(), dt, out.data(), rows * cols);
    return out;
  }
};

// A vision call's step on the GPU (as CudaVisionLanes makes it: GEMMs only).
struct GpuStep {
  cudaStream_t stream = nullptr;
  cuda::CublasLtGemm gemm;
  int64_t epoch = 0;
  CudaScratch pool{&epoch};
  CudaStepInts ints;
  CudaStep s;
  GpuStep(DType dt, int64_t T) {
    VLM_CUDA_CHECK(cudaStreamCreate(&stream));
    ints.reserve(1 << 16);
    s.stream = stream, s.dt = dt, s.T = T, s.R = 0;
    s.fused_norm = false, s.gemv = false;
    s.gemm = &gemm, s.pool = &pool, s.ints = &ints;
  }
  ~GpuStep() {
    cudaStreamSynchronize(stream);
    cudaStreamDestroy(stream);
  }
};

// The CPU's rows of the three planes q|k|v [3][T, HD] as the GPU's fused rows [T, 3HD], and back.
std::vector<float> planes_to_rows(const std::vector<float>& p, int64_t T, int64_t HD) {
  std::vector<float> r(p.size());
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < 3; ++j)
      std::copy(p.begin() + (j * T + t) * HD, p.begin() + (j * T + t + 1) * HD, r.begin() + (t * 3 + j) * HD);
  return r;
}

const double kTolF32 = 1e-5, kTolBf16 = 2e-2;
double tol(DType dt) { return dt == DType::F32 ? kTolF32 : kTolBf16; }

class CudaVisionLayer : public ::testing::Test {
 protected:
  void SetUp() override { VLM_REQUIRE_GPU(); }
  RandomTensors t_;
  WeightSource w_{[this](const std::string& n, const Shape& s) { return t_(n, s); }, "v."};
  CpuLayers cpu_;
  ActivationPlan plan_;
};

TEST_F(CudaVisionLayer, NormsLinearAndMlpsMatchTheCpuLayers) {
  const int64_t T = 37, C = 96, I = 160;
  const NormSpec ln{NormKind::Layer, 1e-5f, {"ln.weight", {C}}, "ln.bias"};
  const NormSpec rms{NormKind::Rms, 1e-6f, {"rms.weight", {C}}, ""};
  const std::vector<float> x = random_rows(T * C, 1), resid = random_rows(T * C, 2);
  for (DType dt : {DType::F32, DType::BF16}) {
    CudaLayers gpu(dt);
    CpuStep cs(plan_, T);
    // LayerNorm alone: f32 -> the compute dtype.
    {
      std::vector<float> want(static_cast<size_t>(T * C)), xc = x;
      cpu_.norm(w_, ln)->forward(cs, Act{xc.data(), T, C, DType::F32}, Act{want.data(), T, C, DType::F32});
      GpuStep g(dt, T);
      Dev dx(x, T, C, DType::F32), dh(std::vector<float>(static_cast<size_t>(T * C)), T, C, dt);
      gpu.norm(w_, ln)->forward(g.s, dx.act(), dh.act());
      EXPECT_LE(rel_err(dh.host(), want), tol(dt)) << "layer norm " << dtype_name(dt);
    }
    // A linear layer (with bias) after its LayerNorm.
    {
      const std::vector<LinearPart> fc{{{"fc.weight", {I, C}}, "fc.bias"}};
      std::vector<float> want(static_cast<size_t>(T * I)), xc = x;
      cpu_.linear(w_, fc, &ln)->forward(cs, Act{xc.data(), T, C, DType::F32}, Act{want.data(), T, I, DType::F32});
      GpuStep g(dt, T);
      Dev dx(x, T, C, DType::F32), dy(std::vector<float>(static_cast<size_t>(T * I)), T, I, dt);
      gpu.linear(w_, fc, &ln)->forward(g.s, dx.act(), dy.act(), Accum::Write);
      EXPECT_LE(rel_err(dy.host(), want), tol(dt)) << "linear after a layer norm " << dtype_name(dt);
    }
    // The MLPs with their pre-norm, added into the f32 residual.
    for (MlpKind kind : {MlpKind::QuickGelu, MlpKind::GeluErf, MlpKind::GeluTanh, MlpKind::GatedSilu}) {
      MlpSpec m;
      m.kind = kind, m.hidden = C, m.inner = I;
      if (kind == MlpKind::GatedSilu) m.gate = {{"gate.weight", {I, C}}, "gate.bias"};
      m.up = {{"up.weight", {I, C}}, "up.bias"};
      m.down = {{"down.weight", {C, I}}, "down.bias"};
      m.pre_norm = kind == MlpKind::GatedSilu ? rms : ln;
      const auto cm = cpu_.mlp(w_, m);
      const auto gm = gpu.mlp(w_, m);
      ASSERT_EQ(gm->inner_cols(), cm->inner_cols());
      std::vector<float> want = resid, xc = x, inner(static_cast<size_t>(T * cm->inner_cols()));
      cm->forward(cs, Act{xc.data(), T, C, DType::F32}, Act{inner.data(), T, cm->inner_cols(), DType::F32},
                  Act{want.data(), T, C, DType::F32}, Accum::Add);
      GpuStep g(dt, T);
      Dev dx(x, T, C, DType::F32), dy(resid, T, C, DType::F32);
      Dev din(std::vector<float>(static_cast<size_t>(T * gm->inner_cols())), T, gm->inner_cols(), dt);
      gm->forward(g.s, dx.act(), din.act(), dy.act(), Accum::Add);
      EXPECT_LE(rel_err(dy.host(), want), tol(dt)) << "MLP kind " << static_cast<int>(kind) << " " << dtype_name(dt);
    }
    // A projector: GELU MLP without a norm over compute-dtype rows (rounded the same for the CPU),
    // written (not added) into f32, 3 rows (a GEMV would be chosen on a decoder step).
    {
      const int64_t R = 3;
      MlpSpec m;
      m.kind = MlpKind::GeluErf, m.hidden = C, m.inner = I;
      m.up = {{"p1.weight", {I, C}}, "p1.bias"};
      m.down = {{"p2.weight", {I, I}}, "p2.bias"};
      std::vector<float> in = random_rows(R * C, 3);
      Dev din(in, R, C, dt);
      in = din.host();  // the input as the GPU holds it
      std::vector<float> want(static_cast<size_t>(R * I)), inner(static_cast<size_t>(R * I));
      cpu_.mlp(w_, m)->forward(cs, Act{in.data(), R, C, DType::F32}, Act{inner.data(), R, I, DType::F32},
                               Act{want.data(), R, I, DType::F32}, Accum::Write);
      GpuStep g(dt, R);
      Dev dinner(std::vector<float>(static_cast<size_t>(R * I)), R, I, dt), dy(std::vector<float>(R * I), R, I, DType::F32);
      gpu.mlp(w_, m)->forward(g.s, din.act(), dinner.act(), dy.act(), Accum::Write);
      EXPECT_LE(rel_err(dy.host(), want), tol(dt)) << "projector " << dtype_name(dt);
    }
  }
}

TEST_F(CudaVisionLayer, SegmentAttentionWithAndWithoutRopeMatchesTheCpu) {
  const int64_t H = 2, D = 16, HD = H * D;
  const SegmentAttentionSpec spec{H, D, 1.0f / std::sqrt(static_cast<float>(D))};
  for (const std::vector<int64_t>& cu : {std::vector<int64_t>{0, 3, 8, 16}, std::vector<int64_t>{0, 6, 12, 18}}) {
    const int64_t T = cu.back();
    std::vector<int32_t> pos(static_cast<size_t>(2 * T));
    for (int64_t t = 0; t < T; ++t) pos[2 * t] = static_cast<int32_t>(t / 4), pos[2 * t + 1] = static_cast<int32_t>(t % 4);
    const std::vector<float> planes = random_rows(3 * T * HD, 4);
    for (DType dt : {DType::F32, DType::BF16})
      for (bool rope : {false, true}) {
        CudaLayers gpu(dt);
        Dev dqkv(planes_to_rows(planes, T, HD), T, 3 * HD, dt), dout(std::vector<float>(T * HD), T, HD, dt);
        // The CPU gets the inputs as the GPU holds them (rounded to dt).
        std::vector<float> rows = dqkv.host(), cpu_planes(rows.size());
        for (int64_t t = 0; t < T; ++t)
          for (int64_t j = 0; j < 3; ++j)
            std::copy(rows.begin() + (t * 3 + j) * HD, rows.begin() + (t * 3 + j + 1) * HD,
                      cpu_planes.begin() + (j * T + t) * HD);
        CpuStep cs(plan_, T);
        std::vector<float> want(static_cast<size_t>(T * HD));
        const auto crope = cpu_.vision_rope_table({D, 10000.0});
        const RopeRows cr = crope->build(cs, pos);
        cpu_.segment_attention(spec)->forward(cs, Act{cpu_planes.data(), T, 3 * HD, DType::F32}, rope ? &cr : nullptr,
                                              cu, Act{want.data(), T, HD, DType::F32});
        GpuStep g(dt, T);
        const auto grope = gpu.vision_rope_table({D, 10000.0});
        const RopeRows gr = grope->build(g.s, pos);
        gpu.segment_attention(spec)->forward(g.s, dqkv.act(), rope ? &gr : nullptr, cu, dout.act());
        EXPECT_LE(rel_err(dout.host(), want), tol(dt))
            << dtype_name(dt) << (rope ? " rope" : "") << " segments ending " << T << (cu[1] == 6 ? " (equal)" : "");
      }
  }
}

void check_patch_embedding(RandomTensors& t, bool clip) {
  const int64_t S = clip ? 12 : 13, p = 4, G = 3, C = 24, N = 2, L = G * G + (clip ? 1 : 0);
  const WeightSource w([&t](const std::string& n, const Shape& s) { return t(n, s); }, clip ? "clip." : "siglip.");
  PatchEmbeddingSpec spec;
  spec.image_size = S, spec.patch_size = p;
  spec.conv = {{"conv.weight", {C, 3, p, p}}, clip ? "" : "conv.bias"};
  if (clip) spec.class_embedding = "cls";
  spec.positions = {"pos", {L, C}};
  const std::vector<float> px = random_rows(N * 3 * S * S, 5);
  CpuLayers cpu;
  const ActivationPlan plan;
  CpuStep cs(plan, N * L);
  std::vector<float> want(static_cast<size_t>(N * L * C)), pc = px;
  cpu.patch_embedding(w, spec)->forward(cs, Act{pc.data(), N, 3 * S * S, DType::F32}, Act{want.data(), N * L, C, DType::F32});
  for (DType dt : {DType::F32, DType::BF16}) {
    CudaLayers gpu(dt);
    const auto e = gpu.patch_embedding(w, spec);
    ASSERT_EQ(e->tokens_per_image(), L);
    GpuStep g(dt, N);
    Dev dpx(px, N, 3 * S * S, DType::F32), dx(std::vector<float>(N * L * C), N * L, C, DType::F32);
    e->forward(g.s, dpx.act(), dx.act());
    EXPECT_LE(rel_err(dx.host(), want), tol(dt)) << (clip ? "CLIP" : "SigLIP") << " " << dtype_name(dt);
  }
}

TEST_F(CudaVisionLayer, PatchEmbeddingMatchesTheCpu) {
  check_patch_embedding(t_, /*clip=*/true);
  check_patch_embedding(t_, /*clip=*/false);  // 13 px over 4-px patches: the last pixel dropped
}

TEST_F(CudaVisionLayer, RowOpsAndLearnedRowsMatchTheCpu) {
  const int64_t C = 8;
  const std::vector<float> src = random_rows(12 * C, 6);
  CudaLayers gpu(DType::F32);
  const auto cops = cpu_.row_ops();
  const auto gops = gpu.row_ops();
  GpuStep g(DType::F32, 12);
  CpuStep cs(plan_, 12);
  const Dev dsrc(src, 12, C, DType::F32);
  std::vector<float> sc = src;
  const Act csrc{sc.data(), 12, C, DType::F32};
  auto both = [&](const char* what, int64_t rows, int64_t cols, const auto& cpu_op, const auto& gpu_op) {
    std::vector<float> want(static_cast<size_t>(rows * cols), -3.0f);
    Dev ddst(want, rows, cols, DType::F32);
    cpu_op(Act{want.data(), rows, cols, DType::F32});
    gpu_op(ddst.act());
    EXPECT_EQ(ddst.host(), want) << what;
  };
  const std::vector<int64_t> order{2, 0, 5, 1, 4, 3}, partial{3, 1}, rows{11, 0, 7}, to{2, 0, 5};
  both("gather_units", 12, C, [&](Act d) { cops->gather_units(cs, csrc, order, 2, d); },
       [&](Act d) { gops->gather_units(g.s, dsrc.act(), order, 2, d); });
  both("scatter_units (a permutation)", 12, C, [&](Act d) { cops->scatter_units(cs, csrc, order, 2, d); },
       [&](Act d) { gops->scatter_units(g.s, dsrc.act(), order, 2, d); });
  both("scatter_units (some units)", 12, C, [&](Act d) { cops->scatter_units(cs, csrc, partial, 3, d); },
       [&](Act d) { gops->scatter_units(g.s, dsrc.act(), partial, 3, d); });
  both("gather_rows into a column slot", 3, 3 * C, [&](Act d) { cops->gather_rows(cs, csrc, rows, d, C); },
       [&](Act d) { gops->gather_rows(g.s, dsrc.act(), rows, d, C); });
  both("copy_rows", 6, C, [&](Act d) { cops->copy_rows(cs, csrc, rows, d, to); },
       [&](Act d) { gops->copy_rows(g.s, dsrc.act(), rows, d, to); });
  both("bilinear 3x4 -> 5x2", 10, C, [&](Act d) { cops->bilinear(cs, csrc, 3, 4, 5, 2, d); },
       [&](Act d) { gops->bilinear(g.s, dsrc.act(), 3, 4, 5, 2, d); });
  both("bilinear 4x3 -> 2x2", 4, C, [&](Act d) { cops->bilinear(cs, csrc, 4, 3, 2, 2, d); },
       [&](Act d) { gops->bilinear(g.s, dsrc.act(), 4, 3, 2, 2, d); });
  const WeightRef table{"newline", {2, C}};
  const auto cl = cpu_.learned_rows(w_, table);
  const auto gl = gpu.learned_rows(w_, table);
  both("learned rows", 6, C, [&](Act d) { cl->write(cs, 1, to, d); }, [&](Act d) { gl->write(g.s, 1, to, d); });
}

// Qwen3-VL's interpolated positions: side 5 sampled at grids of 4 x 6 (two frames), 2 x 2 and
// 6 x 4 (merge 2), added into f32 rows: the CPU's bits (the same f32 blends, one add each).
TEST_F(CudaVisionLayer, PositionTableMatchesTheCpuBitForBit) {
  const int64_t C = 40;
  const PositionTableSpec spec{{"pos_embed.weight", {25, C}}, 5, 2};
  const std::vector<std::array<int32_t, 3>> grids = {{2, 4, 6}, {1, 2, 2}, {1, 6, 4}};
  const int64_t P = 2 * 24 + 4 + 24;
  const std::vector<float> x = random_rows(P * C, 8);
  std::vector<float> want = x;
  CpuStep cs(plan_, P);
  cpu_.position_table(w_, spec)->add(cs, grids, Act{want.data(), P, C, DType::F32});
  CudaLayers gpu(DType::BF16);  // the positions add into the f32 residual whatever the compute dtype
  GpuStep g(DType::BF16, P);
  Dev dx(x, P, C, DType::F32);
  gpu.position_table(w_, spec)->add(g.s, grids, dx.act());
  const std::vector<float> got = dx.host();
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0) << "rel error " << rel_err(got, want);
}

}  // namespace
}  // namespace vlm::testing
