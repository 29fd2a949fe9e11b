// The CPU's PatchEmbedding and RowOps::gather_rows against their contracts (model/layers/layers.h),
// computed here directly: a conv of stride = kernel as sums over each patch, class row, positions.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>

#include "model/layers/cpu/cpu_layers.h"
#include "model/layers/cpu/cpu_step.h"

namespace vlm {
namespace {

// Random f32 tensors by name (one per name).
struct RandomTensors {
  std::map<std::string, Tensor> store;
  std::mt19937 rng{3};
  TensorView operator()(const std::string& name, const Shape& shape) {
    auto it = store.find(name);
    if (it != store.end()) return it->second.view();
    Tensor t = Tensor::empty(shape, DType::F32);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (int64_t i = 0; i < t.numel(); ++i) t.as<float>()[i] = u(rng);
    return store.emplace(name, std::move(t)).first->second.view();
  }
};

void check_patch_embedding(bool class_token, bool bias) {
  const int64_t S = 6, p = 3, G = 2, C = 5, N = 2, K = 3 * p * p, L = G * G + (class_token ? 1 : 0);
  RandomTensors t;
  const WeightSource w([&t](const std::string& n, const Shape& s) { return t(n, s); }, "e.");
  PatchEmbeddingSpec spec;
  spec.image_size = S, spec.patch_size = p;
  spec.conv = {{"conv.weight", {C, 3, p, p}}, bias ? "conv.bias" : ""};
  if (class_token) spec.class_embedding = "cls";
  spec.positions = {"pos", {L, C}};
  CpuLayers layers;
  const auto embed = layers.patch_embedding(w, spec);
  ASSERT_EQ(embed->tokens_per_image(), L);
  std::vector<float> px(static_cast<size_t>(N * 3 * S * S));
  std::mt19937 rng(4);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (float& v : px) v = u(rng);
  std::vector<float> x(static_cast<size_t>(N * L * C));
  ActivationPlan plan;
  CpuStep step(plan, N * L);
  embed->forward(step, Act{px.data(), N, 3 * S * S, DType::F32}, Act{x.data(), N * L, C, DType::F32});

  const float* W = t.store.at("e.conv.weight").as<float>();  // [C, 3, p, p]
  const float* pos = t.store.at("e.pos").as<float>();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t r = 0; r < L; ++r)
      for (int64_t c = 0; c < C; ++c) {
        double want = pos[r * C + c];
        if (class_token && r == 0) {
          want += t.store.at("e.cls").as<float>()[c];
        } else {
          const int64_t patch = r - (class_token ? 1 : 0), gy = patch / G, gx = patch % G;
          if (bias) want += t.store.at("e.conv.bias").as<float>()[c];
          for (int64_t ch = 0; ch < 3; ++ch)
            for (int64_t ky = 0; ky < p; ++ky)
              for (int64_t kx = 0; kx < p; ++kx)
                want += double(W[c * K + (ch * p + ky) * p + kx]) *
                        px[static_cast<size_t>(((n * 3 + ch) * S + gy * p + ky) * S + gx * p + kx)];
        }
        EXPECT_NEAR(x[static_cast<size_t>((n * L + r) * C + c)], want, 1e-5)
            << "image " << n << " row " << r << " col " << c << (class_token ? " (class token)" : "");
      }
}

TEST(CpuPatchEmbedding, ConvClassRowAndPositions) {
  check_patch_embedding(/*class_token=*/true, /*bias=*/false);  // CLIP
  check_patch_embedding(/*class_token=*/false, /*bias=*/true);  // SigLIP
}

TEST(CpuRowOps, GatherRowsIntoAColumnSlot) {
  CpuLayers layers;
  const auto ops = layers.row_ops();
  std::vector<float> src(4 * 2), dst(3 * 5, -1.0f);  // [4, 2] into columns [2, 4) of [3, 5]
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i);
  ActivationPlan plan;
  CpuStep step(plan, 4);
  const std::vector<int64_t> rows = {3, 1, 1};
  ops->gather_rows(step, Act{src.data(), 4, 2, DType::F32}, rows, Act{dst.data(), 3, 5, DType::F32}, 2);
  EXPECT_EQ(dst, (std::vector<float>{-1, -1, 6, 7, -1, -1, -1, 2, 3, -1, -1, -1, 2, 3, -1}));
  EXPECT_ANY_THROW(ops->gather_rows(step, Act{src.data(), 4, 2, DType::F32}, rows, Act{dst.data(), 3, 5, DType::F32}, 4));
  const std::vector<int64_t> bad = {0, 4, 1};
  EXPECT_ANY_THROW(ops->gather_rows(step, Act{src.data(), 4, 2, DType::F32}, bad, Act{dst.data(), 3, 5, DType::F32}, 0));
}

// DeepStack's add: plane p of the override's rows goes onto x at the rows it replaces, nothing else;
// without an override it does nothing; a plane outside [1, num_planes) is refused.
TEST(CpuRowOps, AddOverridePlaneOnlyAtMediaRows) {
  CpuLayers layers;
  const auto ops = layers.row_ops();
  ForwardBatch b;
  b.token_ids = {5, 6, 7};
  b.positions = {0, 1, 2};
  b.slot_mapping = {0, 1, 2};
  const int64_t C = 2, planes = 3;
  std::vector<float> embeds(3 * planes * C);  // [T, planes * C]
  for (size_t i = 0; i < embeds.size(); ++i) embeds[i] = static_cast<float>(i);
  const std::vector<uint8_t> use = {0, 1, 1};
  EmbeddingOverride ov;
  ov.embeds = embeds.data();
  ov.use = use.data();
  ov.num_planes = planes;
  std::vector<float> logits, x(3 * C, 100.0f);
  ActivationPlan plan;
  CpuStep step(plan, b, {}, ov, logits);
  ops->add_override_plane(step, 2, Act{x.data(), 3, C, DType::F32});
  // row 1's plane 2: embeds[1 * 6 + 4 ..], row 2's: embeds[2 * 6 + 4 ..]
  EXPECT_EQ(x, (std::vector<float>{100, 100, 110, 111, 116, 117}));
  EXPECT_ANY_THROW(ops->add_override_plane(step, 3, Act{x.data(), 3, C, DType::F32}));
  EXPECT_ANY_THROW(ops->add_override_plane(step, 0, Act{x.data(), 3, C, DType::F32}));
  const EmbeddingOverride none;
  CpuStep plain(plan, b, {}, none, logits);
  ops->add_override_plane(plain, 1, Act{x.data(), 3, C, DType::F32});
  EXPECT_EQ(x, (std::vector<float>{100, 100, 110, 111, 116, 117}));
}

}  // namespace
}  // namespace vlm
